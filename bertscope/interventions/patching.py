"""Activation patching: where does the information that decides a prediction live? (Vig et al.
2020, causal mediation analysis; Meng et al. 2022, causal tracing.)

Two inputs with the same number of tokens, a clean and a corrupted one ("The keys to the cabinet
[MASK] …" / "The key to the cabinet [MASK] …"), and a metric read on the corrupted run: the logit
difference of two candidate tokens at its first [MASK] (``are`` − ``is``). Then, one cell at a time,
a piece of the clean run is put into the corrupted run and the metric read again, reported as the
recovered fraction ``(m_patched − m_corrupt) / (m_clean − m_corrupt)``: 0 where the piece carries
nothing of the difference, 1 where it carries all of it.

- ``hidden``: hidden state s (the embeddings, then each layer's output, ``core.layers``) at one
  position, for every (s, position): ``(L + 1) x T`` cells.
- ``heads``: one head's slice of the attention context (before the output projection, at every
  position), for every (layer, head): ``L x H`` cells.

Cells run as rows of a batch: a layer's positions go through the model together, as many rows
as the byte budget of a pass allows (``passes.rows_within_budget``), not one forward per cell.
The clean pieces are captured with the same hooks that put them back, so patching every position
of a hidden state reproduces the clean run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from bertscope.attribution.gradients import token_id
from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES, row_feed, tokenize
from bertscope.core.hook_points import every_layer, every_state
from bertscope.core.hooked_pass import check_text, turn
from bertscope.core.layers import hidden_labels
from bertscope.core.models import LoadedModel
from bertscope.core.passes import repeat_feed, rows_within_budget, wide
from bertscope.core.task_head import SEQUENCE, SPANS
from bertscope.errors import BertScopeError
from bertscope.mlm.fill_mask import require_mlm
from bertscope.mlm.logit_lens import mlm_head
from bertscope.tasks.spans import span_margin, two_spans

What = Literal["hidden", "heads"]
WHATS = ("hidden", "heads")
METRIC = "logit_diff"
SPAN_METRIC = "span_score_diff"  # (start + end logits) of one span less another's
MIN_DIFFERENCE = 1e-4  # |m_clean - m_corrupt| below this leaves nothing to recover


@dataclass(frozen=True)
class PatchSetup:
    """The two runs and the metric, ready for cells."""

    clean: str
    corrupt: str
    clean_tokens: list[str]
    tokens: list[str]  # the corrupted input's tokens
    position: int  # the [MASK] of the corrupted input the metric reads
    candidates: tuple[str, str]
    candidate_ids: tuple[int, int]
    clean_feed: dict  # [1, token] each, on the device
    corrupt_feed: dict
    reads: str = "mask"  # "mask": the masked-LM head at ``position``; "class": a classifier's two labels
    # (``candidate_ids`` their indices); "value": a regression head's value; "span": a question-answering head's
    # score of two spans of ``context`` (``candidate_ids`` their first pieces, ``candidate_ends`` their last)
    context: str = ""
    candidate_ends: tuple[int, int] = (0, 0)


def _read(lm: LoadedModel, feed: dict, setup: PatchSetup, hooks: dict | None = None, grad: bool | None = False
          ) -> torch.Tensor:
    """[rows] the metric of a pass: the masked-LM head reads one position of the base model's last
    state; a classifier's head runs as the model's own. ``grad`` as ``core.hooked_pass.run``'s."""
    if setup.reads == "mask":
        return _metric(lm, _pass(lm, feed, hooks, grad), setup)
    if setup.reads == "span":
        out = lm.run(feed, hooks=hooks, grad=grad)
        (a, b), (a_end, b_end) = setup.candidate_ids, setup.candidate_ends
        return span_margin(wide(out.start_logits), wide(out.end_logits), (a, a_end), (b, b_end))  # [rows]
    logits = wide(lm.run(feed, hooks=hooks, grad=grad).logits)  # [rows, label]
    if setup.reads == "value":
        return logits[:, 0]
    a, b = setup.candidate_ids
    return logits[:, a] - logits[:, b]


def read_metric(lm: LoadedModel, feed: dict, setup: PatchSetup, hooks: dict | None = None,
                grad: bool | None = False) -> torch.Tensor:
    """[rows] the metric of a pass with ``hooks`` ({hook name: fn}): what every patching reads
    (``grad=True``: with gradients, for attribution patching)."""
    return _read(lm, feed, setup, hooks, grad)


