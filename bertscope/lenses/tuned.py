"""The tuned lens (Belrose, Furman, Smith, Halawi, Ostrovsky, McKinney, Biderman & Steinhardt, "Eliciting
Latent Predictions from Transformers with the Tuned Lens", 2023) for encoders: one affine translator a
hidden state, trained so that the model's own output head reads each state as it reads the last one.

As EleutherAI's ``tuned-lens`` package defines it (``nn/lenses.py``): state s is read as
``head(h_s + A_s h_s + b_s)`` with ``A_s, b_s`` zero at the start (so the untrained lens is the logit lens),
one translator for each state but the last (the embeddings and layers 0 to L−2; the last layer's
output needs none); trained as its ``train_loop.py`` trains it: the loss of translator s is
``KL(p_final ‖ p_lens)`` averaged over the positions read, each translator's loss backpropagated on its
own; SGD with Nesterov momentum 0.9, learning rate 1.0 × (1 − 0.9), weight decay 1e-3, a linear decay to
zero over the steps, gradients clipped to norm 1.

What an encoder adds:

- **A masked LM** is read at [MASK]: each training sentence has BERT's 15 % of its ordinary tokens
  masked (``mlm.masking.selection_count``), and the loss is over those positions (the decision the
  Masked page shows); the head is the masked-LM head (with the final LayerNorm first in pre-LayerNorm
  families, as ``mlm.logit_lens`` reads it).
- **A sequence classifier** is read through its own head: the translated state is put where the last
  layer's output goes (the hook point ``blocks.{L-1}.hook_resid_post``) and the rest of the model runs as
  it is — pooler and classifier, whatever the family (as ``tasks.layer_lens`` reads the logit lens); the
  loss is over the class distribution of each sentence.

Translators are saved as safetensors (``lens.safetensors``: ``weight`` [state, d, d], ``bias`` [state, d])
beside ``lens.json`` (the model, the kind, how it was trained); never pickle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertscope.core.hooked_pass import model_inputs, turn
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.mlm.logit_lens import mlm_head
from bertscope.mlm.masking import selection_count
from bertscope.runtime.families import family_of

WEIGHTS = "lens.safetensors"
META = "lens.json"
SELECT_RATE = 0.15
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-3
DEFAULT_STEPS = 250  # the package's default
DEFAULT_BATCH = 32  # sentences a step
MAX_STEPS = 20_000


@dataclass(frozen=True)
class LensMeta:
    model: str
    kind: str  # "mlm" or "class"
    hidden_size: int
    states: int  # translators: hidden states 0 (the embeddings) to L - 1
    steps: int = 0
    sentences: int = 0
    positions: int = 0  # positions the loss was read at, over the training
    seed: int = 0
    trained_on: str = ""
    losses: list[float] = field(default_factory=list)  # [step] the mean over translators


@dataclass
class TunedLens:
    meta: LensMeta
    weight: torch.Tensor  # [state, d, d] A_s (the translator adds A_s h + b_s to h)
    bias: torch.Tensor  # [state, d]

    @classmethod
    def identity(cls, lm: LoadedModel) -> TunedLens:
        """The untrained lens: every translator zero, so it reads as the logit lens."""
        d, states = lm.hidden_size, lm.num_layers
        return cls(LensMeta(lm.name, lens_kind(lm), d, states), torch.zeros(states, d, d), torch.zeros(states, d))

    def translate(self, h: torch.Tensor, state: int) -> torch.Tensor:
        """h [..., d] at hidden state ``state`` -> h + A_s h + b_s (the last state as it is)."""
        if state >= self.meta.states:
            return h
        w = self.weight[state].to(h.device, h.dtype)
        return h + h @ w.T + self.bias[state].to(h.device, h.dtype)

    def save(self, folder: str | Path, half: bool = False) -> Path:
        """``lens.safetensors`` and ``lens.json`` into ``folder`` (replaced whole); ``half``: float16 weights."""
        from safetensors.torch import save_file

        from bertscope.runtime.atomic import writing_folder

        folder = Path(folder)
        dtype = torch.float16 if half else torch.float32
        with writing_folder(folder) as tmp:
            save_file({"weight": self.weight.contiguous().to(dtype), "bias": self.bias.contiguous().to(dtype)},
                      str(tmp / WEIGHTS))
            (tmp / META).write_text(json.dumps(asdict(self.meta)))
        return folder


def lens_kind(lm: LoadedModel) -> str:
    """"class" for a sequence classifier with classes, "mlm" for a masked LM; else one line."""
    task = lm.task
    if task is not None and task.kind == "sequence-classification" and task.scoring != "none":
        return "class"
    if task is None and "mlm" in lm.outputs:
        return "mlm"
    raise BertScopeError(f"{lm.name} has neither a masked-LM head nor a sequence-classification head with classes: "
                         "the tuned lens reads one of them (try bundled-mlm or bundled-sentiment).")


def load_lens(folder: str | Path, lm: LoadedModel) -> TunedLens:
    """The translators in ``folder``, checked against ``lm``'s width and depth (a lens of another model of the same
    shape loads: ``meta.model`` names the one it was trained on).

    Args:
        folder: a folder with ``lens.safetensors`` and ``lens.json`` (``TunedLens.save``).
        lm: the model the lens is read on: its width and number of layers must match the lens's.

    Returns:
        A ``TunedLens``: its record (model, kind, training) and float32 ``weight`` [state, d, d] and ``bias``
            [state, d], one translator for the embeddings and each layer but the last.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / WEIGHTS).is_file() or not (folder / META).is_file():
        raise BertScopeError(f"{folder} holds no tuned lens ({WEIGHTS} and {META}): train one with "
                             f"`bertscope train-tuned-lens {lm.name} --out {folder}`.")
    try:
        meta = LensMeta(**json.loads((folder / META).read_text()))
        tensors = load_file(str(folder / WEIGHTS))
    except (ValueError, TypeError, SafetensorError) as err:
        raise BertScopeError(f"{folder / META} or {WEIGHTS} is not a tuned lens BertScope wrote ({err}).") from None
    if meta.hidden_size != lm.hidden_size or meta.states != lm.num_layers:
        raise BertScopeError(f"The lens in {folder} was trained on {meta.model} ({meta.states + 1} states of width "
                             f"{meta.hidden_size}), not {lm.name}'s {lm.num_layers + 1} of width {lm.hidden_size}.")
    weight, bias = tensors.get("weight"), tensors.get("bias")
    if weight is None or bias is None or tuple(weight.shape) != (meta.states, meta.hidden_size, meta.hidden_size) \
            or tuple(bias.shape) != (meta.states, meta.hidden_size):
        raise BertScopeError(f"{folder / WEIGHTS} does not hold the translators its {META} describes.")
    if not (torch.isfinite(weight).all() and torch.isfinite(bias).all()):
        raise BertScopeError(f"{folder / WEIGHTS} holds values that are not finite.")
    return TunedLens(meta, weight.float(), bias.float())


