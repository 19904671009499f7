"""Parts of one page each, written apart because the page would be long with them inline: the Probes page's
tabs (``syntax_tab`` with ``treebank_labels_view`` and ``typed_tree_view``, ``erasure_tab``, ``tcav_tab``), the
Interventions page's classifier and feature tabs (``classifier_interventions``, ``feature_interventions``), the
Compare page's ``model_diff_tab``, the Cross-lingual page's ``udhr_view``. What two or more pages share is in
``kit``; these import it, never each other's page.
"""
