"""Does the fine-tuned model *use* what a crosscoder says fine-tuning added? The causal check of a model diff
(issue 52): on the task's held-out side (the tweets' held-out tenth for a sentiment classifier, EWT's dev side
for a tagger: the sides the shipped task models were not trained on), the fine-tuned model's layer-L output at
every word piece is edited through its crosscoder, and the task head's accuracy read after each edit:

- **intact**: no edit;
- **spliced**: the crosscoder's reconstruction of the fine-tuned side in place of the output (how much of the
  decision the dictionary carries);
- **removed**: the chosen latents' contributions taken out, ``x' = x − Σ_j f_j W_dec[ft, j]`` (the error and
  every other latent stay), with ``f`` encoded from both models' outputs on the same text;
- **control**: as many other latents taken out, each the one whose removal takes about as much out of these
  pieces (``Σ f_j ‖W_dec[ft, j]‖`` over them, the nearest) as its chosen latent's; controls come from latents
  that both models write (relative norm from 0.1 to below 0.9): never fine-tuned-only, never base-only (whose
  fine-tuned decoder is short, so removing it would take out little);
- **base read**: the base model's layer-L output in place of the fine-tuned one, read by the fine-tuned
  model's upper layers and head: where the predictions go when what fine-tuning changed up to L is undone.

Latents that fine-tuning added *and* the model uses cost accuracy when removed, more than the controls do.
A crosscoder of word pieces (``features.activations``) never edits [CLS] and [SEP] (the tokens the tokenizer
adds), so a classifier that reads [CLS] at its last layer is refused there with it: the layer must be below the
last, where attention still carries the word pieces into [CLS]. A crosscoder of [CLS] (``positions="cls"``)
edits that one token, which is what a classifier reads at its last layer.

Along the way every latent's strongest pieces in the task text and the gold labels where it fires are kept
(``contexts``, ``gold_counts``), a few numbers a latent: the page's and the command's top contexts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.task_head import SEQUENCE, TOKEN
from bertscope.corpora.labelled import LabelledTexts
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, read_positions, resid_post
from bertscope.features.active import layer_output
from bertscope.features.crosscoder import BatchTopKCrosscoder
from bertscope.features.model_diff import BASE_ONLY, FT_ONLY
from bertscope.training.task_data import CLASSIFY, TAG, Tagged, load_task_data
from bertscope.training.task_objective import IGNORE, encode, pad

EDITS = ("intact", "spliced", "removed", "control", "base read")
TASK_DATA = {CLASSIFY: "sentiment", TAG: "ewt-upos"}  # the shipped held-out side each task model is read on
MAX_LATENTS = 64
MAX_EXAMPLES = 2000  # every batch's base output is kept for the second sweep: bounded by this
TOP_CONTEXTS = 5
BATCH = 32


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
    controls: tuple[int, ...]  # as many, each removing about as much
    fires: dict[int, int]  # word pieces each latent and control fires on
    removed: dict[int, float]  # Σ f ‖W_dec[ft]‖ over the pieces: how much removing each takes out
    accuracy: dict[str, float]  # EDITS -> accuracy
    agreement_with_base: dict[str, float]  # intact / removed / control -> share of predictions the base read gives
    confusion: dict[str, np.ndarray] = field(repr=False)  # intact / removed / control -> [gold, predicted] counts
    contexts: dict[int, list[LatentContext]] = field(repr=False, default_factory=dict)  # every latent that fired
    gold_counts: dict[int, dict[str, int]] = field(repr=False, default_factory=dict)  # gold of the pieces it fires on

    def to_json(self) -> dict:
        def arm(chosen: tuple[int, ...], name: str) -> dict:
            return {"latents": list(chosen), "accuracy_before": round(self.accuracy["intact"], 6),
                    "accuracy_after": round(self.accuracy[name], 6), "fires": [self.fires[j] for j in chosen],
                    "removed": [round(self.removed[j], 3) for j in chosen]}

        return {
            "layer": self.layer, "task": self.task, "data": self.data, "labels": list(self.labels),
            "examples": self.examples, ("words" if self.task == TAG else "texts"): self.scored,
            "accuracy": {k: round(v, 6) for k, v in self.accuracy.items()},
            "agreement_with_base": {k: round(v, 6) for k, v in self.agreement_with_base.items()},
            "finetuned_only": arm(self.latents, "removed"), "control": arm(self.controls, "control"),
            "confusion": {k: v.tolist() for k, v in self.confusion.items()},
        }


@dataclass(frozen=True)
class TaskSide:
    """The held-out examples a task model is scored on, encoded for it."""

    task: str
    source: str
    side: LabelledTexts | Tagged
    labels: list[str]


def task_side(tuned: LoadedModel, layer: int, examples: int, seed: int = 0, data: str | None = None,
              positions: str = "pieces") -> TaskSide:
    """The held-out side ``tuned`` is scored on (a seeded sample of ``examples``), or one line saying why the
    causal check cannot run on it: no classification or tagging head, a classifier read at its last layer,
    labels that do not cover the data's. ``data``: a shipped corpus or a file, as fine-tuning reads it (its
    held-out side, 10% by seed 0, as fine-tuning splits it); default the corpus the shipped task models were
    trained on (tweets for a classifier, EWT for a tagger). ``positions``: what the crosscoder reads, word pieces
    or [CLS] (``CrosscoderInfo.positions``)."""
    head = tuned.task
    task = {SEQUENCE: CLASSIFY, TOKEN: TAG}.get(head.kind) if head is not None else None
    if head is None or task is None:
        raise BertScopeError(f"{tuned.name} has no classification or tagging head: the causal check reads one.")
    if task == CLASSIFY and layer == tuned.num_layers - 1 and positions != "cls":
        raise BertScopeError(f"{tuned.name} classifies from [CLS] at its last layer, which a crosscoder of word "
                             "pieces never edits: read a crosscoder of a lower layer, or one of [CLS] "
                             "(train-crosscoder --positions cls).")
    if task == TAG and positions == "cls":
        raise BertScopeError(f"{tuned.name} tags words, which a crosscoder of [CLS] never reads: read one of word "
                             "pieces.")
    if not 1 <= examples <= MAX_EXAMPLES:
        raise BertScopeError(f"Score from 1 to {MAX_EXAMPLES:,} held-out examples.")
    found = load_task_data(task, data or TASK_DATA[task])  # the split fine-tuning draws (seed 0)
    side = found.held_out
    if not isinstance(side, (LabelledTexts, Tagged)):
        raise BertScopeError(f"{found.source} is not a classification or tagging corpus.")
    if len(side) > examples:
        side = side.take(sorted(np.random.default_rng(seed).choice(len(side), examples, replace=False).tolist()),
                         side.name)
    labels = list(head.labels)
    gold = {t for row in side.tags for t in row} if isinstance(side, Tagged) else set(side.labels)
    if not gold <= set(labels):
        raise BertScopeError(f"{tuned.name}'s labels ({', '.join(labels)}) do not cover {found.source}'s "
                             f"({', '.join(sorted(gold - set(labels)))}): the causal check scores it there"
                             f"{'' if data else '; give the task data it was fine-tuned on (--data)'}.")
    return TaskSide(task, found.source, side, labels)


def _word_pieces(lm: LoadedModel, feed: dict, positions: str = "pieces") -> torch.Tensor:
    """[batch, token] bool: the pieces a crosscoder reads, every real token but those the tokenizer adds ([CLS],
    [SEP], <s>, </s>), as ``features.activations`` keeps them ([UNK] stays); ``positions`` "cls": each row's first
    real token alone."""
    ids = feed["input_ids"]
    tok = lm.tokenizer
    added = {t for t in (tok.cls_token_id, tok.sep_token_id, tok.bos_token_id, tok.eos_token_id) if t is not None}
    return read_positions(feed["attention_mask"], torch.isin(ids, torch.tensor(sorted(added), device=ids.device)),
                          positions)


@dataclass
class _Batch:
    """One held-out batch kept for both sweeps: inputs, gold, word pieces, the base's layer-L output."""

    feed: dict
    gold: torch.Tensor  # [batch] or [batch, token]
    pieces: torch.Tensor  # [batch, token] bool
    base: torch.Tensor  # [piece, d_model] float32: the base's output at the pieces
    rows: list[int]


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