def _metric(lm: LoadedModel, last_hidden: torch.Tensor, setup: PatchSetup) -> torch.Tensor:
    """[rows] logit(candidate A) − logit(candidate B) at the mask, from [rows, token, dim]."""
    logits = wide(mlm_head(lm)(last_hidden[:, setup.position]))  # [rows, vocab]
    a, b = setup.candidate_ids
    return logits[:, a] - logits[:, b]


def prepare(lm: LoadedModel, clean: str, corrupt: str, candidates: Sequence[str], context: str = "") -> PatchSetup:
    """Both inputs tokenised and checked: the same token count, a mask in the corrupted one, two
    candidates that are one vocabulary item each (a classifier: two of its labels; no mask needed; a
    question-answering model: two questions of ``context`` and two of its spans)."""
    reads = "mask"
    if lm.task is not None and lm.task.kind == SPANS:
        return _prepare_span(lm, clean, corrupt, candidates, context)
    if lm.task is not None and lm.task.kind == SEQUENCE:
        reads = "value" if lm.task.scoring == "none" else "class"
    elif lm.task is not None:
        raise BertScopeError(f"Patching watches a masked-token prediction or a classifier's labels; {lm.name} is a "
                             f"{lm.task.kind.replace('-', ' ')} model.")
    else:
        require_mlm(lm)
    clean, corrupt = check_text(clean, "clean text"), check_text(corrupt, "corrupted text")
    if reads == "value":
        a, b, ids = "value", "", (0, 0)
    else:
        what = "labels, e.g. positive,negative" if reads == "class" else "candidate tokens, e.g. are,is"
        if len(candidates) != 2 or not all(str(c).strip() for c in candidates):
            raise BertScopeError(f"Give two {what}: the metric is their logit difference.")
        a, b = (str(c).strip() for c in candidates)
        if reads == "class":
            missing = [c for c in (a, b) if c not in lm.task.labels]
            if missing:
                raise BertScopeError(f"{lm.name} has no label {missing[0]!r}: its labels are "
                                     f"{', '.join(lm.task.labels[:20])}.")
            ids = (lm.task.labels.index(a), lm.task.labels.index(b))
        else:
            ids = (token_id(lm, a), token_id(lm, b))
        if ids[0] == ids[1]:
            raise BertScopeError(f"{a!r} and {b!r} are the same {'label' if reads == 'class' else 'vocabulary item'}: "
                                 "give two different candidates.")
    tokenized = tokenize(lm, [clean, corrupt], [None, None])
    n_clean, n_corrupt = tokenized.original
    if n_clean > lm.max_length or n_corrupt > lm.max_length:
        raise BertScopeError(f"{lm.name} reads at most {lm.max_length} tokens; the inputs have {n_clean} and {n_corrupt}.")
    if n_clean != n_corrupt:
        raise BertScopeError(f"The clean text has {n_clean} tokens and the corrupted one {n_corrupt}: patching puts "
                             f"each position of one into the other, so both need the same number.")
    mask_id = lm.tokenizer.mask_token_id
    corrupt_ids = tokenized.encodings[1].ids
    if reads != "mask":
        pass
    elif mask_id is None or mask_id not in corrupt_ids:
        raise BertScopeError(f"The corrupted text has no {lm.tokenizer.mask_token or '[MASK]'}: put one where the "
                             f"candidates compete.")
    tokens = [lm.tokenizer.convert_ids_to_tokens(e.ids) for e in tokenized.encodings]
    position = corrupt_ids.index(mask_id) if reads == "mask" else 0  # a classifier's head reads [CLS]
    return PatchSetup(clean, corrupt, tokens[0], tokens[1], position, (a, b), ids, row_feed(lm, tokenized, 0),
                      row_feed(lm, tokenized, 1), reads=reads)


def _prepare_span(lm: LoadedModel, clean: str, corrupt: str, candidates: Sequence[str], context: str) -> PatchSetup:
    """Two questions of one context, two spans of it: the metric is the first span's score less the second's."""
    clean, corrupt = check_text(clean, "clean question"), check_text(corrupt, "corrupted question")
    if not context.strip():
        raise BertScopeError(f"{lm.name} answers questions about a context: give the context both questions ask of.")
    context = check_text(context.strip(), "context")
    if len(candidates) != 2 or not all(str(c).strip() for c in candidates):
        raise BertScopeError("Give two spans of the context, e.g. the man,the dog: the metric is their score difference.")
    a, b = (str(c).strip() for c in candidates)
    both, ((a_first, a_last), (b_first, b_last)) = two_spans(lm, clean, corrupt, context, (a, b), "this example")
    return PatchSetup(clean, corrupt, *both.tokens, a_first, (a, b), (a_first, b_first), *both.feeds,
                      reads="span", context=context, candidate_ends=(a_last, b_last))


