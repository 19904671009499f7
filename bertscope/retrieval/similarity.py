"""Why two texts are similar, token pair by token pair: integrated Jacobians (Moeller, Nikolaev & Padó, "An
Attribution Method for Siamese Encoders", EMNLP 2023; "Approximate Attributions for Off-the-Shelf Siamese
Transformers", EACL 2024), held to the authors' code (lucasmllr/xsbert, ``XSTransformer.explain_similarity``).

For a text x with reference r (its special tokens kept, every other token the padding token, attended to, as
xsbert builds it), read at a hidden state (``at``: 0 = the embeddings' output, l = layer l - 1's output, the input of
layer l as xsbert's ``init_attribution_to_layer(l)``), the embedding e (pooled, dense layers, normalised where the
model is, and for a cosine model normalised here too, so the score is a dot product of e's) satisfies per output
dimension k, by the fundamental theorem of calculus along the straight path,

    e_k(x) - e_k(r) = sum_i M[k, i],   M[k, i] = (x_i - r_i) . (1/N) sum_{n=1..N} de_k/dx_i (r + n/N (x - r))

(a right Riemann sum, xsbert's scheme). So for two texts a and b the matrix A = M_a^T M_b [token of a, token of b]
sums to (e(a) - e(r_a)) . (e(b) - e(r_b)) = score - baseline, where baseline = e(a).e(r_b) + e(r_a).e(b) -
e(r_a).e(r_b) is the part of the score the references account for; ``error`` is what the sum misses (the Riemann
sum's error, shrinking as 1/N). Unlike xsbert, the cosine's normalisation is inside e, so the identity is exact
rather than scaled by the embeddings' norms held constant.

M is computed in forward mode where xsbert loops backward passes over the output dimensions (a sentence has fewer
tokens than the embedding has dimensions): one directional derivative per token and step, the pass at each
interpolation point run once and every token's tangent carried on it together (``torch.func.jvp`` under ``vmap``),
batched under a byte budget. A text's M depends on that text alone, so a search explains every hit against
the query's M computed once (``token_contributions``).

``first-order``: the same with one step at the input itself (M = J(x)(x - r)): N times cheaper, and its error
against the identity says how far it is off. ``ig``: each text's integrated gradients on the score with the other
text's embedding held fixed (single-sided: no pairs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from bertscope.core.hook_points import state_hook
from bertscope.core.hooked_pass import run, run_with_cache, turn
from bertscope.core.layers import hidden_label
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.retrieval.embedding import finish, max_tokens, pool, prepared, prompt_tokens, settings_of
from bertscope.retrieval.settings import EmbeddingSettings
from bertscope.runtime.progress import staged

METHODS = {"ij": "integrated Jacobians", "first-order": "first-order (one step at the input)",
           "ig": "integrated gradients, each text with the other held fixed"}
DEFAULT_STEPS = 50  # xsbert's demos
ROW_BYTES = 384 * 2**20  # the activations a batch of interpolation rows holds, at most


@dataclass(frozen=True)
class TokenContributions:
    """One text's part of a pair explanation: ``M`` [dim, token], and its embedding and its reference's."""

    tokens: list[str]
    words: list[int | None]  # [token] the word each token belongs to (None: special tokens and the prompt)
    contributions: np.ndarray  # [dim, token] float64
    embedding: np.ndarray  # [dim] e(x)
    reference: np.ndarray  # [dim] e(r)
    truncated: bool


@dataclass(frozen=True)
class PairExplanation:
    """Why ``a`` and ``b`` are as similar as the model says, token pair by token pair."""

    model: str
    method: str
    steps: int
    at: int  # the hidden state integrated from (0 = the embeddings)
    similarity: str  # cosine | dot
    score: float
    baseline_score: float  # what the references account for: score - baseline = the sum of the pairs
    a: TokenContributions
    b: TokenContributions
    pairs: np.ndarray | None  # [a token, b token] (None for the single-sided "ig")
    a_scores: np.ndarray  # [a token]
    b_scores: np.ndarray  # [b token]
    error: float  # |sum of the attributions - (score - baseline)|
    notes: list[str] = field(default_factory=list)

    def by_words(self) -> tuple[list[str], list[str], np.ndarray | None, np.ndarray, np.ndarray]:
        """(a's words, b's words, the pairs summed over each word's pieces, each text's word totals); special tokens
        and the prompt left out (at the embeddings they carry nothing: the reference keeps them)."""
        def groups(side: TokenContributions) -> tuple[list[str], np.ndarray]:
            ids = sorted({w for w in side.words if w is not None})
            names = [_join([t for t, w in zip(side.tokens, side.words) if w == word]) for word in ids]
            onehot = np.array([[1.0 if w == word else 0.0 for w in side.words] for word in ids])  # [word, token]
            return names, onehot.reshape(len(ids), len(side.words))
        a_names, a_map = groups(self.a)
        b_names, b_map = groups(self.b)
        pairs = None if self.pairs is None else a_map @ self.pairs @ b_map.T
        return a_names, b_names, pairs, a_map @ self.a_scores, b_map @ self.b_scores

    def strongest(self, n: int = 10, words: bool = False) -> list[tuple[str, str, float]]:
        """The ``n`` pairs of largest |attribution|: (a's token or word, b's, value)."""
        if words:
            a_names, b_names, pairs, _, _ = self.by_words()
        else:
            a_names, b_names, pairs = self.a.tokens, self.b.tokens, self.pairs
        if pairs is None:
            return []
        flat = np.argsort(-np.abs(pairs), axis=None)[:n]
        return [(a_names[i], b_names[j], float(pairs[i, j])) for i, j in zip(*np.unravel_index(flat, pairs.shape))]

    def to_json(self, words: bool = False) -> dict:
        if words:
            a_tokens, b_tokens, pairs, a_scores, b_scores = self.by_words()
        else:
            a_tokens, b_tokens, pairs, a_scores, b_scores = (self.a.tokens, self.b.tokens, self.pairs, self.a_scores,
                                                             self.b_scores)
        return {"model": self.model, "method": self.method, "steps": self.steps, "at": hidden_label(self.at),
                "similarity": self.similarity, "score": self.score, "baseline_score": self.baseline_score,
                "a_tokens": list(a_tokens), "b_tokens": list(b_tokens),
                "pairs": None if pairs is None else np.round(pairs, 7).tolist(),
                "a_scores": np.round(a_scores, 7).tolist(), "b_scores": np.round(b_scores, 7).tolist(),
                "error": self.error, "units": "words" if words else "tokens", "notes": list(self.notes)}


def _join(pieces: list[str]) -> str:
    """A word from its pieces (WordPiece's "##" continuations, SentencePiece's "▁" and BPE's "Ġ" word starts)."""
    return "".join(p[2:] if p.startswith("##") else p.replace("▁", "").replace("Ġ", "") for p in pieces)


def reference_ids(lm: LoadedModel, ids: torch.Tensor) -> torch.Tensor:
    """The text's reference: its special tokens kept where they are, every other token the padding token."""
    special = torch.tensor(lm.tokenizer.get_special_tokens_mask(ids.tolist(), already_has_special_tokens=True),
                           dtype=torch.bool)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.unk_token_id
    return torch.where(special, ids, torch.full_like(ids, pad))


def _encoder(lm: LoadedModel, settings: EmbeddingSettings, ids: torch.Tensor, at: int, skip: int):
    """e(g) for a batch ``g`` [rows, token, dim] put in at hidden state ``at`` of the text ``ids`` [token]: the rest of
    the pass through the one owner of a pass (its hook point replacing that state), pooled, finished, and for a cosine
    model normalised."""
    name = state_hook(lm.model, at)
    mask = torch.ones(len(ids), dtype=torch.long, device=lm.device)
    pooled_mask = mask.clone()
    if skip:
        pooled_mask[:skip] = 0

    def encode(g: torch.Tensor) -> torch.Tensor:
        rows = g.shape[0]
        feed = {"input_ids": ids[None].expand(rows, -1).to(lm.device), "attention_mask": mask[None].expand(rows, -1)}
        with turn(lm, eager=True):  # forward-mode derivatives go through the eager attention, not fused kernels
            hidden = run(lm, feed, encoder_only=True, grad=None, hooks={name: lambda _out, hook: g}).last_hidden_state
        e = finish(pool(hidden, pooled_mask[None].expand(rows, -1), settings), settings)
        return torch.nn.functional.normalize(e, dim=1) if settings.similarity == "cosine" and not settings.normalize \
            else e
    return encode


def _state(lm: LoadedModel, ids: torch.Tensor, at: int) -> torch.Tensor:
    """[token, dim] hidden state ``at`` of the text ``ids`` alone."""
    name = state_hook(lm.model, at)
    feed = {"input_ids": ids[None].to(lm.device), "attention_mask": torch.ones(1, len(ids), dtype=torch.long,
                                                                               device=lm.device)}
    _, cache = run_with_cache(lm, feed, [name], encoder_only=True)
    return cache[name][0].detach().float()


def _ordinary_words(word_ids: list[int | None], prompt_end: int) -> list[int | None]:
    """[token] the word each token belongs to, None for the special tokens and the prompt; one line for a text with
    no ordinary token (empty, or only characters the tokenizer drops, such as a zero-width space): its explanation
    would be empty."""
    words = [None if (w is None or i < prompt_end) else w for i, w in enumerate(word_ids)]
    if all(w is None for w in words):
        raise BertScopeError("A text has no word the model reads (it is empty, or only spaces or characters the "
                             "tokenizer drops): there is nothing to explain.")
    return words


def text_tokens(lm: LoadedModel, text: str, kind: str | None = None,
                settings: EmbeddingSettings | None = None) -> int:
    """The tokens ``lm`` reads of ``text`` (its prompt and special tokens in, cut where the model cuts); one line for
    a text with no ordinary token."""
    settings = settings or settings_of(lm)
    (text_in,) = prepared(lm, [text], kind, settings)
    enc = lm.tokenizer(text_in, truncation=True, max_length=max_tokens(lm, settings))
    _ordinary_words(enc.word_ids(), prompt_tokens(lm, settings.prompt(kind)))
    return len(enc["input_ids"])


def pair_cost(lm: LoadedModel, a: str, b: str, method: str = "ij", steps: int = DEFAULT_STEPS,
              kinds: tuple[str | None, str | None] = (None, None)) -> int:
    """The word pieces ``explain_pair`` passes through the model: for ``ij`` each text's tokens moved one at a time at
    every step, a pass of the whole text each (steps x tokens^2 a text); ``first-order`` the same at one step;
    ``ig`` a pass of the text a step. What a hosted demo caps before the job, and one line for a text with nothing
    to explain."""
    settings = settings_of(lm)
    lengths = [text_tokens(lm, text, kind, settings) for text, kind in zip((a, b), kinds)]
    if method == "ig":
        return steps * sum(lengths)
    return (1 if method == "first-order" else steps) * sum(n * n for n in lengths)


def token_contributions(lm: LoadedModel, text: str, kind: str | None = None, steps: int = DEFAULT_STEPS,
                        at: int = 0, settings: EmbeddingSettings | None = None,
                        progress: Callable[[int, int], None] | None = None) -> TokenContributions:
    """One text's ``M`` [dim, token] (see the module's docstring): its tokens' integrated Jacobians times their
    change from the reference.

    Args:
        lm: an embedding model.
        text: the text.
        kind: its prompt ("query", "passage"; None: the default).
        steps: integration steps (1: the first-order estimate).
        at: the hidden state integrated from (0: the embeddings' output).
        settings: ``settings_of(lm)`` when None.
        progress: called with (done, total) batches of interpolation rows (where a Stop acts).

    Returns:
        ``TokenContributions``.
    """
    settings = settings or settings_of(lm)
    if not 0 <= at < lm.num_layers + 1:
        raise BertScopeError(f"Hidden state {at} does not exist: embeddings (0) to layer {lm.num_layers - 1}'s output "
                             f"({lm.num_layers}); the last one leaves nothing to integrate through.")
    if at == lm.num_layers:
        raise BertScopeError("The last layer's output has no layer after it to integrate through: choose an earlier "
                             "hidden state.")
    if steps < 1:
        raise BertScopeError("--steps must be at least 1.")
    (text_in,) = prepared(lm, [text], kind, settings)
    enc = lm.tokenizer(text_in, truncation=True, max_length=max_tokens(lm, settings))
    ids = torch.tensor(enc["input_ids"])
    truncated = len(lm.tokenizer(text_in, verbose=False)["input_ids"]) > len(ids)
    skip = 0 if settings.include_prompt else prompt_tokens(lm, settings.prompt(kind))
    prompt_end = prompt_tokens(lm, settings.prompt(kind))
    words = _ordinary_words(enc.word_ids(), prompt_end)
    tokens = lm.tokenizer.convert_ids_to_tokens(ids.tolist())
    encode = _encoder(lm, settings, ids, at, skip)
    x, r = _state(lm, ids, at), _state(lm, reference_ids(lm, ids), at)  # [token, dim] each
    delta = x - r
    moving = [i for i in range(len(ids)) if bool(delta[i].abs().max() > 0)]  # tokens the reference changes
    with torch.no_grad():
        ends = encode(torch.stack([x, r]))  # [2, dim]: e(x), e(r)
    contributions = _shared_primal(encode, x, r, moving, steps, _rows_a_batch(lm, len(ids)), ends.shape[1],
                                   progress)  # every family: test_families
    return TokenContributions(tokens, words, contributions.numpy(), ends[0].double().cpu().numpy(),
                              ends[1].double().cpu().numpy(), truncated)


def _rows_a_batch(lm: LoadedModel, tokens: int) -> int:
    """Interpolation rows of ``tokens`` a batch holds within ``ROW_BYTES``: a row's activations and their tangents
    (or gradients) at every layer."""
    return max(1, ROW_BYTES // max(1, tokens * lm.hidden_size * 4 * (lm.num_layers * 16 + 8)))


def _shared_primal(encode, x: torch.Tensor, r: torch.Tensor, moving: list[int], steps: int, chunk: int,
                   dim: int, progress: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """M [dim, token] float64 by ``torch.func``: at each batch of interpolation points the pass runs once and the
    tokens' directional derivatives ride on it together (``vmap`` over the tangents of ``jvp``), where one dual row a
    (token, step) would run the pass again for each token. ``chunk`` bounds the rows (points x tangents) a batch
    holds."""
    from torch.func import jvp, vmap

    contributions = torch.zeros(dim, x.shape[0], dtype=torch.float64)
    delta = x - r  # [token, hidden]
    per_batch = max(1, min(len(moving), chunk))  # tangents a batch
    points = max(1, min(steps, chunk // per_batch))  # interpolation points a batch
    alphas = torch.arange(1, steps + 1, dtype=torch.float64).div(steps).float().to(x.device)  # k/N, xsbert's points
    total, done = -(-len(moving) // per_batch) * -(-steps // points), 0  # batches
    with torch.no_grad():
        for first in range(0, len(moving), per_batch):
            token = torch.tensor(moving[first:first + per_batch], device=x.device)
            tangent = torch.zeros(len(token), 1, *x.shape, device=x.device)  # [tangent, 1, token, hidden]
            tangent[torch.arange(len(token), device=x.device), 0, token] = delta[token]  # each moves one token
            for start in range(0, steps, points):
                alpha = alphas[start:start + points]
                primal = r[None] + alpha[:, None, None] * delta[None]  # [point, token, hidden]
                moved = tangent.expand(-1, len(alpha), -1, -1)  # [tangent, point, token, hidden]
                out = vmap(lambda t, primal=primal: jvp(encode, (primal,), (t,))[1])(moved)  # [tangent, point, dim]
                contributions.index_add_(1, token.cpu(), out.sum(1).double().T.cpu() / steps)
                done += 1
                if progress:
                    progress(done, total)
    return contributions


def _integrated_gradients(lm: LoadedModel, text: str, kind: str | None, other: np.ndarray, steps: int, at: int,
                          settings: EmbeddingSettings, progress: Callable[[int, int], None] | None = None
                          ) -> tuple[TokenContributions, np.ndarray]:
    """One text's integrated gradients on e(x) . ``other`` (the other text's embedding, held fixed)."""
    (text_in,) = prepared(lm, [text], kind, settings)
    enc = lm.tokenizer(text_in, truncation=True, max_length=max_tokens(lm, settings))
    ids = torch.tensor(enc["input_ids"])
    skip = 0 if settings.include_prompt else prompt_tokens(lm, settings.prompt(kind))
    prompt_end = prompt_tokens(lm, settings.prompt(kind))
    words = _ordinary_words(enc.word_ids(), prompt_end)
    encode = _encoder(lm, settings, ids, at, skip)
    x, r = _state(lm, ids, at), _state(lm, reference_ids(lm, ids), at)
    target = torch.tensor(other, dtype=torch.float32, device=lm.device)
    total = torch.zeros(len(ids), lm.hidden_size, dtype=torch.float64)
    chunk = _rows_a_batch(lm, len(ids))
    for start in range(0, steps, chunk):
        alpha = (torch.arange(start + 1, min(steps, start + chunk) + 1, dtype=torch.float64) / steps).float()
        g = (r[None] + alpha.to(lm.device)[:, None, None] * (x - r)[None]).requires_grad_(True)
        with torch.enable_grad():
            (encode(g) @ target).sum().backward()
        assert g.grad is not None
        total += g.grad.sum(0).double().cpu()
        if progress:
            progress(min(steps, start + chunk), steps)
    scores = ((x - r).double().cpu() * total / steps).sum(1).numpy()
    with torch.no_grad():
        ends = encode(torch.stack([x, r]))
    side = TokenContributions(lm.tokenizer.convert_ids_to_tokens(ids.tolist()), words,
                              np.zeros((0, len(ids))), ends[0].double().cpu().numpy(), ends[1].double().cpu().numpy(),
                              len(lm.tokenizer(text_in, verbose=False)["input_ids"]) > len(ids))
    return side, scores


def explain_pair(lm: LoadedModel, a: str, b: str, method: str = "ij", steps: int = DEFAULT_STEPS, at: int = 0,
                 kinds: tuple[str | None, str | None] = (None, None),
                 contributions: tuple[TokenContributions | None, TokenContributions | None] = (None, None),
                 progress: Callable[[int, int, str], None] | None = None) -> PairExplanation:
    """Why ``a`` and ``b`` are as similar as ``lm`` says (see the module's docstring).

    Args:
        lm: an embedding model.
        a: the first text (a query, say).
        b: the second (a passage).
        method: "ij" (integrated Jacobians), "first-order" or "ig" (``METHODS``).
        steps: integration steps.
        at: the hidden state integrated from (0: the embeddings' output).
        kinds: each text's prompt ("query", "passage").
        contributions: a side's ``token_contributions`` computed already (a query explained against many hits).
        progress: called with (done, total, stage) batches, a stage a text ("Text a, batches"): where a Stop acts.

    Returns:
        A ``PairExplanation``: the pairs sum to ``score - baseline_score``, to ``error``.
    """
    if method not in METHODS:
        raise BertScopeError(f"Unknown method {method!r}: {', '.join(METHODS)}.")
    if steps < 1:
        raise BertScopeError("--steps must be at least 1.")
    settings = settings_of(lm)
    notes = [settings.note]
    side_progress = [staged(progress, f"Text {name}, batches") for name in "ab"]
    if method == "ig":
        with torch.no_grad():
            from bertscope.retrieval.embedding import embed

            ea, eb = embed(lm, [a], kinds[0], settings).vectors[0], embed(lm, [b], kinds[1], settings).vectors[0]
        if settings.similarity == "cosine" and not settings.normalize:
            ea, eb = ea / np.linalg.norm(ea), eb / np.linalg.norm(eb)
        side_a, a_scores = _integrated_gradients(lm, a, kinds[0], eb.astype(np.float64), steps, at, settings,
                                                 side_progress[0])
        side_b, b_scores = _integrated_gradients(lm, b, kinds[1], ea.astype(np.float64), steps, at, settings,
                                                 side_progress[1])
        score = float(side_a.embedding @ side_b.embedding)
        error = max(abs(a_scores.sum() - (score - side_a.reference @ side_b.embedding)),
                    abs(b_scores.sum() - (score - side_a.embedding @ side_b.reference)))
        notes.append("Integrated gradients of each text with the other's embedding held fixed: each text's scores sum "
                     "to the score less its own reference's score against the other (error: the larger of the two).")
        return PairExplanation(lm.name, method, steps, at, settings.similarity, score,
                               float(score - (a_scores.sum() + b_scores.sum()) / 2), side_a, side_b, None, a_scores,
                               b_scores, float(error), notes)
    n = 1 if method == "first-order" else steps
    side_a = contributions[0] or token_contributions(lm, a, kinds[0], n, at, settings, side_progress[0])
    side_b = contributions[1] or token_contributions(lm, b, kinds[1], n, at, settings, side_progress[1])
    pairs = side_a.contributions.T @ side_b.contributions  # [a token, b token]
    score = float(side_a.embedding @ side_b.embedding)
    baseline = float(side_a.embedding @ side_b.reference + side_a.reference @ side_b.embedding
                     - side_a.reference @ side_b.reference)
    for side, name in ((side_a, "a"), (side_b, "b")):
        if side.truncated:
            notes.append(f"Text {name} is longer than the model reads ({max_tokens(lm, settings)} tokens): it was cut "
                         "there.")
    return PairExplanation(lm.name, method, n, at, settings.similarity, score, baseline, side_a, side_b, pairs,
                           pairs.sum(1), pairs.sum(0), float(abs(pairs.sum() - (score - baseline))), notes)
