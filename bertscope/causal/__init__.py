"""Whether a concept or a variable is used: ``cavs`` (``tcav``, Kim et al. 2018: concept activation vectors per
layer, the share of inputs whose decision rises along them, and the t-test against random CAVs that
tells a concept from chance). May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``,
``mlm``, ``analysis``, ``attribution`` (its decisions and their gradients), ``tasks``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "tcav": "causal.cavs",
    "TcavResult": "causal.cavs",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.causal.cavs import TcavResult as TcavResult
    from bertscope.causal.cavs import tcav as tcav