def _pass(lm: LoadedModel, feed: dict, hooks: dict | None = None, grad: bool | None = False) -> torch.Tensor:
    """[rows, token, dim] the last hidden state (the base model only; the head reads one position)."""
    return lm.run(feed, hooks=hooks, encoder_only=True, grad=grad).last_hidden_state


def _hooks(lm: LoadedModel, what: What, fn) -> dict:
    """``fn(index, x)`` on every hidden state (0 = embeddings) or every layer's head contexts."""
    if what == "hidden":
        return every_state(lm.model, fn)
    return every_layer("attn.hook_z", fn, lm.num_layers)


def capture(lm: LoadedModel, setup: PatchSetup, what: What) -> tuple[torch.Tensor, float, float]:
    """(the clean run's pieces, m_clean, m_corrupt). Pieces: [state, token, dim] hidden states or
    [layer, token, head, d_head] head contexts, read by the hooks that will put them back."""
    pieces: dict[int, torch.Tensor] = {}

    def keep(index: int, x: torch.Tensor) -> None:  # x [1, token, dim] or [1, token, head, d_head]
        pieces[index] = x[0].detach().clone()
        return None

    with turn(lm), torch.inference_mode():
        m_clean = float(_read(lm, setup.clean_feed, setup, _hooks(lm, what, keep))[0])
        m_corrupt = float(_read(lm, setup.corrupt_feed, setup)[0])
    return torch.stack([pieces[i] for i in sorted(pieces)]), m_clean, m_corrupt


