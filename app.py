"""BertScope: ``streamlit run app.py`` here, or ``bertscope app`` anywhere once the package is installed.
Both run the router that ships in the package (``bertscope.app.router``)."""

from bertscope.app.router import run

run()
