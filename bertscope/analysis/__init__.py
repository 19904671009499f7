"""Reading representations: ``attention_stats`` (Clark et al. 2019), ``shift`` (Ethayarajh 2019),
``align`` (Libovický et al. 2020), ``hidden_cache`` (hidden states on disk), ``probing``
(Hewitt & Liang 2019), ``probe_store`` (a probe on disk and back), ``corpus_search`` (exBERT),
``projection`` (PCA, UMAP), ``compare`` (two models' layers by linear CKA, Kornblith et al. 2019),
``params``, ``timeline``.
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``.
"""
