"""Late interaction explained: ColBERT's MaxSim (Khattab & Zaharia, SIGIR 2020) as a match map, exact by
construction: every query token finds its most similar passage token, and the score is the sum of those maxima
(ColBERT issue 90, "Retrieve top token-token matches").

    >>> from bertscope import load_model
    >>> from bertscope.retrieval.late_interaction import explain_maxsim
    >>> m = explain_maxsim(load_model("bundled"), "Who wrote the Iliad?", "Homer wrote the Iliad.")
    >>> m.kind, abs(float(m.contributions.sum()) - m.score) < 1e-9, m.matches(1)[0][:2]
    ('token vectors', True, ('il', 'il'))

**ColBERT checkpoints in PyLate's format** (``modules.json``: a Transformer then a ``Dense`` projection without bias;
``config_sentence_transformers.json``: ``query_prefix``, ``document_prefix``, ``query_length``,
``document_length``, ``do_query_expansion``, ``attend_to_expansion_tokens``, ``skiplist_words``) are read as PyLate's ``ColBERT.encode``
reads them (its code, lightonai/pylate ``models/colbert.py``; held to PyLate 1.6.0 in the peers lane):

- a query: cut at ``query_length - 1`` pieces, padded to that length with the mask token (query augmentation,
  unless ``do_query_expansion`` is false: the pads are ``[MASK]`` tokens, attended to only when
  ``attend_to_expansion_tokens``), the query prefix inserted after the first special token; every position kept,
  the expansion tokens included;
- a passage: cut at ``document_length - 1``, not padded, the document prefix inserted the same way; the positions
  whose token is in the skiplist (punctuation by default) dropped; an empty prefix is no prefix (and no length
  taken from the cut);
- each kept position: the last hidden state through the projection, L2-normalised; the score of a query and a
  passage is ``sum_q max_d q . d``.

**Any other encoder** is read the same way without prefixes, padding or projection: its last hidden states,
normalised, matched greedily (BERTScore's matching, Zhang et al. 2020): what its token vectors share, stated as not
a model trained for late interaction.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bertscope.core.hooked_pass import check_text, run
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import apply_dense, model_folder
from bertscope.retrieval.settings import ACTIVATIONS, DenseLayer, read_json


@dataclass(frozen=True)
class ColbertSettings:
    """How a checkpoint turns a text into token vectors (PyLate's defaults where it does not say)."""

    query_prefix: str | None = "[Q] "
    document_prefix: str | None = "[D] "
    query_length: int = 32
    document_length: int = 180
    attend_to_expansion_tokens: bool = False
    query_expansion: bool = True  # queries padded with [MASK] to query_length (PyLate's do_query_expansion)
    skiplist_words: tuple[str, ...] = tuple(string.punctuation)
    dense: tuple[DenseLayer, ...] = ()
    declared: bool = False  # a ColBERT checkpoint; False: the encoder's own token vectors (no prefix, no projection)

    @property
    def kind(self) -> str:
        return "ColBERT" if self.declared else "token vectors"

    @property
    def note(self) -> str:
        if self.declared:
            query = f"queries padded to {self.query_length} tokens with [MASK] (expansion)" if self.query_expansion \
                else f"queries cut at {self.query_length} tokens"
            skipped = "punctuation skipped" if set(self.skiplist_words) == set(string.punctuation) else \
                f"{len(self.skiplist_words)} skiplist words skipped"
            return (f"A ColBERT checkpoint (PyLate's settings in its folder): {query}, passages cut at "
                    f"{self.document_length}, {skipped}, {self.dense[-1].out_features if self.dense else '?'}-wide "
                    "normalised token vectors, MaxSim (the sum of each query token's best match).")
        return ("Not a ColBERT checkpoint: its last hidden states, normalised, each query token matched to its most "
                "similar passage token (BERTScore's greedy matching, summed rather than averaged; special tokens and "
                "punctuation left out): what its token vectors share, not a model trained for late interaction.")


def _prefix(value: object, default: str) -> str | None:
    """PyLate 1.6's reading of a prefix: missing or null is its default, an empty string is no prefix."""
    if value is None:
        return default
    return str(value) or None


def read_colbert(folder: str | Path | None) -> ColbertSettings | None:
    """A PyLate ColBERT checkpoint's settings in ``folder``; None for any other folder."""
    root = Path(folder) if folder is not None else None
    if root is None or not (root / "config_sentence_transformers.json").is_file() or \
            not (root / "modules.json").is_file():
        return None
    st = read_json(root / "config_sentence_transformers.json")
    if str(st.get("similarity_fn_name", "")).lower() != "maxsim" and "query_prefix" not in st:
        return None
    try:
        modules = json.loads((root / "modules.json").read_text(encoding="utf-8"))
        kinds = [(str(m.get("type", "")).rsplit(".", 1)[-1], m) for m in modules]
    except (OSError, ValueError, AttributeError, TypeError) as err:
        raise BertScopeError(f"{root / 'modules.json'} is not a list of modules ({err}).") from None
    dense = []
    for kind, module in kinds:
        if kind == "Transformer":
            continue
        if kind != "Dense":
            raise BertScopeError(f"{root}: a ColBERT module {module.get('type')!r}: BertScope reads a Transformer "
                                 "then Dense projections.")
        path = root / str(module.get("path", ""))
        config = read_json(path / "config.json")
        if not (path / "model.safetensors").is_file():
            raise BertScopeError(f"{path} holds no model.safetensors: BertScope never opens pickled weights.")
        activation = ACTIVATIONS.get(str(config.get("activation_function", "torch.nn.modules.linear.Identity")))
        if activation is None or config.get("use_residual"):
            raise BertScopeError(f"{path}: a projection BertScope does not compute ({config.get('activation_function')}"
                                 f"{', residual' if config.get('use_residual') else ''}).")
        try:
            dense.append(DenseLayer(path, int(config["in_features"]), int(config["out_features"]),
                                    bool(config.get("bias", False)), activation))
        except (KeyError, TypeError, ValueError):
            raise BertScopeError(f"{path / 'config.json'} does not give the projection's in_features and "
                                 "out_features.") from None
    if not dense:
        raise BertScopeError(f"{root}: a ColBERT checkpoint without its projection (PyLate's 1_Dense).")
    expansion = st.get("do_query_expansion")
    expansion = True if expansion is None else bool(expansion)
    return ColbertSettings(_prefix(st.get("query_prefix"), "[Q] "), _prefix(st.get("document_prefix"), "[D] "),
                           int(st.get("query_length") or 32), int(st.get("document_length") or 180),
                           expansion and bool(st.get("attend_to_expansion_tokens", False)), expansion,
                           tuple(st.get("skiplist_words") or string.punctuation), tuple(dense), declared=True)


def colbert_settings(lm: LoadedModel) -> ColbertSettings:
    """The model's ColBERT settings, or the plain token-vector reading of any other encoder."""
    found = read_colbert(model_folder(lm))
    return found or ColbertSettings(None, None, lm.max_length, lm.max_length, False, False,
                                    tuple(string.punctuation), (), declared=False)


def _prefix_id(lm: LoadedModel, prefix: str | None) -> int | None:
    if prefix is None:
        return None
    found = lm.tokenizer.convert_tokens_to_ids(prefix)
    if found is None:
        found = lm.tokenizer.unk_token_id
    if found is None:
        raise BertScopeError(f"{lm.name}'s tokenizer has no token {prefix!r} (the checkpoint's prefix) and no unknown "
                             "token to stand for it.")
    return int(found)


def _pad_id(lm: LoadedModel) -> int:
    """What PyLate pads a query with: the mask token, else the end-of-sequence token, else the padding token."""
    tok = lm.tokenizer
    for found in (tok.mask_token_id, tok.eos_token_id, tok.pad_token_id):
        if found is not None:
            return int(found)
    raise BertScopeError(f"{lm.name}'s tokenizer has no mask, end or padding token to expand a query with.")


@dataclass(frozen=True)
class TokenVectors:
    """One text's token vectors as the model scores them."""

    tokens: list[str]  # the kept positions' tokens
    vectors: np.ndarray  # [token, dim] float64, unit rows
    expansion: list[bool]  # [token] a query's padding [MASK] (query augmentation)
    truncated: bool


def token_vectors(lm: LoadedModel, text: str, is_query: bool, settings: ColbertSettings | None = None) -> TokenVectors:
    """The text's token vectors, as PyLate's ``ColBERT.encode(..., is_query=...)`` computes them (see the module).

    Args:
        lm: a ColBERT checkpoint or any encoder.
        text: the query or passage.
        is_query: a query (prefix, [MASK] padding, every position kept) or a passage (skiplist dropped).
        settings: ``colbert_settings(lm)`` when None.

    Returns:
        ``TokenVectors``.
    """
    settings = settings or colbert_settings(lm)
    text = check_text(text, "query" if is_query else "passage").strip()
    tok = lm.tokenizer
    prefix = _prefix_id(lm, settings.query_prefix if is_query else settings.document_prefix)
    room = (settings.query_length if is_query else settings.document_length) - (1 if prefix is not None else 0)
    room = min(room, lm.max_length - (1 if prefix is not None else 0))
    full = tok(text, truncation=False, verbose=False)["input_ids"]
    ids = tok(text, truncation="longest_first", max_length=room)["input_ids"]
    expansion = [False] * len(ids)
    attend = [1] * len(ids)
    if is_query and settings.query_expansion and len(ids) < room:  # query augmentation: padded with the mask token
        pad = room - len(ids)
        ids, expansion = ids + [_pad_id(lm)] * pad, expansion + [True] * pad
        attend += [1 if settings.attend_to_expansion_tokens else 0] * pad
    if prefix is not None:
        ids, expansion, attend = ids[:1] + [prefix] + ids[1:], [False] + expansion, [1] + attend
    feed = {"input_ids": torch.tensor([ids], device=lm.device),
            "attention_mask": torch.tensor([attend], device=lm.device)}
    if "token_type_ids" in tok.model_input_names:
        feed["token_type_ids"] = torch.zeros_like(feed["input_ids"])
    with torch.no_grad():
        hidden = run(lm, feed, encoder_only=True, grad=False).last_hidden_state[0].double()  # [token, dim]
        hidden = apply_dense(hidden, settings.dense)  # [token, out]
    skip = {tok.convert_tokens_to_ids(w) for w in settings.skiplist_words} if not is_query else set()
    if not settings.declared:  # BERTScore's matching leaves the special tokens out (its idf weighs them 0)
        skip |= set(tok.all_special_ids)
    keep = np.array([i not in skip for i in ids])
    vectors = torch.nn.functional.normalize(hidden, p=2, dim=1).cpu().numpy()[keep]
    tokens = [t for t, k in zip(tok.convert_ids_to_tokens(ids), keep) if k]
    return TokenVectors(tokens, vectors, [e for e, k in zip(expansion, keep) if k], len(full) > room)


@dataclass(frozen=True)
class MaxSimMap:
    """Why a passage scores as it does under late interaction: each query token's best match."""

    model: str
    kind: str  # "ColBERT" | "token vectors"
    note: str
    query_tokens: list[str]
    passage_tokens: list[str]
    similarities: np.ndarray  # [query token, passage token] cosine of the token vectors
    best: np.ndarray  # [query token] the passage token each query token matches
    contributions: np.ndarray  # [query token] its maximum: its part of the score
    expansion: list[bool]  # [query token] a [MASK] pad (query augmentation)
    score: float  # sum of the contributions
    truncated: tuple[bool, bool] = (False, False)  # (query, passage) cut at the model's lengths

    def matches(self, n: int = 10) -> list[tuple[str, str, float]]:
        """The ``n`` strongest (query token, passage token, similarity) matches."""
        order = np.argsort(-self.contributions, kind="stable")[:n]
        return [(self.query_tokens[i], self.passage_tokens[self.best[i]], float(self.contributions[i])) for i in order]

    def to_json(self) -> dict:
        return {"model": self.model, "method": "maxsim", "kind": self.kind, "note": self.note, "score": self.score,
                "query_tokens": self.query_tokens, "passage_tokens": self.passage_tokens,
                "similarities": self.similarities.round(7).tolist(), "best": self.best.tolist(),
                "contributions": self.contributions.round(7).tolist(), "expansion": self.expansion,
                "truncated": {"query": self.truncated[0], "passage": self.truncated[1]}}


def explain_maxsim(lm: LoadedModel, query: str, passage: str, settings: ColbertSettings | None = None) -> MaxSimMap:
    """The query's and the passage's token vectors, their similarity map, each query token's best match and share.

    Args:
        lm: a ColBERT checkpoint (PyLate's format) or any encoder (its token vectors).
        query: the query.
        passage: the passage.
        settings: ``colbert_settings(lm)`` when None.

    Returns:
        A ``MaxSimMap``: the score is the sum of ``contributions``, exactly.
    """
    settings = settings or colbert_settings(lm)
    q = token_vectors(lm, query, True, settings)
    d = token_vectors(lm, passage, False, settings)
    if not len(q.tokens):
        raise BertScopeError("The query has no token to match (special tokens only): give it some words.")
    if not len(d.tokens):
        raise BertScopeError("Every token of the passage is left out (punctuation, special or unknown tokens): give "
                             "it some words.")
    sims = q.vectors @ d.vectors.T  # [query token, passage token]
    best = sims.argmax(1)
    contributions = sims[np.arange(len(best)), best]
    return MaxSimMap(lm.name, settings.kind, settings.note, q.tokens, d.tokens, sims, best, contributions,
                     q.expansion, float(contributions.sum()), (q.truncated, d.truncated))
