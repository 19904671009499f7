"""Whether a concept or a variable is used: ``cavs`` (``tcav``, Kim et al. 2018: concept activation vectors per
layer, the share of inputs whose decision rises along them, and the t-test against random CAVs that
tells a concept from chance); distributed alignment search (Geiger et al. 2024): ``variables`` (causal
models and their counterfactual pairs), ``interchange`` (interchange interventions through the named hook
points), ``subspaces`` (the rotations and the controls swapped), ``das`` (interchange intervention
training and IIA), ``alignment`` (``align``, ``iia_map``: what a user asks for). May import: ``errors``,
``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``analysis``, ``attribution`` (its decisions and
their gradients), ``tasks``, ``circuits`` (its pairs and where a network decides).
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "tcav": "causal.cavs",
    "TcavResult": "causal.cavs",
    "align": "causal.alignment",
    "iia_map": "causal.alignment",
    "IiaMap": "causal.alignment",
    "DasResult": "causal.das",
    "CausalModel": "causal.variables",
    "Counterfactual": "causal.variables",
    "read_counterfactuals": "causal.variables",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.causal.alignment import IiaMap as IiaMap
    from bertscope.causal.alignment import align as align
    from bertscope.causal.alignment import iia_map as iia_map
    from bertscope.causal.cavs import TcavResult as TcavResult
    from bertscope.causal.cavs import tcav as tcav
    from bertscope.causal.das import DasResult as DasResult
    from bertscope.causal.variables import CausalModel as CausalModel
    from bertscope.causal.variables import Counterfactual as Counterfactual
    from bertscope.causal.variables import read_counterfactuals as read_counterfactuals
