"""Does the fine-tuned model *use* what a crosscoder says fine-tuning added? The causal check of a model diff
(issue 52): on the task's held-out side (the tweets' held-out tenth for a sentiment classifier, EWT's dev side
for a tagger), the fine-tuned model's layer-L output at every word piece is edited through its crosscoder, and
the task head's accuracy read after each edit:

- **intact**: no edit;
- **spliced**: the crosscoder's reconstruction of the fine-tuned side in place of the output (how much of the
  decision the dictionary carries);
- **removed**: the chosen latents' contributions taken out, ``x' = x − Σ_j f_j W_dec[ft, j]`` (the error and
  every other latent stay), with ``f`` encoded from both models' outputs on the same text;
- **control**: as many other latents taken out, each the one whose firing count on these word pieces is
  nearest the chosen latent's, among latents not fine-tuned-only (the same amount of change, other content);
- **base read**: the base model's layer-L output in place of the fine-tuned one, read by the fine-tuned
  model's upper layers and head: where the predictions go when what fine-tuning changed up to L is undone.

Latents that fine-tuning added *and* the model uses move the predictions toward the base read (agreement with
it rises, accuracy drops) more than the controls do. [CLS] and [SEP] are never edited: the crosscoder reads
word pieces only (``features.activations``), so for a classifier that reads [CLS] the layer must be below the
last, where attention still carries the word pieces into [CLS].
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.task_head import SEQUENCE, TOKEN
from bertscope.corpora.labelled import LabelledTexts
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.active import layer_output
from bertscope.features.crosscoder import BatchTopKCrosscoder
from bertscope.features.model_diff import CLASSES
from bertscope.training.task_data import CLASSIFY, TAG, Tagged, load_task_data
from bertscope.training.task_objective import IGNORE, encode, pad

EDITS = ("intact", "spliced", "removed", "control", "base read")
TASK_DATA = {CLASSIFY: "sentiment", TAG: "ewt-upos"}  # the shipped held-out side each task model is read on
MAX_LATENTS = 64
TOP_CONTEXTS = 5


@dataclass(frozen=True)
class LatentContext:
    """One of a latent's strongest held-out contexts: the text, the piece it peaks on, and that word's gold tag
    (tagging) or the text's gold label (classification)."""

    text: str
    token: str
    activation: float
    gold: str

    def to_json(self) -> dict:
        return {"text": self.text, "token": self.token, "activation": round(self.activation, 6), "gold": self.gold}


@dataclass(frozen=True)
class DiffEffect:
    layer: int
    task: str  # "classify" or "tag"
    data: str  # the held-out side read
    labels: tuple[str, ...]
    examples: int  # held-out texts
    scored: int  # texts (classify) or words (tag) scored
    latents: tuple[int, ...]  # switched off together
    controls: tuple[int, ...]  # as many, firing as often
    fires: dict[int, int]  # word pieces each latent and control fires on
    accuracy: dict[str, float]  # EDITS -> accuracy
    agreement_with_base: dict[str, float]  # intact / removed / control -> share of predictions the base read gives
    confusion: dict[str, np.ndarray] = field(repr=False)  # intact / removed / control -> [gold, predicted] counts
    contexts: dict[int, list[LatentContext]] = field(repr=False, default_factory=dict)  # each chosen latent's top
    gold_counts: dict[int, dict[str, int]] = field(repr=False, default_factory=dict)  # gold of the pieces it fires on

    @property
    def drop(self) -> float:
        """Accuracy lost to the chosen latents, beyond what the controls lose (positive: used)."""
        return (self.accuracy["intact"] - self.accuracy["removed"]) - \
            (self.accuracy["intact"] - self.accuracy["control"])

    def to_json(self) -> dict:
        return {
            "layer": self.layer, "task": self.task, "data": self.data, "labels": list(self.labels),
            "examples": self.examples, ("words" if self.task == TAG else "texts"): self.scored,
            "accuracy": {k: round(v, 6) for k, v in self.accuracy.items()},
            "agreement_with_base": {k: round(v, 6) for k, v in self.agreement_with_base.items()},
            "finetuned_only": {"latents": list(self.latents), "accuracy_before": round(self.accuracy["intact"], 6),
                               "accuracy_after": round(self.accuracy["removed"], 6),
                               "fires": [self.fires[j] for j in self.latents]},
            "control": {"latents": list(self.controls), "accuracy_before": round(self.accuracy["intact"], 6),
                        "accuracy_after": round(self.accuracy["control"], 6),
                        "fires": [self.fires[j] for j in self.controls]},
            "confusion": {k: v.tolist() for k, v in self.confusion.items()},
        }


