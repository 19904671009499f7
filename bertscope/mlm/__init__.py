"""The masked language model: what BERT's pretraining output layers say (a loaded model's
``outputs``: the masked-LM layer and, beside it, the sentence-pair layer). ``fill_mask``,
``masking`` (BERT's masking rule, its one home), ``recipe`` (the 80/10/10 corruption of one text,
predicted), ``logit_lens`` (the masked-LM layer read at every layer), ``nsp`` (next-sentence and
sentence-order prediction, the pair layer). "Heads" in BertScope are attention heads only.
May import: ``errors``, ``runtime``, ``sources``, ``core``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "iterative_fill": "mlm.fill_mask",
    "layerwise_predictions": "mlm.logit_lens",
    "next_sentence": "mlm.nsp",
    "sentence_order": "mlm.nsp",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.mlm.fill_mask import iterative_fill as iterative_fill
    from bertscope.mlm.logit_lens import layerwise_predictions as layerwise_predictions
    from bertscope.mlm.nsp import next_sentence as next_sentence
    from bertscope.mlm.nsp import sentence_order as sentence_order
