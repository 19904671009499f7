"""BERT's pretraining recipe, continued on any BERT-family encoder.

``recipe`` (``train``: the loop), ``config``, ``instances`` (chunks, NSP/SOP pairs), ``batches``
(the 80/10/10 corruption, by ``heads.masking``'s rule), ``model`` (heads, LoRA), ``steps``
(forward, backward, scoring within a byte budget), ``checkpoint``, ``export``, ``job`` (the
app's background run), ``processes`` and ``launch`` (data-parallel runs through Accelerate). May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``,
``outputs``.
"""

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "train": "training.recipe",
    "RecipeConfig": "training.config",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
