"""Attribution beyond raw attention, as a registry (``registry.METHODS``: one record per method).

``rollout`` (rollout and flow), ``blocks`` (norm-based attention, ALTI), ``value_zeroing`` (Mohebbi
et al. 2023), ``gradients`` (gradient x input, integrated gradients, targets), ``results`` (the
types), ``methods`` (the entry points: ``attribute``, ``token_matrices``, ``token_scores``),
``explain`` (every method on one masked prediction). Which to trust: ``items`` (Brown sentences
with a content word-piece masked), ``erasure`` (tokens removed through the attention mask or by
[MASK], p(y) read), ``faithfulness`` (comprehensiveness, sufficiency, leave-one-out agreement,
bootstrap intervals). May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``,
``mlm``, ``analysis``, ``tasks``.
"""

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