class _Top:
    """Every latent's strongest pieces so far ([TOP_CONTEXTS, d_sae] values and piece numbers) and the gold
    labels of the pieces it fires on ([d_sae, label] counts), kept on the device, a few numbers a latent."""

    def __init__(self, d_sae: int, n_labels: int, device: torch.device):
        self.values = torch.full((TOP_CONTEXTS, d_sae), -1.0, device=device)
        self.pieces = torch.zeros((TOP_CONTEXTS, d_sae), dtype=torch.long, device=device)
        self.gold = torch.zeros((d_sae, n_labels + 1), device=device)  # the last column: a word's later pieces
        self.where: list[torch.Tensor] = []  # per batch [piece, 2]: (example row, token)
        self.seen = 0

    def add(self, codes: torch.Tensor, where: torch.Tensor, gold: torch.Tensor) -> None:
        """codes [piece, d_sae]; where [piece, 2] (example row, token); gold [piece] label or IGNORE."""
        n = len(codes)
        numbers = torch.arange(self.seen, self.seen + n, device=codes.device)[:, None].expand(n, codes.shape[1])
        values = torch.cat([self.values, codes])  # [top + piece, d_sae]
        best = values.topk(TOP_CONTEXTS, dim=0)
        self.values = best.values
        self.pieces = torch.cat([self.pieces, numbers]).gather(0, best.indices)
        column = torch.where(gold == IGNORE, torch.full_like(gold, self.gold.shape[1] - 1), gold)
        self.gold += (codes > 0).float().T @ torch.nn.functional.one_hot(column, self.gold.shape[1]).float()
        self.where.append(where.cpu())
        self.seen += n


