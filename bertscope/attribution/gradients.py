"""Gradient × input and integrated gradients with respect to the input (word-piece) embeddings,
for BERT's own decisions: a masked-token prediction, the NSP decision, a trained probe's class.

- **Gradient × input** (Shrikumar et al. 2017; Denil et al. 2014): ``x · ∂f/∂x`` per token,
  summed over the embedding dimensions.
- **Integrated gradients** (Sundararajan, Taly & Yan 2017, "Axiomatic Attribution for Deep
  Networks", ICML; eq. 1-3): ``(x − x') · ∫₀¹ ∂f(x' + α(x − x'))/∂x dα``, the integral by
  Gauss-Legendre quadrature (as Captum's default), its steps run in batches bounded by bytes.
  Completeness says the attributions sum to ``f(x) − f(x')``; the relative gap is reported.

The baseline ``x'`` keeps the special tokens ([CLS], [SEP], …) and mask tokens (the question,
not its content) and puts the padding token's
embedding at every other position (zeros when the tokenizer has no padding token): the usual
choice for BERT (Captum's BERT tutorials). Position and segment embeddings are added inside the
model, so they are the same for ``x`` and ``x'``.

``f`` is a log-probability: ``log p(token | input)`` at a position for a masked-token
prediction, ``log p(IsNext)`` for NSP, ``log p(in order)`` for ALBERT's SOP, ``log p(class)`` for a probe (on the hidden state at its
layer, pooled as it was trained).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.analysis.probe_store import Probe, load_probe
from bertscope.attribution.targets import (  # noqa: F401  (Target, parse_target: imported from here too)
    Target,
    parse_target,
)
from bertscope.attribution.task_targets import TASK_TARGETS, task_score_function
from bertscope.core.batch_plan import output_bytes
from bertscope.core.forward import inspect_ids
from bertscope.core.hooked_pass import turn
from bertscope.core.inspection import Inspection
from bertscope.core.layers import hidden_index
from bertscope.core.models import LoadedModel
from bertscope.core.passes import mlm_logits
from bertscope.errors import BertScopeError
from bertscope.mlm.logit_lens import mlm_head
from bertscope.runtime.devices import to_device
from bertscope.runtime.families import has_record

DEFAULT_STEPS = 50
# sentence-pair heads: target kind -> (model output, head name, family whose checkpoints carry it);
# class 0 is IsNext (NSP) / in order (SOP)
PAIR_HEADS = {"nsp": ("seq_relationship_logits", "next-sentence", "BERT"),
              "sop": ("sop_logits", "sentence-order", "ALBERT")}
STEP_BYTES = 1 * 2**30  # activations of one batch of IG steps (forward + backward)


def _vocabulary_id(lm: LoadedModel, token: str) -> int | None:
    """``token``'s id when it is a vocabulary item, else None (a fast tokenizer's lookup: ``get_vocab`` builds
    the whole vocabulary, ~12 ms a call)."""
    fast = getattr(lm.tokenizer, "_tokenizer", None)
    if fast is not None and hasattr(fast, "token_to_id"):
        found = fast.token_to_id(token)
        return None if found is None else int(found)
    return lm.tokenizer.get_vocab().get(token)


def token_id(lm: LoadedModel, token: str) -> int:
    """A vocabulary item as typed: its own spelling, or a word that is one piece."""
    found = _vocabulary_id(lm, token)
    if found is not None:
        return found
    pieces = lm.tokenizer.tokenize(" " + token.strip()) if token.strip() else []
    if len(pieces) == 1 and pieces[0] != lm.tokenizer.unk_token:
        return int(lm.tokenizer.convert_tokens_to_ids(pieces[0]))
    if pieces and all(p == lm.tokenizer.unk_token for p in pieces):
        raise BertScopeError(f"{token!r} is not one vocabulary item of {lm.name}: it is unknown to its vocabulary "
                             f"({lm.tokenizer.unk_token}).")
    raise BertScopeError(f"{token!r} is not one vocabulary item of {lm.name} (it is {len(pieces)} pieces: "
                         f"{' '.join(pieces)}): choose a single piece.")


def score_function(lm: LoadedModel, ins: Inspection, target: Target) -> tuple[Callable, Target]:
    """(f: [batch, token, emb] input embeddings -> [batch] log-probability, the resolved target)."""
    n = ins.n_tokens
    feed = {"attention_mask": torch.ones(1, n, dtype=torch.long)}
    if "token_type_ids" in lm.tokenizer.model_input_names:
        feed["token_type_ids"] = torch.from_numpy(ins.token_type_ids[None].astype(np.int64))
    feed = {k: to_device(v, lm.device) for k, v in feed.items()}

    def run(e, encoder_only: bool = False, **extra):  # a pass in the caller's grad mode (a gradient or not)
        b = e.shape[0]
        rows = {k: v.expand(b, -1) for k, v in feed.items()}
        return lm.run(rows, inputs_embeds=e, grad=None, encoder_only=encoder_only, **extra)

    if target.kind == "token":
        if "mlm" not in lm.outputs:
            raise BertScopeError(f"{lm.name} has no masked-LM head: a prediction needs one (try bundled-mlm).")
        pos = target.position
        if pos is None or not 0 <= pos < n:
            raise BertScopeError(f"Position {pos} does not exist: the input has {n} tokens (0-{n - 1}).")
        if target.token is None:  # the model's own top prediction there
            logits = inspect_ids(lm, ins, ins.input_ids, with_attentions=False, with_hidden_states=False,
                                 logit_positions=[pos]).logits_at(pos)
            best = int(np.argmax(logits))
            target = Target("token", pos, lm.tokenizer.convert_ids_to_tokens(best) or f"#{best}", best)
        item = target.token_id if target.token_id is not None else token_id(lm, target.token)
        target = Target("token", pos, target.token, item)
        try:
            head = mlm_head(lm) if has_record(lm.model_type) else None
        except BertScopeError:  # a head the record's modules do not make (DeBERTa's non-legacy head)
            head = None
        if head is None:  # the whole model's logits, read at ``pos``
            return (lambda e: torch.log_softmax(mlm_logits(run(e))[:, pos].float(), -1)[:, item]), target

        def token_score(e):  # the encoder, then the masked-LM head at ``pos`` alone: [b, vocab], not [b, token, vocab]
            hidden = run(e, encoder_only=True).last_hidden_state[:, pos]  # [b, dim]
            return torch.log_softmax(head(hidden).float(), -1)[:, item]
        return token_score, target
    if target.kind in PAIR_HEADS:
        output, name, family = PAIR_HEADS[target.kind]
        if target.kind not in lm.outputs:
            raise BertScopeError(f"{lm.name} has no {name} head: choose a {family} pretraining checkpoint.")
        if ins.text_pair is None:
            raise BertScopeError(f"The {target.kind.upper()} decision needs a pair: give the second segment (--pair).")
        return (lambda e: torch.log_softmax(getattr(run(e), output).float(), -1)[:, 0]), target
    if target.kind in TASK_TARGETS:
        return task_score_function(lm, ins, target, run)
    if target.kind == "probe":
        index = hidden_index(target.layer, lm.num_layers)  # hidden states: [embeddings, block 0, …]
        probe = load_probe(target.probe_dir, index)
        if probe.model != lm.name:
            raise BertScopeError(f"The probe was trained on {probe.model}'s hidden states, not {lm.name}'s: load {probe.model}.")
        if target.label not in probe.classes:
            raise BertScopeError(f"The probe has no class {target.label!r}: its classes are {', '.join(probe.classes[:20])}.")
        c = probe.classes.index(target.label)
        positions = _probe_positions(ins, probe, target.position)
        where = torch.tensor(positions, device=lm.device)

        def f(e):
            h = run(e, encoder_only=True, hidden_states=True).hidden_states[index]  # [b, token, dim]
            return probe.log_probs(h[:, where].float().mean(dim=1))[:, c]
        return f, target
    raise BertScopeError(f"Unknown target {target.kind!r}: use a token, nsp, sop, a probe, or a task model's class, "
                         "tag, start, end or span.")


def _probe_positions(ins: Inspection, probe: Probe, position: int | None) -> list[int]:
    """The token positions a probe pools over, as the probe run pooled them."""
    if probe.level == "sentence":
        return [0] if probe.pooling == "cls" else np.flatnonzero(~ins.special_mask).tolist()
    if position is None or not 0 <= position < ins.n_tokens or ins.word_ids[position] is None:
        raise BertScopeError("A word-level probe needs the position of a word's token (--position).")
    word, seq = ins.word_ids[position], ins.sequence_ids[position]
    pieces = [i for i, (w, s) in enumerate(zip(ins.word_ids, ins.sequence_ids)) if w == word and s == seq]
    return pieces[:1] if probe.pooling == "first" else pieces


def input_embeddings(lm: LoadedModel, ins: Inspection) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, x'): [1, token, emb] the input's word-piece embeddings and the baseline's."""
    table = lm.model.get_input_embeddings()
    ids = to_device(torch.from_numpy(ins.input_ids[None].astype(np.int64)), lm.device)  # [1, token]
    pad = lm.tokenizer.pad_token_id
    keep = ins.special_mask | (ins.input_ids == (lm.tokenizer.mask_token_id if lm.tokenizer.mask_token_id is not None else -1))
    special = to_device(torch.from_numpy(keep[None]), lm.device)  # [1, token] kept as they are
    with torch.no_grad():
        x = table(ids).float()
        if pad is None:
            base = torch.where(special[..., None], x, torch.zeros_like(x))
        else:
            base = table(torch.where(special, ids, torch.full_like(ids, pad))).float()
    return x, base


