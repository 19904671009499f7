"""Attribution beyond raw attention, as a registry (``registry.METHODS``: one record per method).

``rollout`` (rollout and flow), ``blocks`` (norm-based attention, ALTI), ``value_zeroing`` (Mohebbi
et al. 2023), ``gradients`` (gradient x input, integrated gradients, targets), ``results`` (the
types), ``methods`` (the entry points: ``attribute``, ``token_matrices``, ``token_scores``),
``explain`` (every method on one masked prediction). Which to trust: ``items`` (Brown sentences
with a content word-piece masked), ``deletion`` (tokens removed through the attention mask or by
[MASK], p(y) read), ``faithfulness`` (comprehensiveness, sufficiency, leave-one-out agreement,
bootstrap intervals). May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``,
``mlm``, ``analysis``, ``tasks``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "attribute": "attribution.methods",
    "token_matrices": "attribution.methods",
    "token_scores": "attribution.methods",
    "Target": "attribution.gradients",
    "METHODS": "attribution.registry",
    "find_method": "attribution.registry",
    "explain_prediction": "attribution.explain",
    "Scoreboard": "attribution.faithfulness",
    "brown_items": "attribution.items",
    "text_items": "attribution.items",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.attribution.explain import explain_prediction as explain_prediction
    from bertscope.attribution.faithfulness import Scoreboard as Scoreboard
    from bertscope.attribution.gradients import Target as Target
    from bertscope.attribution.items import brown_items as brown_items
    from bertscope.attribution.items import text_items as text_items
    from bertscope.attribution.methods import attribute as attribute
    from bertscope.attribution.methods import token_matrices as token_matrices
    from bertscope.attribution.methods import token_scores as token_scores
    from bertscope.attribution.registry import METHODS as METHODS
    from bertscope.attribution.registry import find_method as find_method