def _word_pieces(lm: LoadedModel, feed: dict) -> torch.Tensor:
    """[batch, token] bool: real pieces, neither padding nor a special token."""
    ids = feed["input_ids"]
    special = torch.tensor(sorted(lm.tokenizer.all_special_ids), device=ids.device)
    return feed["attention_mask"].bool() & ~torch.isin(ids, special)


class _Batch:
    """One held-out batch kept for every sweep: inputs, gold, word pieces, the base's layer-L output and the
    crosscoder's codes of the intact pair."""

    def __init__(self, feed: dict, gold: torch.Tensor, pieces: torch.Tensor, base: torch.Tensor, rows: list[int]):
        self.feed, self.gold, self.pieces, self.base, self.rows = feed, gold, pieces, base, rows
        self.codes: torch.Tensor | None = None  # [piece, d_sae] on the intact pass


def _predictions(tuned: LoadedModel, batch: _Batch, edit: Callable[[torch.Tensor], torch.Tensor] | None, layer: int
                 ) -> torch.Tensor:
    """Predicted label ids: [batch] (classify) or [batch, token] (tag)."""
    if edit is None:
        return tuned.run(batch.feed).logits.argmax(-1)
    change = edit

    def hook(x: torch.Tensor, _hook) -> torch.Tensor:  # [batch, token, d_model]
        out = x.clone()
        out[batch.pieces] = change(x[batch.pieces].float()).to(x.dtype)  # [piece, d_model]
        return out

    return tuned.run(batch.feed, hooks={resid_post(layer): hook}).logits.argmax(-1)


