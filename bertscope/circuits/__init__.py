"""Circuits in encoders: which paths through the model carry a decision.

``graph`` (the encoder's computational graph as EAP-IG builds it: senders, receivers, edges, pruning),
``pairs`` (clean/corrupted pairs and where the decision is read), ``runs`` (each block's weights, a run
recorded, a pair's two runs), ``contributions`` (a post-LayerNorm stream split into one contribution per
sender), ``decomposed`` (the circuit pass on them; ``norm_transport`` carries them through a LayerNorm in
one sweep), ``edges`` (EAP, EAP-IG on the inputs and
on the activations), ``nodes`` (attribution patching over nodes, held to exact patching), ``tasks``
(built-in pair datasets checked on the shipped models), ``find`` (attribute on half the pairs, score
circuits of every size on the other half), ``faithfulness`` (circuits scored as MIB scores them: CPR and CMD beside random
circuits).
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``tasks``, ``attribution`` (a vocabulary item as typed),
``interventions``
(exact patching, the reference node attribution is held to).
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "CircuitGraph": "circuits.graph",
    "Pair": "circuits.pairs",
    "read_pairs": "circuits.pairs",
    "task_pairs": "circuits.tasks",
    "TASKS": "circuits.tasks",
    "attribute_nodes": "circuits.nodes",
    "compare_with_patching": "circuits.nodes",
    "attribute_edges": "circuits.edges",
    "EdgeScores": "circuits.edges",
    "faithfulness_curve": "circuits.faithfulness",
    "find_circuit": "circuits.find",
    "CircuitResult": "circuits.find",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.circuits.edges import EdgeScores as EdgeScores
    from bertscope.circuits.edges import attribute_edges as attribute_edges
    from bertscope.circuits.faithfulness import faithfulness_curve as faithfulness_curve
    from bertscope.circuits.find import CircuitResult as CircuitResult
    from bertscope.circuits.find import find_circuit as find_circuit
    from bertscope.circuits.graph import CircuitGraph as CircuitGraph
    from bertscope.circuits.nodes import attribute_nodes as attribute_nodes
    from bertscope.circuits.nodes import compare_with_patching as compare_with_patching
    from bertscope.circuits.pairs import Pair as Pair
    from bertscope.circuits.pairs import read_pairs as read_pairs
    from bertscope.circuits.tasks import TASKS as TASKS
    from bertscope.circuits.tasks import task_pairs as task_pairs