# --- reading a state through the model's head ---------------------------------------------------------------

def vocabulary_readout(lm: LoadedModel) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """(h [..., d] at state s, s) -> vocabulary logits [..., V]: the final LayerNorm of a pre-LayerNorm family
    first (states before the last), then the masked-LM head."""
    head = mlm_head(lm)
    family = family_of(lm.model_type)
    norm = lm.model.base_model.get_submodule(family.final_norm) if family.final_norm else None
    last = lm.num_layers

    def read(h: torch.Tensor, state: int) -> torch.Tensor:
        return head(norm(h) if norm is not None and state < last else h)

    return read


def class_readout(lm: LoadedModel, feed: dict[str, torch.Tensor]) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """(h [batch, token, d], s) -> class logits [batch, label]: ``h`` put where the last layer's output goes and
    the rest of the model run on ``feed`` (the same batch's ids and masks)."""
    last = f"blocks.{lm.num_layers - 1}.hook_resid_post"

    def read(h: torch.Tensor, state: int) -> torch.Tensor:
        def as_last(x: torch.Tensor, hook: Any) -> torch.Tensor:
            return h.to(x.dtype)
        return lm.run(feed, hooks={last: as_last}, grad=None).logits.float()

    return read


# --- training ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Batch:
    feed: dict[str, torch.Tensor]  # input ids, attention mask (and token types), on the model's device
    states: list[torch.Tensor]  # [state] each [batch, token, d], no gradient
    where: torch.Tensor | None  # [n, 2] (row, position) read (a masked LM's masks); None: the sentence
    target: torch.Tensor  # [n, V] or [batch, label] the final log-probabilities
    gold: torch.Tensor | None  # [n] the masked tokens' own ids (a masked LM), for calibration


