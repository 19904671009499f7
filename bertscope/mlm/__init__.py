"""The masked language model: what BERT's pretraining output layers say (a loaded model's
``outputs``: the masked-LM layer and, beside it, the sentence-pair layer). ``fill_mask``,
``masking`` (BERT's masking rule, its one home), ``recipe`` (the 80/10/10 corruption of one text,
predicted), ``logit_lens`` (the masked-LM layer read at every layer), ``nsp`` (next-sentence and
sentence-order prediction, the pair layer). "Heads" in BertScope are attention heads only.
May import: ``errors``, ``runtime``, ``sources``, ``core``.
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "iterative_fill": "mlm.fill_mask",
    "layerwise_predictions": "mlm.logit_lens",
    "next_sentence": "mlm.nsp",
    "sentence_order": "mlm.nsp",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