def _grad(lm: LoadedModel, f: Callable, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(f(e) [batch], ∂Σf/∂e [batch, token, emb]) in the model's dtype, returned in float32."""
    e = e.to(lm.dtype).detach().requires_grad_(True)
    with turn(lm), torch.enable_grad():  # the forward and its backward in one turn
        value = f(e)
        (grad,) = torch.autograd.grad(value.sum(), e)
    return value.detach().float(), grad.float()


@dataclass(frozen=True)
class Attribution:
    """Per-token scores for one target."""

    scores: np.ndarray  # [token] signed: positive pushes f up
    f_input: float  # f(x)
    f_baseline: float | None  # f(x'), integrated gradients only
    completeness_error: float | None  # |Σ scores − (f(x) − f(x'))| / |f(x) − f(x')|, IG only
    steps: int | None
    target: Target


def gradient_x_input(lm: LoadedModel, ins: Inspection, target: Target) -> Attribution:
    f, target = score_function(lm, ins, target)
    x, _ = input_embeddings(lm, ins)
    value, grad = _grad(lm, f, x)
    scores = (grad * x).sum(-1)[0]  # [token]
    return Attribution(scores.cpu().numpy(), float(value[0]), None, None, None, target)


def integrated_gradients(lm: LoadedModel, ins: Inspection, target: Target, steps: int = DEFAULT_STEPS,
                         batch_size: int | None = None, progress: Callable[[int, int], None] | None = None
                         ) -> Attribution:
    """IG along the straight line from the baseline, ``steps`` Gauss-Legendre nodes."""
    if not 1 <= steps <= 1000:
        raise BertScopeError("Integrated gradients takes 1 to 1000 steps.")
    f, target = score_function(lm, ins, target)
    x, base = input_embeddings(lm, ins)
    nodes, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor((nodes + 1) / 2, dtype=torch.float32, device=lm.device)  # [step] in (0, 1)
    w = torch.tensor(weights / 2, dtype=torch.float32, device=lm.device)  # [step], sums to 1
    if batch_size is None:
        logits = target.kind == "token"
        row = 3 * output_bytes(lm, ins.n_tokens, False, True, logits)  # forward kept for backward, roughly
        batch_size = max(1, min(steps, STEP_BYTES // max(1, row)))
    total = torch.zeros_like(x[0])  # [token, emb] Σ_k w_k ∇f
    for start in range(0, steps, batch_size):
        a = alphas[start:start + batch_size, None, None]  # [b, 1, 1]
        _, grad = _grad(lm, f, base + a * (x - base))  # [b, token, emb]
        total += (w[start:start + batch_size, None, None] * grad).sum(0)
        if progress:
            progress(min(steps, start + batch_size), steps)
    scores = ((x - base)[0] * total).sum(-1)  # [token]
    with torch.inference_mode():
        ends = f(torch.cat([x, base]).to(lm.dtype)).float()  # [2]: f(x), f(x')
    delta = float(ends[0] - ends[1])
    error = abs(float(scores.sum()) - delta) / max(abs(delta), 1e-6)
    return Attribution(scores.cpu().numpy(), float(ends[0]), float(ends[1]), error, steps, target)