@torch.no_grad()
def diff_effect(base: LoadedModel, tuned: LoadedModel, cc: BatchTopKCrosscoder, layer: int,
                latents: Sequence[int], classes: np.ndarray, examples: int = 500, seed: int = 0,
                progress: Callable[[int, int], None] | None = None) -> DiffEffect:
    """The causal check (module docstring) of switching ``latents`` off in ``tuned`` at ``layer``; ``classes``:
    each latent's class (``ModelDiff.classes``), so that no control is fine-tuned-only."""
    layer = check_layer(tuned, layer)
    head = tuned.task
    task = {SEQUENCE: CLASSIFY, TOKEN: TAG}.get(head.kind) if head is not None else None
    if head is None or task is None:
        raise BertScopeError(f"{tuned.name} has no classification or tagging head: the causal check reads one.")
    chosen = tuple(dict.fromkeys(int(j) for j in latents))
    if not chosen or len(chosen) > MAX_LATENTS:
        raise BertScopeError(f"Give between 1 and {MAX_LATENTS} latents to switch off.")
    if any(not 0 <= j < cc.d_sae for j in chosen):
        raise BertScopeError(f"The crosscoder has latents 0 to {cc.d_sae - 1}.")
    if len(classes) != cc.d_sae:
        raise BertScopeError(f"{len(classes)} classes given for {cc.d_sae} latents.")
    if examples < 1:
        raise BertScopeError("Score at least one held-out example.")
    labels = list(head.labels)
    data = load_task_data(task, TASK_DATA[task])  # the split the shipped task models were trained on (seed 0)
    side = data.held_out
    if not isinstance(side, (LabelledTexts, Tagged)):
        raise BertScopeError(f"{data.source} is not a classification or tagging corpus.")
    if len(side) > examples:
        picked = sorted(np.random.default_rng(seed).choice(len(side), examples, replace=False).tolist())
        side = side.take(picked, side.name)
    known = set(labels)
    gold_names = {t for row in side.tags for t in row} if isinstance(side, Tagged) else set(side.labels)
    if not gold_names <= known:
        raise BertScopeError(f"{tuned.name}'s labels ({', '.join(labels)}) do not cover the held-out data's "
                             f"({', '.join(sorted(gold_names - known))}).")
    cc = cc.to(tuned.device)
    encoded = encode(tuned.tokenizer, task, side, labels, tuned.max_length)
    order = sorted(range(len(encoded.ids)), key=lambda r: len(encoded.ids[r]))  # little padding
    kept: list[_Batch] = []
    steps, done = -(-len(order) // 32) * 2, 0
    for start in range(0, len(order), 32):
        rows = order[start:start + 32]
        feed, gold = pad(encoded, rows, tuned.tokenizer.pad_token_id, task == TAG).part(slice(None), tuned.device)
        feed = {k: v for k, v in feed.items() if k in tuned.tokenizer.model_input_names}
        kept.append(_Batch(feed, gold, _word_pieces(tuned, feed), layer_output(base, feed, layer), rows))
    n_labels = len(labels)
    confusion = {name: np.zeros((n_labels, n_labels), np.int64) for name in ("intact", "removed", "control")}
    right = dict.fromkeys(EDITS, 0)
    agree = dict.fromkeys(("intact", "removed", "control"), 0)
    scored = 0
    fires = torch.zeros(cc.d_sae, dtype=torch.long, device=tuned.device)
    w_ft = cc.W_dec[1].float()  # [d_sae, d_model]
    peaks: dict[int, list[tuple[float, int, int]]] = {j: [] for j in chosen}  # (activation, batch row, token)
    gold_counts: dict[int, dict[str, int]] = {j: {} for j in chosen}

    def pair_codes(batch: _Batch, x: torch.Tensor) -> torch.Tensor:  # x: [piece, d_model] fine-tuned side
        return cc.encode(torch.stack([batch.base[batch.pieces].float(), x], dim=1), use_threshold=True)

    def splice(batch: _Batch) -> Callable:
        return lambda x: cc.decode(pair_codes(batch, x))[:, 1]

    def remove(batch: _Batch, group: tuple[int, ...]) -> Callable:
        return lambda x: x - pair_codes(batch, x)[:, list(group)] @ w_ft[list(group)]

    def score(name: str, batch: _Batch, predicted: torch.Tensor, base_read: torch.Tensor | None) -> int:
        keep = batch.gold != IGNORE  # [batch] or [batch, token]
        gold, pred = batch.gold[keep], predicted[keep]
        right[name] += int((gold == pred).sum())
        if name in confusion:
            np.add.at(confusion[name], (gold.cpu().numpy(), pred.cpu().numpy()), 1)
        if name in agree and base_read is not None:
            agree[name] += int((base_read[keep] == pred).sum())
        return int(keep.sum())

    base_reads = []
    for batch in kept:  # first sweep: intact, spliced, the base read; firing counts for the controls
        intact_x: list[torch.Tensor] = []

        def reading(x: torch.Tensor, _into=intact_x) -> torch.Tensor:
            _into.append(x)
            return x

        predicted = _predictions(tuned, batch, reading, layer)  # an identity edit that keeps the pieces' output
        batch.codes = pair_codes(batch, intact_x[0])  # [piece, d_sae]
        fires += (batch.codes > 0).sum(0)
        base_read = _predictions(tuned, batch, _base_output(batch), layer)
        base_reads.append(base_read)
        scored += score("intact", batch, predicted, base_read)
        score("spliced", batch, _predictions(tuned, batch, splice(batch), layer), None)
        score("base read", batch, base_read, None)
        _note_contexts(tuned, batch, chosen, peaks, gold_counts, labels, task)
        done += 1
        if progress:
            progress(done, steps)
    fires_np = fires.cpu().numpy()
    controls = _controls(chosen, fires_np, classes)
    for batch, base_read in zip(kept, base_reads):  # second sweep: the chosen latents off, then the controls
        score("removed", batch, _predictions(tuned, batch, remove(batch, chosen), layer), base_read)
        score("control", batch, _predictions(tuned, batch, remove(batch, controls), layer), base_read)
        done += 1
        if progress:
            progress(done, steps)
    if not scored:
        raise BertScopeError("No held-out word or text could be scored.")
    contexts = {j: [_context(tuned, kept, side, encoded, task, labels, hit) for hit in
                    sorted(peaks[j], reverse=True)[:TOP_CONTEXTS]] for j in chosen}
    return DiffEffect(layer, task, f"{data.source}, held-out side", tuple(labels), len(side), scored, chosen, controls,
                      {int(j): int(fires_np[j]) for j in chosen + controls},
                      {name: right[name] / scored for name in EDITS},
                      {name: agree[name] / scored for name in agree}, confusion, contexts,
                      {j: dict(sorted(c.items(), key=lambda kv: -kv[1])) for j, c in gold_counts.items()})


def _base_output(batch: _Batch) -> Callable[[torch.Tensor], torch.Tensor]:
    """The edit that puts the base's layer output in place of the fine-tuned model's, at the word pieces."""
    return lambda _x: batch.base[batch.pieces].float()


def _controls(chosen: tuple[int, ...], fires: np.ndarray, classes: np.ndarray) -> tuple[int, ...]:
    """For each chosen latent, the latent with the nearest firing count that is neither chosen, already a
    control, fine-tuned-only, nor silent here."""
    eligible = (classes != CLASSES.index("fine-tuned-only")) & (fires > 0)
    eligible[list(chosen)] = False
    out = []
    for j in chosen:
        gap = np.where(eligible, np.abs(fires.astype(np.int64) - int(fires[j])), np.iinfo(np.int64).max)
        best = int(np.argmin(gap))
        if not eligible[best]:
            raise BertScopeError("Too few latents fire on the held-out text to match every chosen latent with a "
                                 "control.")
        out.append(best)
        eligible[best] = False
    return tuple(out)


def _note_contexts(tuned: LoadedModel, batch: _Batch, chosen: tuple[int, ...], peaks: dict, gold_counts: dict,
                   labels: list[str], task: str) -> None:
    """Each chosen latent's strongest pieces in this batch, and the gold labels of the pieces it fires on."""
    assert batch.codes is not None  # set by the intact pass
    where = torch.nonzero(batch.pieces)  # [piece, 2]: (batch row, token)
    codes = batch.codes[:, list(chosen)].cpu()  # [piece, chosen]
    gold = batch.gold.cpu()
    for c, j in enumerate(chosen):
        on = torch.nonzero(codes[:, c] > 0).flatten()
        for p in on.tolist():
            b, t = (int(v) for v in where[p])
            label = int(gold[b, t]) if task == TAG else int(gold[b])
            if label != IGNORE:  # a word's later pieces carry no gold tag
                name = labels[label]
                gold_counts[j][name] = gold_counts[j].get(name, 0) + 1
            peaks[j].append((float(codes[p, c]), batch.rows[b], t))
        if len(peaks[j]) > 4 * TOP_CONTEXTS:
            peaks[j][:] = sorted(peaks[j], reverse=True)[:TOP_CONTEXTS]


def _context(tuned: LoadedModel, kept: list[_Batch], side, encoded, task: str, labels: list[str],
             hit: tuple[float, int, int]) -> LatentContext:
    activation, row, token = hit
    ids = encoded.ids[row]
    text = " ".join(side.words[row]) if task == TAG else side.texts[row]
    piece = tuned.tokenizer.convert_ids_to_tokens([ids[token]])[0] if token < len(ids) else ""
    if task == TAG:
        label = encoded.labels[row][token] if token < len(encoded.labels[row]) else IGNORE
        gold = labels[label] if label != IGNORE else "a later piece"
    else:
        gold = labels[encoded.labels[row]]
    return LatentContext(text, piece, activation, gold)