class _Tally:
    """The predictions scored per edit: right answers, agreement with the base model's read, confusion matrices."""

    def __init__(self, n_labels: int) -> None:
        self.confusion = {name: np.zeros((n_labels, n_labels), np.int64) for name in ("intact", "removed", "control")}
        self.right = dict.fromkeys(EDITS, 0)
        self.agree = dict.fromkeys(("intact", "removed", "control"), 0)

    def score(self, name: str, batch: _Batch, predicted: torch.Tensor, base_read: torch.Tensor | None) -> int:
        """Counts ``predicted`` ([batch] or [batch, token]) under the edit ``name``; returns the scored positions."""
        keep = batch.gold != IGNORE  # [batch] or [batch, token]
        gold, pred = batch.gold[keep], predicted[keep]
        self.right[name] += int((gold == pred).sum())
        if name in self.confusion:
            np.add.at(self.confusion[name], (gold.cpu().numpy(), pred.cpu().numpy()), 1)
        if name in self.agree and base_read is not None:
            self.agree[name] += int((base_read[keep] == pred).sum())
        return int(keep.sum())


def _checked_latents(cc: BatchTopKCrosscoder, latents: Sequence[int], delta: np.ndarray) -> tuple[int, ...]:
    chosen = tuple(dict.fromkeys(int(j) for j in latents))
    if not chosen or len(chosen) > MAX_LATENTS:
        raise BertScopeError(f"Give between 1 and {MAX_LATENTS} latents to switch off.")
    if any(not 0 <= j < cc.d_sae for j in chosen):
        raise BertScopeError(f"The crosscoder has latents 0 to {cc.d_sae - 1}.")
    if len(delta) != cc.d_sae:
        raise BertScopeError(f"{len(delta)} relative norms given for {cc.d_sae} latents.")
    return chosen


