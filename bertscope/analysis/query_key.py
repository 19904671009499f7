"""Why a head attends where it does: the query and key vectors behind one row of attention
(bertviz's neuron view, for every family BertScope loads).

For layer l, head h and query token i: q = the query projection's output at i, head h's slice
([d_head]); k_j the key projection's output at every token j ([token, d_head]); their elementwise
products q ⊙ k_j (one cell per dimension: which dimensions make the score); the scores
q·k_j / √d_head; and their softmax, which is the head's attention row (checked against the
model's own attention weights in the tests). The vectors are read at the hook points
``blocks.{l}.attn.hook_q`` and ``hook_k`` (the model's own projections), one pass; nothing of the model is re-implemented. Models with relative position scores
(``position_embedding_type`` other than absolute) add terms this view does not have: refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bertscope.core.forward import inspect
from bertscope.core.hook_points import model_family
from bertscope.core.hooked_pass import ActivationCache, caching_hooks
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError


@dataclass(frozen=True)
class QueryKey:
    tokens: list[str]
    layer: int
    head: int
    query_position: int
    query: np.ndarray  # [d_head]
    keys: np.ndarray  # [token, d_head]
    scale: float  # √d_head

    @property
    def products(self) -> np.ndarray:
        """[token, d_head] q ⊙ k_j."""
        return self.keys * self.query[None, :]

    @property
    def scores(self) -> np.ndarray:
        """[token] q·k_j / √d_head."""
        return self.products.sum(-1) / self.scale

    @property
    def weights(self) -> np.ndarray:
        """[token] softmax of the scores: the head's attention row."""
        s = self.scores - self.scores.max()
        e = np.exp(s)
        return e / e.sum()

    def to_json(self, digits: int = 6) -> dict:
        def r(a):
            return np.round(np.asarray(a, np.float64), digits).tolist()

        return {"tokens": self.tokens, "layer": self.layer, "head": self.head, "query_position": self.query_position,
                "query": r(self.query), "keys": r(self.keys), "products": r(self.products), "scores": r(self.scores),
                "weights": r(self.weights)}


def query_key(lm: LoadedModel, text: str, layer: int, head: int, query: int, pair: str | None = None) -> QueryKey:
    """The query of token ``query`` and every key, for ``layer`` and ``head`` (both from 0)."""
    family = model_family(lm.model)
    kind = family.scores if family.scores != "absolute" else \
        getattr(lm.config, "position_embedding_type", "absolute") or "absolute"  # BERT's relative_key variants
    if kind != "absolute":
        raise BertScopeError(f"{lm.name} adds {kind} positions to its queries and keys or their scores: the "
                             "query/key view shows q·k alone, so it would not equal the weights.")
    if not 0 <= layer < lm.num_layers or not 0 <= head < lm.num_heads:
        raise BertScopeError(f"Layer {layer}, head {head} does not exist: layers 0-{lm.num_layers - 1}, heads "
                             f"0-{lm.num_heads - 1}.")
    names = [f"blocks.{layer}.attn.hook_q", f"blocks.{layer}.attn.hook_k"]
    with lm.hooks(caching_hooks(lm.model, names, captured := ActivationCache())):
        r = inspect(lm, text, pair, with_attentions=False, with_hidden_states=False, with_logits=False)
    if not 0 <= query < r.n_tokens:
        raise BertScopeError(f"Query token {query} is out of range: this input has tokens 0-{r.n_tokens - 1}.")
    d = lm.hidden_size // lm.num_heads
    q = captured[names[0]][0, query, head].float().cpu().numpy()  # [d_head]
    k = captured[names[1]][0, :, head].float().cpu().numpy()  # [token, d_head]
    return QueryKey(list(r.tokens), layer, head, query, q.astype(np.float32), k.astype(np.float32), math.sqrt(d))
