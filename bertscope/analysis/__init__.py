"""Reading representations: ``attention_stats`` (Clark et al. 2019), ``shift`` (Ethayarajh 2019),
``align`` (Libovický et al. 2020), ``hidden_cache`` (hidden states on disk), ``probing``
(Hewitt & Liang 2019), ``probe_store`` (a probe on disk and back), ``corpus_search`` (exBERT),
``projection`` (PCA, UMAP), ``compare`` (two models' layers by linear CKA, Kornblith et al. 2019),
``structural_probe`` and ``structural_runs`` (Hewitt & Manning 2019 on UD English-EWT),
``frozen_layers`` (the BERT paper's Table 7 layer combinations under a linear probe), ``params``,
``timeline``, ``erasure`` (LEACE through concept-erasure, INLP, and the random control of the same rank).
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``.
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.analysis.align import embed_parallel as embed_parallel
    from bertscope.analysis.align import retrieval as retrieval
    from bertscope.analysis.align import token_alignment as token_alignment
    from bertscope.analysis.attention_stats import HeadStats as HeadStats
    from bertscope.analysis.attention_stats import head_stats as head_stats
    from bertscope.analysis.compare import compare_heads as compare_heads
    from bertscope.analysis.compare import compare_layers as compare_layers
    from bertscope.analysis.compare import linear_cka as linear_cka
    from bertscope.analysis.corpus_search import build_index as build_index
    from bertscope.analysis.corpus_search import search as search
    from bertscope.analysis.erasure import Eraser as Eraser
    from bertscope.analysis.erasure import fit_eraser as fit_eraser
    from bertscope.analysis.hidden_cache import HiddenStateCache as HiddenStateCache
    from bertscope.analysis.hidden_cache import hidden_states as hidden_states
    from bertscope.analysis.params import count_parameters as count_parameters
    from bertscope.analysis.probing import ProbeResult as ProbeResult
    from bertscope.analysis.probing import probe_layers as probe_layers
    from bertscope.analysis.shift import collect as collect
    from bertscope.analysis.shift import layer_metrics as layer_metrics
