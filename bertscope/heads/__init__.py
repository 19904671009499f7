"""What the pretraining heads say: ``fill_mask``, ``masking`` (BERT's masking rule, its one home),
``mlm_recipe`` (the 80/10/10 corruption of one text, predicted), ``logit_lens`` (the head read at
every layer), ``nsp`` (next-sentence and sentence-order prediction).
May import: ``errors``, ``runtime``, ``sources``, ``core``.
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "fill_mask": "heads.fill_mask",
    "iterative_fill": "heads.fill_mask",
    "mlm_recipe": "heads.mlm_recipe",
    "layerwise_predictions": "heads.logit_lens",
    "next_sentence": "heads.nsp",
    "sentence_order": "heads.nsp",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
