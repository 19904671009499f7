"""Plotly (and bertviz) builders: pure functions from results to figures; no widgets.

One module per view: ``attention``, ``attribution``, ``shift``, ``align``, ``probe``,
``interventions``, ``features``, ``tcav``, ``das``, and the compact encodings they share (``compact``); ``bertviz_assets`` serves
bertviz's scripts locally. Pages in ``bertscope/app/`` call these and only render what they return; nothing
in the library imports it but ``cli``. May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``analysis``, ``attribution``,
``training``, ``interventions``, ``features``, ``circuits``, ``causal``.
"""