def patched_metrics(lm: LoadedModel, setup: PatchSetup, what: What, cells: Sequence[tuple[int, Sequence[int]]],
                    clean_pieces: torch.Tensor, max_batch_bytes: int = DEFAULT_BATCH_BYTES,
                    progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """[cell] the metric on the corrupted run with each cell's clean pieces put in. A cell is
    (hidden state, positions) for ``hidden``, (layer, heads) for ``heads``."""
    n_tokens = len(setup.tokens)
    per_batch = rows_within_budget(lm, n_tokens, max_batch_bytes)
    out = np.empty(len(cells), np.float64)
    # [(row, state or layer, position or head)] flattened: one index per patched piece
    flat = [(row, where, int(i)) for row, (where, which) in enumerate(cells) for i in which]
    done = 0
    for start in range(0, len(cells), per_batch):
        stop = min(start + per_batch, len(cells))
        groups: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for where in sorted({w for r, w, _ in flat if start <= r < stop}):
            pairs = [(r - start, i) for r, w, i in flat if start <= r < stop and w == where]
            rows = torch.tensor([p[0] for p in pairs], device=lm.device)  # [pieces]
            index = torch.tensor([p[1] for p in pairs], device=lm.device)  # [pieces] positions or heads
            groups[where] = (rows, index)

        def put(where: int, x: torch.Tensor) -> torch.Tensor | None:  # [rows, token, dim] / [rows, token, head, d]
            if where not in groups:
                return None
            rows, index = groups[where]
            new = x.clone()
            if what == "hidden":
                new[rows, index] = clean_pieces[where, index].to(x.dtype)  # [pieces, dim]
            else:
                new[rows, :, index] = clean_pieces[where][:, index].transpose(0, 1).to(x.dtype)  # [pieces, token, d]
            return new

        with turn(lm), torch.inference_mode():
            metric = _read(lm, repeat_feed(setup.corrupt_feed, stop - start), setup, _hooks(lm, what, put))  # [rows]
        out[start:stop] = metric.double().cpu().numpy()
        done = stop
        if progress:
            progress(done, len(cells))
    return out


@dataclass(frozen=True)
class PatchResult:
    what: str
    setup: PatchSetup
    layers: list  # row names: hidden states ("embeddings", 0, …) or layers (0, …)
    recovered: np.ndarray  # [hidden state, position] or [layer, head]
    m_clean: float
    m_corrupt: float

    @property
    def caveat(self) -> str | None:
        """One line when the example does not show what it is meant to (a regression head: never): the
        clean run does not prefer A, or the corrupted run prefers A as much, leaving nothing to recover."""
        if self.setup.reads == "value":
            return None
        a, b = self.setup.candidates
        score = "score" if self.setup.reads == "span" else "logit"
        if self.m_clean <= 0:
            return (f"On this model the clean run does not prefer “{a}”: {score}({a}) − {score}({b}) = "
                    f"{self.m_clean:+.3f}. The model fails the behaviour this example is meant to show, so the "
                    "recovered fractions trace a failure, not the mechanism.")
        if self.m_clean - self.m_corrupt < MIN_DIFFERENCE:
            return (f"The corrupted run prefers “{a}” at least as much as the clean one ({self.m_corrupt:+.3f} "
                    f"against {self.m_clean:+.3f}): there is no difference for patching to recover.")
        return None

    def to_json(self) -> dict:
        s = self.setup
        metric = {"value": "value", "span": SPAN_METRIC}.get(s.reads, METRIC)
        return {"metric": metric, "reads": s.reads, **({"context": s.context} if s.context else {}),
                "candidates": [] if s.reads == "value" else list(s.candidates), "position": s.position,
                "clean": s.clean, "corrupt": s.corrupt, "tokens": s.tokens, "clean_tokens": s.clean_tokens,
                "what": self.what, "layers": self.layers, "m_clean": self.m_clean, "m_corrupt": self.m_corrupt,
                "caveat": self.caveat,
                "recovered": [[None if np.isnan(v) else round(float(v), 6) for v in row] for row in self.recovered],
                "numbering": ("rows: hidden states, 'embeddings' then layer l's output; columns: positions"
                              if self.what == "hidden" else "rows: layers from 0; columns: heads from 0")}


def patch(lm: LoadedModel, clean: str, corrupt: str, candidates: Sequence[str], what: What = "hidden",
          positions: Sequence[int] | None = None, max_batch_bytes: int = DEFAULT_BATCH_BYTES,
          progress: Callable[[int, int], None] | None = None, context: str = "") -> PatchResult:
    """The recovered fraction for every (hidden state, position) or every (layer, head).
    ``positions`` (hidden only): patch these positions, not all (the rest of the grid is NaN).
    ``context``: a question-answering model's passage (``clean``/``corrupt`` are two questions of it).

    Args:
        lm: the model.
        clean: the text whose run is put back piece by piece.
        corrupt: the text run (as many tokens as ``clean``).
        candidates: (A, B): the metric is logit(A) − logit(B) at the mask (a classifier: its labels).
        what: "hidden" (hidden state × position) or "heads" (layer × head).
        positions: hidden only: the positions patched.
        max_batch_bytes: about how many bytes a batch of cells may hold.
        progress: called with (done, total) cells.
        context: a question-answering model's passage.

    Returns:
        ``PatchResult``: the recovered fraction of every cell, the clean and corrupted metrics.
    """
    if what not in WHATS:
        raise BertScopeError(f"Unknown patching target {what!r}: use hidden or heads.")
    setup = prepare(lm, clean, corrupt, candidates, context)
    if positions is not None:
        positions = sorted({int(p) for p in positions})
        n = len(setup.tokens)
        if what != "hidden" or not positions or not all(0 <= p < n for p in positions):
            raise BertScopeError(f"Positions to patch are token positions 0-{n - 1} of the hidden-state grid.")
    pieces, m_clean, m_corrupt = capture(lm, setup, what)
    if abs(m_clean - m_corrupt) < MIN_DIFFERENCE:
        raise BertScopeError(f"The clean and corrupted runs give the same {'value' if setup.reads == 'value' else 'logit difference'} ({m_clean:.4f}): there is "
                             f"nothing to recover; change the corrupted text or the candidates.")
    if what == "hidden":
        rows, columns, labels = lm.num_layers + 1, len(setup.tokens), hidden_labels(lm.num_layers)
    else:
        rows, columns, labels = lm.num_layers, lm.num_heads, list(range(lm.num_layers))
    chosen = range(columns) if positions is None else positions
    cells = [(r, (c,)) for r in range(rows) for c in chosen]
    metrics = patched_metrics(lm, setup, what, cells, pieces, max_batch_bytes, progress)
    recovered = np.full((rows, columns), np.nan)
    recovered[:, list(chosen)] = ((metrics - m_corrupt) / (m_clean - m_corrupt)).reshape(rows, len(chosen))
    return PatchResult(what, setup, labels, recovered, m_clean, m_corrupt)
