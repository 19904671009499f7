"""Attribution graphs for encoders: transcoders replacing each feed-forward (``features.transcoder``), and for one
decision (a token at [MASK], a class at [CLS]) the graph of features, error nodes and input embeddings whose edges
are direct effects in the frozen linear replacement pass (``frozen``, ``build``), pruned and scored as
circuit-tracer does (``influence``); where each feature fires most (``contexts``). May import: ``errors``, ``runtime``, ``core``, ``features``, ``attribution``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "attribution_graph": "graphs.build",
    "AttributionGraph": "graphs.build",
    "check_decision": "graphs.build",
    "prune_graph": "graphs.influence",
    "graph_scores": "graphs.influence",
    "feature_examples": "graphs.contexts",
    "FeatureExamples": "graphs.contexts",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.graphs.build import AttributionGraph as AttributionGraph
    from bertscope.graphs.build import attribution_graph as attribution_graph
    from bertscope.graphs.build import check_decision as check_decision
    from bertscope.graphs.contexts import FeatureExamples as FeatureExamples
    from bertscope.graphs.contexts import feature_examples as feature_examples
    from bertscope.graphs.influence import graph_scores as graph_scores
    from bertscope.graphs.influence import prune_graph as prune_graph
