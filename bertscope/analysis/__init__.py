"""Reading representations: ``attention_stats`` (Clark et al. 2019), ``shift`` (Ethayarajh 2019),
``align`` (Libovický et al. 2020), ``hidden_cache`` (hidden states on disk), ``probing``
(Hewitt & Liang 2019), ``probe_store`` (a probe on disk and back), ``corpus_search`` (exBERT),
``projection`` (PCA, UMAP), ``compare`` (two models' layers by linear CKA, Kornblith et al. 2019),
``structural_probe`` and ``structural_runs`` (Hewitt & Manning 2019 on UD English-EWT),
``frozen_layers`` (the BERT paper's Table 7 layer combinations under a linear probe), ``params``,
``timeline``, ``erasure`` (LEACE through concept-erasure, INLP, and the random control of the same rank).
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``.
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "head_stats": "analysis.attention_stats",
    "HeadStats": "analysis.attention_stats",
    "collect": "analysis.shift",
    "layer_metrics": "analysis.shift",
    "embed_parallel": "analysis.align",
    "retrieval": "analysis.align",
    "token_alignment": "analysis.align",
    "hidden_states": "analysis.hidden_cache",
    "HiddenStateCache": "analysis.hidden_cache",
    "probe_layers": "analysis.probing",
    "ProbeResult": "analysis.probing",
    "compare_layers": "analysis.compare",
    "compare_heads": "analysis.compare",
    "linear_cka": "analysis.compare",
    "count_parameters": "analysis.params",
    "build_index": "analysis.corpus_search",
    "fit_eraser": "analysis.erasure",
    "Eraser": "analysis.erasure",
    "search": "analysis.corpus_search",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
