"""What every page shares, so a page only renders: ``model_picker`` (the sidebar's picker, the one
shared copy of each model), ``pages`` (every page's record), ``limits`` (a hosted demo's caps), ``url`` (a page's inputs in its
link), ``results`` (the byte-bounded result store and computing with a progress bar), ``chrome``
(one-line errors, figure config, downloads), ``held`` (choices that keep the session's pick). Imports the library
and streamlit; the library never imports this.
"""
