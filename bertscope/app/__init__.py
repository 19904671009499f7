"""The app: the Streamlit pages and what they share, the one floor of the package that imports streamlit.

``router`` (what ``streamlit run app.py`` and ``bertscope app`` run: the sidebar and the navigation over
``kit.pages.PAGES``), one script per page (``home.py``, ``attention.py``, …: they render only), ``kit``
(the pages' shared machinery: the model picker, the result store, the demo's limits and cost budget,
links, errors as one line), ``launch`` (``bertscope app``: a launch folder in the user cache and
``streamlit run`` on it). Needs the ``app`` extra (``pip install 'bertscope[app]'``).
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``tasks``, ``analysis``,
``attribution``, ``retrieval``, ``causal``, ``lenses``, ``training``, ``interventions``, ``circuits``, ``graphs``, ``features``, ``engines``, ``figures``,
``cli``.
"""