def _base_batches(base: LoadedModel, tuned: LoadedModel, encoded, task: str, layer: int, positions: str,
                  tick: Callable[[], None]) -> list[_Batch]:
    """The held-out side in batches (shortest first: little padding), each with the base model's output at its
    pieces, read once."""
    order = sorted(range(len(encoded.ids)), key=lambda r: len(encoded.ids[r]))
    kept: list[_Batch] = []
    for start in range(0, len(order), BATCH):
        rows = order[start:start + BATCH]
        feed, gold = pad(encoded, rows, tuned.tokenizer.pad_token_id, task == TAG).part(slice(None), tuned.device)
        feed = {k: v for k, v in feed.items() if k in tuned.tokenizer.model_input_names}
        pieces = _word_pieces(tuned, feed, positions)
        kept.append(_Batch(feed, gold, pieces, layer_output(base, feed, layer)[pieces].float(), rows))
        tick()
    return kept


@dataclass
class _Reading:
    """The first sweep's findings: how often each latent fires, its mass Σ f ‖W_dec[ft]‖, its top examples,
    the base model's read of every batch, the positions scored."""

    fires: torch.Tensor  # [d_sae]
    mass: torch.Tensor  # [d_sae]
    top: _Top
    base_reads: list[torch.Tensor] = field(default_factory=list)
    scored: int = 0


def _first_sweep(tuned: LoadedModel, cc: BatchTopKCrosscoder, kept: list[_Batch], task: str, layer: int,
                 n_labels: int, codes_of: Callable, norms_ft: torch.Tensor, tally: _Tally,
                 tick: Callable[[], None]) -> _Reading:
    """Intact (its codes read on the way), spliced and the base read, batch by batch."""
    device = tuned.device
    found = _Reading(torch.zeros(cc.d_sae, dtype=torch.long, device=device),
                     torch.zeros(cc.d_sae, dtype=torch.float64, device=device), _Top(cc.d_sae, n_labels, device))
    for batch in kept:
        intact: list[torch.Tensor] = []

        def reading(x: torch.Tensor, _into=intact) -> torch.Tensor:
            _into.append(x)
            return x

        predicted = _predictions(tuned, batch, reading, layer)  # an identity edit that keeps the pieces' output
        codes = codes_of(batch, intact[0])  # [piece, d_sae]
        found.fires += (codes > 0).sum(0)
        found.mass += (codes.sum(0) * norms_ft).double()
        where = torch.nonzero(batch.pieces)  # [piece, 2]: (batch row, token)
        gold = batch.gold[where[:, 0], where[:, 1]] if task == TAG else batch.gold[where[:, 0]]  # [piece]
        example = torch.tensor(batch.rows, device=where.device)[where[:, 0]]  # [piece] its example's row
        found.top.add(codes, torch.stack([example, where[:, 1]], dim=1), gold)
        del codes
        base_read = _predictions(tuned, batch, _put(batch.base), layer)
        found.base_reads.append(base_read)
        found.scored += tally.score("intact", batch, predicted, base_read)
        tally.score("spliced", batch, _predictions(tuned, batch, _spliced(cc, batch, codes_of), layer), None)
        tally.score("base read", batch, base_read, None)
        tick()
    return found


def check_crosscoder_layer(cc: BatchTopKCrosscoder, layer: int) -> int:
    """``layer``, or one line when the crosscoder's hook point names another layer."""
    if cc.info.layer is not None and cc.info.layer != layer:
        raise BertScopeError(f"This crosscoder reads layer {cc.info.layer} ({cc.info.hook_name}), not layer {layer}: "
                             f"read it at layer {cc.info.layer}.")
    return layer


