"""What the pretraining output layers say ("heads" in Hugging Face's words; here "heads" are attention heads): ``fill_mask``, ``masking`` (BERT's masking rule, its one home),
``mlm_recipe`` (the 80/10/10 corruption of one text, predicted), ``logit_lens`` (the head read at
every layer), ``nsp`` (next-sentence and sentence-order prediction).
May import: ``errors``, ``runtime``, ``sources``, ``core``.
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "iterative_fill": "outputs.fill_mask",
    "layerwise_predictions": "outputs.logit_lens",
    "next_sentence": "outputs.nsp",
    "sentence_order": "outputs.nsp",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