def make_batch(lm: LoadedModel, texts: Sequence[str], kind: str, rng: np.random.Generator) -> Batch:
    """One batch: ``texts`` tokenized (a masked LM: 15 % of each one's ordinary tokens masked), every hidden
    state, and the final layer's log-probabilities where the lens is read."""
    enc = lm.tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True, max_length=min(lm.max_length, 128),
                       return_special_tokens_mask=True)
    special = enc.pop("special_tokens_mask").bool() | ~enc["attention_mask"].bool()  # [batch, token]
    feed = model_inputs(lm, enc)
    where = gold = None
    if kind == "mlm":
        ids = feed["input_ids"].clone()
        rows, cols = [], []
        for r in range(len(texts)):
            ordinary = np.flatnonzero(~special[r].numpy())
            if len(ordinary) == 0:
                continue
            chosen = rng.choice(ordinary, selection_count(len(ordinary), SELECT_RATE), replace=False)
            rows += [r] * len(chosen)
            cols += chosen.tolist()
        where = torch.tensor([rows, cols], device=lm.device).T  # [n, 2]
        gold = ids[where[:, 0], where[:, 1]].clone()
        ids[where[:, 0], where[:, 1]] = lm.tokenizer.mask_token_id
        feed["input_ids"] = ids
    with turn(lm), torch.no_grad():  # not inference mode: the translators' backward reads these states
        out = lm.run(feed, hidden_states=True, encoder_only=(kind == "mlm"), grad=None)
        states = [h.clone() for h in out.hidden_states]  # [state] each [batch, token, d]
        if where is not None:  # a masked LM
            read = vocabulary_readout(lm)
            last = states[-1][where[:, 0], where[:, 1]]  # [n, d]
            target = torch.log_softmax(read(last, lm.num_layers).float(), -1)  # [n, V]
        else:
            target = torch.log_softmax(out.logits.float(), -1)  # [batch, label]
    return Batch(feed, states, where, target, gold)


def lens_logits(lm: LoadedModel, translate: Callable[[torch.Tensor], torch.Tensor], batch: Batch, state: int
                ) -> torch.Tensor:
    """The head's logits for ``translate(h)`` of ``state`` at the batch's read positions ([n, V]) or of its
    sentences ([batch, label])."""
    h = batch.states[state]
    if batch.where is not None:
        h = h[batch.where[:, 0], batch.where[:, 1]]  # [n, d]
        return vocabulary_readout(lm)(translate(h), state).float()
    return class_readout(lm, batch.feed)(translate(h), state)