@torch.no_grad()
def diff_effect(base: LoadedModel, tuned: LoadedModel, cc: BatchTopKCrosscoder, layer: int,
                latents: Sequence[int], delta: np.ndarray, examples: int = 500, seed: int = 0,
                progress: Callable[[int, int], None] | None = None, found: TaskSide | None = None) -> DiffEffect:
    """The causal check (module docstring) of switching ``latents`` off in ``tuned`` at ``layer``; ``delta``:
    each latent's relative decoder norm (``ModelDiff.delta``), from which the controls are drawn; ``found``:
    ``task_side(tuned, layer, examples, seed)`` when the caller has it already.

    Args:
        base: the base model (model 0 of the crosscoder): its layer output is encoded beside the fine-tuned one, and
            put in its place for the base read.
        tuned: the fine-tuned task model (a classifier or a tagger), model 1 of the crosscoder.
        cc: the crosscoder of both models' layer ``layer`` output.
        layer: the layer, from 0: the one the crosscoder reads (its hook point names it), else one line.
        latents: 1 to ``MAX_LATENTS`` (64) latents, from 0, switched off together.
        delta: [d_sae] each latent's relative decoder norm (0 base-only, 1 fine-tuned-only).
        examples: held-out examples scored, 1 to ``MAX_EXAMPLES`` (2,000), a sample when the side has more.
        seed: which examples are sampled.
        progress: called with (done, total) steps, three a batch of 32 examples.
        found: the held-out side already drawn (``task_side``); then ``examples`` and ``seed`` are not read.

    Returns:
        A ``DiffEffect``: the latents and their controls, the task, the side read, its labels, the examples and the
            texts or words scored; each latent's and control's firing count and amount removed; the head's accuracy
            under each edit (``EDITS``: intact, spliced, removed, control, base read); how often the intact, removed
            and control predictions agree with the base read; [gold, predicted] confusion counts; and every latent's
            top contexts and gold labels.
    """
    layer = check_crosscoder_layer(cc, check_layer(tuned, layer))
    chosen = _checked_latents(cc, latents, delta)
    positions = cc.info.positions
    found = found or task_side(tuned, layer, examples, seed, positions=positions)
    task, side, labels = found.task, found.side, found.labels
    if cc.W_dec.device != tuned.device:  # a copy: the caller's crosscoder stays where it is
        cc = copy.deepcopy(cc).to(tuned.device)
    w_ft = cc.W_dec[1].detach().float()  # [d_sae, d_model]

    def codes_of(batch: _Batch, x: torch.Tensor) -> torch.Tensor:  # x [piece, d_model]: the fine-tuned side
        return cc.encode(torch.stack([batch.base, x], dim=1), use_threshold=True).float()  # [piece, d_sae]

    encoded = encode(tuned.tokenizer, task, side, labels, tuned.max_length)
    steps, done = 3 * len(range(0, len(encoded.ids), BATCH)), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, steps)

    kept = _base_batches(base, tuned, encoded, task, layer, positions, tick)
    tally = _Tally(len(labels))
    reading = _first_sweep(tuned, cc, kept, task, layer, len(labels), codes_of, w_ft.norm(dim=-1), tally, tick)
    fires_np, mass_np = reading.fires.cpu().numpy(), reading.mass.cpu().numpy()
    controls = _controls(chosen, mass_np, delta)
    for batch, base_read in zip(kept, reading.base_reads):  # second sweep: the chosen latents off, then the controls
        for name, group in (("removed", chosen), ("control", controls)):
            edited = _predictions(tuned, batch, _removal(batch, list(group), w_ft, codes_of), layer)
            tally.score(name, batch, edited, base_read)
        tick()
    scored = reading.scored
    if not scored:
        raise BertScopeError("No held-out word or text could be scored.")
    contexts, gold_counts = _contexts(tuned, reading.top, fires_np, encoded, side, task, labels)
    return DiffEffect(layer, task, f"{found.source}, held-out side", tuple(labels), len(side), scored, chosen,
                      controls, {j: int(fires_np[j]) for j in chosen + controls},
                      {j: float(mass_np[j]) for j in chosen + controls},
                      {name: tally.right[name] / scored for name in EDITS},
                      {name: tally.agree[name] / scored for name in tally.agree}, tally.confusion, contexts,
                      gold_counts)


