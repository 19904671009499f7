"""Embedding models explained: the model's own sentence embedding as sentence-transformers declares it
(``settings``: modules.json, pooling, dense layers, normalisation, prompts; ``embedding``: computed as
``SentenceTransformer.encode`` does), and why two texts are similar, token pair by token pair (``similarity``:
integrated Jacobians, Moeller, Nikolaev & Padó 2023). May import: ``errors``, ``runtime``, ``sources``,
``corpora``, ``core``, ``analysis``, ``attribution``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "embed": "retrieval.embedding",
    "settings_of": "retrieval.embedding",
    "Embeddings": "retrieval.embedding",
    "EmbeddingSettings": "retrieval.settings",
    "read_settings": "retrieval.settings",
    "explain_pair": "retrieval.similarity",
    "token_contributions": "retrieval.similarity",
    "PairExplanation": "retrieval.similarity",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.retrieval.embedding import Embeddings as Embeddings
    from bertscope.retrieval.embedding import embed as embed
    from bertscope.retrieval.embedding import settings_of as settings_of
    from bertscope.retrieval.settings import EmbeddingSettings as EmbeddingSettings
    from bertscope.retrieval.settings import read_settings as read_settings
    from bertscope.retrieval.similarity import PairExplanation as PairExplanation
    from bertscope.retrieval.similarity import explain_pair as explain_pair
    from bertscope.retrieval.similarity import token_contributions as token_contributions