def kl_to_final(target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """[n] KL(p_final ‖ p_lens) per row, from log-probabilities and logits (the package's loss)."""
    return (target.exp() * (target - torch.log_softmax(logits, -1))).sum(-1)


def training_batches(texts: Sequence[str], size: int, steps: int, seed: int) -> Iterator[list[str]]:
    rng = np.random.default_rng(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < size:
            order += rng.permutation(len(texts)).tolist()
        chosen, order = order[:size], order[size:]
        yield [texts[i] for i in chosen]


def train_tuned_lens(lm: LoadedModel, texts: Sequence[str], steps: int = DEFAULT_STEPS, batch_size: int = DEFAULT_BATCH,
                     seed: int = 0, trained_on: str = "", progress: Callable[[int, int], None] | None = None
                     ) -> TunedLens:
    """Translators for every state of ``lm`` but the last, trained on ``texts`` (the package's recipe above).

    Args:
        lm: a masked LM, or a sequence classifier with classes.
        texts: training sentences (blank ones dropped), at least ``batch_size``; each cut at 128 tokens.
        steps: optimiser steps, 1 to ``MAX_STEPS`` (20,000); the learning rate decays to zero over them.
        batch_size: sentences a step, 1 to 512.
        seed: the sentences' order and, for a masked LM, the positions masked.
        trained_on: what the texts are, recorded in the lens's ``lens.json``.
        progress: called with (done, total) steps.

    Returns:
        A ``TunedLens``: ``weight`` [state, d, d] and ``bias`` [state, d] on the CPU (states: the embeddings and
            layers 0 to L - 2), and its record: model, kind, steps, sentences, positions read, seed, each step's loss.
    """
    kind = lens_kind(lm)
    if not 1 <= steps <= MAX_STEPS:
        raise BertScopeError(f"Give 1 to {MAX_STEPS:,} steps ({steps} given).")
    if not 1 <= batch_size <= 512:
        raise BertScopeError(f"Give a batch of 1 to 512 sentences ({batch_size} given).")
    texts = [t for t in texts if t and t.strip()]
    if len(texts) < batch_size:
        raise BertScopeError(f"{len(texts)} training texts: a batch needs {batch_size}.")
    lens = TunedLens.identity(lm)
    d = lm.hidden_size
    translators = [torch.nn.Linear(d, d, device=lm.device) for _ in range(lens.meta.states)]
    for t in translators:
        torch.nn.init.zeros_(t.weight)
        torch.nn.init.zeros_(t.bias)
    params = [p for t in translators for p in t.parameters()]
    opt = torch.optim.SGD(params, lr=1.0 * (1 - MOMENTUM), momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: max(0.0, 1 - step / steps))
    rng = np.random.default_rng(seed)
    losses, positions, sentences = [], 0, 0
    for step, chunk in enumerate(training_batches(texts, batch_size, steps, seed), 1):
        batch = make_batch(lm, chunk, kind, rng)
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for s, t in enumerate(translators):  # each translator's loss backpropagated on its own (the model is frozen)
            def translate(h: torch.Tensor, t: torch.nn.Linear = t) -> torch.Tensor:
                return h + t(h)
            with turn(lm), torch.enable_grad():
                loss = kl_to_final(batch.target, lens_logits(lm, translate, batch, s)).mean()
                loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        schedule.step()
        losses.append(total / len(translators))
        positions += len(batch.target)
        sentences += len(chunk)
        if progress:
            progress(step, steps)
    weight = torch.stack([t.weight.detach().cpu() for t in translators])
    bias = torch.stack([t.bias.detach().cpu() for t in translators])
    meta = LensMeta(lm.name, kind, d, lens.meta.states, steps, sentences, positions, seed, trained_on,
                    [round(x, 6) for x in losses])
    return TunedLens(meta, weight, bias)


# --- evaluation --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LensQuality:
    """Each state's readings on held-out text, for the tuned lens and the logit lens."""

    states: list[str | int]  # "embeddings", 0, …
    kl: dict[str, list[float]]  # lens -> [state] mean KL(p_final ‖ p_lens), nats
    bias: dict[str, list[float]]  # lens -> [state] KL(final's mean distribution ‖ the lens's mean distribution)
    ece: dict[str, list[float]]  # lens -> [state] expected calibration error of the lens's top-1 (10 bins)
    agreement: dict[str, list[float]]  # lens -> [state] share of reads whose top-1 is the final top-1
    positions: int
    against: str  # what calibration is scored against: the masked tokens, or the final decision

    def to_json(self) -> dict:
        return {"states": self.states, "positions": self.positions, "calibrated_against": self.against,
                "layers": [{"layer": s, **{f"{m}_{lens}": getattr(self, m)[lens][i] for m in ("kl", "bias", "ece",
                                                                                       "agreement")
                                            for lens in ("tuned", "logit")}} for i, s in enumerate(self.states)]}


def lens_quality(lm: LoadedModel, lens: TunedLens, texts: Sequence[str], batch_size: int = DEFAULT_BATCH,
                 seed: int = 1, progress: Callable[[int, int], None] | None = None) -> LensQuality:
    """KL to the final layer, bias and calibration of the tuned lens and the logit lens at every state,
    on ``texts`` (held out from the lens's training).

    Args:
        lm: the model the lens was trained on.
        lens: the tuned lens (``load_lens`` or ``train_tuned_lens``).
        texts: held-out sentences, each cut at 128 tokens.
        batch_size: sentences a batch.
        seed: the positions masked (a masked LM); 1 by default, unlike training's 0.
        progress: called with (done, total) batches.

    Returns:
        A ``LensQuality``: the states ("embeddings", 0, ...) and, for "tuned" and "logit", each state's mean
            KL(p_final ‖ p_lens) in nats, bias (KL between the mean distributions), calibration error of the top-1
            (10 bins) and agreement with the final top-1; the positions read and what calibration is scored against.
    """
    from bertscope.core.layers import hidden_labels

    if not texts:
        raise BertScopeError("The lens's quality needs held-out sentences to score.")
    kind = lens_kind(lm)
    logit = TunedLens.identity(lm)
    rng = np.random.default_rng(seed)
    states = lm.num_layers + 1
    sums = {m: {k: np.zeros(states) for k in ("tuned", "logit")} for m in ("kl", "agreement")}
    marginal: dict[str, list[torch.Tensor]] = {k: [torch.zeros(())] * states for k in ("tuned", "logit")}
    final_marginal = torch.zeros(())
    probs_all: dict[str, list[list[torch.Tensor]]] = {k: [[] for _ in range(states)] for k in ("tuned", "logit")}
    correct_all: dict[str, list[list[torch.Tensor]]] = {k: [[] for _ in range(states)] for k in ("tuned", "logit")}
    n = 0
    chunks = [list(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
    for done, chunk in enumerate(chunks, 1):
        batch = make_batch(lm, chunk, kind, rng)
        final = batch.target.exp()  # [n, V]
        final_marginal = final_marginal + final.sum(0)  # [V] or [label]
        gold = batch.gold if batch.gold is not None else final.argmax(-1)
        for s in range(states):
            for name, which in (("tuned", lens), ("logit", logit)):
                def translate(h: torch.Tensor, w: TunedLens = which, s: int = s) -> torch.Tensor:
                    return w.translate(h, s)
                with torch.inference_mode():
                    logits = lens_logits(lm, translate, batch, s)
                p = torch.softmax(logits, -1)
                sums["kl"][name][s] += float(kl_to_final(batch.target, logits).sum())
                sums["agreement"][name][s] += float((p.argmax(-1) == final.argmax(-1)).sum())
                marginal[name][s] = marginal[name][s] + p.sum(0)
                top = p.max(-1)
                probs_all[name][s].append(top.values.cpu())
                correct_all[name][s].append((top.indices == gold).cpu())
        n += len(batch.target)
        if progress:
            progress(done, len(chunks))
    final_mean = torch.as_tensor(final_marginal / n)

    def bias(m: torch.Tensor) -> float:
        q = torch.as_tensor(m / n)
        return float((final_mean * (torch.log(final_mean.clamp_min(1e-12)) - torch.log(q.clamp_min(1e-12)))).sum())

    ece = {name: [_ece_from(probs_all[name][s], correct_all[name][s]) for s in range(states)]
           for name in ("tuned", "logit")}
    return LensQuality(hidden_labels(lm.num_layers), {k: (v / n).tolist() for k, v in sums["kl"].items()},
                       {k: [bias(m) for m in v] for k, v in marginal.items()}, ece,
                       {k: (v / n).tolist() for k, v in sums["agreement"].items()}, n,
                       "the masked tokens" if kind == "mlm" else "the final decision")


def _ece_from(confidence: list[torch.Tensor], correct: list[torch.Tensor], bins: int = 10) -> float:
    c, k = torch.cat(confidence), torch.cat(correct)
    edges = torch.linspace(0, 1, bins + 1)
    error = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (c > lo) & (c <= hi)
        if inside.any():
            error += float(inside.float().mean()) * abs(float(c[inside].mean()) - float(k[inside].float().mean()))
    return error if math.isfinite(error) else float("nan")