Edit = Callable[[torch.Tensor], torch.Tensor]  # the fine-tuned model's output at the pieces -> what replaces it
Codes = Callable[[_Batch, torch.Tensor], torch.Tensor]


def _put(replacement: torch.Tensor) -> Edit:
    return lambda _x: replacement


def _spliced(cc: BatchTopKCrosscoder, batch: _Batch, codes_of: Codes) -> Edit:
    return lambda x: cc.decode(codes_of(batch, x))[:, 1]  # the fine-tuned side's reconstruction


def _removal(batch: _Batch, off: list[int], w_ft: torch.Tensor, codes_of: Codes) -> Edit:
    return lambda x: x - codes_of(batch, x)[:, off] @ w_ft[off]  # their contributions taken out


def _controls(chosen: tuple[int, ...], removed: np.ndarray, delta: np.ndarray) -> tuple[int, ...]:
    """For each chosen latent, the latent both models write (relative norm in [0.1, 0.9)) whose removal takes
    out the nearest amount (``removed``: Σ f ‖W_dec[ft]‖ over the pieces), not chosen and not already a control."""
    eligible = (delta >= BASE_ONLY) & (delta < FT_ONLY) & (removed > 0)
    eligible[list(chosen)] = False
    out = []
    for j in chosen:
        gap = np.where(eligible, np.abs(removed - removed[j]), np.inf)
        best = int(np.argmin(gap))
        if not eligible[best]:
            raise BertScopeError("Too few latents that both models write fire on the held-out text to match every "
                                 "chosen latent with a control.")
        out.append(best)
        eligible[best] = False
    return tuple(out)


def _contexts(tuned: LoadedModel, top: _Top, fires: np.ndarray, encoded, side, task: str, labels: list[str]
              ) -> tuple[dict[int, list[LatentContext]], dict[int, dict[str, int]]]:
    """Every latent that fired: its strongest pieces as contexts, and the gold labels where it fires."""
    where = torch.cat(top.where).numpy() if top.where else np.zeros((0, 2), np.int64)  # [piece, 2]
    values, pieces = top.values.cpu().numpy(), top.pieces.cpu().numpy()  # [top, d_sae]
    gold = top.gold.cpu().numpy().astype(np.int64)  # [d_sae, label + 1]
    names = [*labels, "a later piece"]
    contexts: dict[int, list[LatentContext]] = {}
    counts: dict[int, dict[str, int]] = {}
    for latent in np.flatnonzero(fires):
        j = int(latent)
        found = []
        for k in range(TOP_CONTEXTS):
            if values[k, j] <= 0:
                break
            row, token = (int(v) for v in where[pieces[k, j]])
            found.append(_context(tuned, encoded, side, task, labels, float(values[k, j]), row, token))
        contexts[j] = found
        counts[j] = {names[i]: int(gold[j, i]) for i in np.argsort(-gold[j], kind="stable") if gold[j, i] > 0}
    return contexts, counts


def _context(tuned: LoadedModel, encoded, side, task: str, labels: list[str], activation: float, row: int,
             token: int) -> LatentContext:
    ids = encoded.ids[row]
    text = " ".join(side.words[row]) if task == TAG else side.texts[row]
    piece = tuned.tokenizer.convert_ids_to_tokens([ids[token]])[0] if token < len(ids) else ""
    if task == TAG:
        label = encoded.labels[row][token] if token < len(encoded.labels[row]) else IGNORE
        gold = labels[label] if label != IGNORE else "a later piece"
    else:
        gold = labels[encoded.labels[row]]
    return LatentContext(text, piece, activation, gold)
