"""Plotly (and bertviz) builders: pure functions from results to figures; no widgets.

One module per analysis: ``attention``, ``shift``, ``align``, ``probe``. Pages in ``views/``
call these and only render what they return.
"""
