"""Embedding models explained: the model's own sentence embedding as sentence-transformers declares it
(``settings``: modules.json, pooling, dense layers, normalisation, prompts; ``embedding``: computed as
``SentenceTransformer.encode`` does), why two texts are similar, token pair by token pair (``similarity``:
integrated Jacobians, Moeller, Nikolaev & Padó 2023), search over a corpus (``search``, exact or FAISS's HNSW graph:
``vector_index``), rerankers explained (``rerank``), and the two readings exact by construction: learned sparse
retrieval's shared terms (``sparse``: SPLADE) and late interaction's token matches (``late_interaction``: ColBERT's
MaxSim). May import: ``errors``, ``runtime``, ``sources``,
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
    "documents": "retrieval.search",
    "build_index": "retrieval.search",
    "evaluate_squad": "retrieval.search",
    "explain_relevance": "retrieval.rerank",
    "interactions": "retrieval.rerank",
    "evaluate_rerank": "retrieval.rerank",
    "vector_searcher": "retrieval.vector_index",
    "explain_sparse": "retrieval.sparse",
    "sparse_embed": "retrieval.sparse",
    "evaluate_sparse_squad": "retrieval.sparse",
    "SparseMatch": "retrieval.sparse",
    "explain_maxsim": "retrieval.late_interaction",
    "token_vectors": "retrieval.late_interaction",
    "MaxSimMap": "retrieval.late_interaction",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.retrieval.embedding import Embeddings as Embeddings
    from bertscope.retrieval.embedding import embed as embed
    from bertscope.retrieval.embedding import settings_of as settings_of
    from bertscope.retrieval.late_interaction import MaxSimMap as MaxSimMap
    from bertscope.retrieval.late_interaction import explain_maxsim as explain_maxsim
    from bertscope.retrieval.late_interaction import token_vectors as token_vectors
    from bertscope.retrieval.rerank import evaluate_rerank as evaluate_rerank
    from bertscope.retrieval.rerank import explain_relevance as explain_relevance
    from bertscope.retrieval.rerank import interactions as interactions
    from bertscope.retrieval.search import build_index as build_index
    from bertscope.retrieval.search import documents as documents
    from bertscope.retrieval.search import evaluate_squad as evaluate_squad
    from bertscope.retrieval.settings import EmbeddingSettings as EmbeddingSettings
    from bertscope.retrieval.settings import read_settings as read_settings
    from bertscope.retrieval.similarity import PairExplanation as PairExplanation
    from bertscope.retrieval.similarity import explain_pair as explain_pair
    from bertscope.retrieval.similarity import token_contributions as token_contributions
    from bertscope.retrieval.sparse import SparseMatch as SparseMatch
    from bertscope.retrieval.sparse import evaluate_sparse_squad as evaluate_sparse_squad
    from bertscope.retrieval.sparse import explain_sparse as explain_sparse
    from bertscope.retrieval.sparse import sparse_embed as sparse_embed
    from bertscope.retrieval.vector_index import vector_searcher as vector_searcher
