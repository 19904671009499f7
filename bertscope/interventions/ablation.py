"""Head ablation: remove chosen heads and watch a decision change (Michel et al. 2019, §3).

A head is removed by acting on its slice of the attention context before the output projection
(the hook point ``blocks.{l}.attn.hook_z``): ``zero`` sets it to 0, as Hugging Face's ``head_mask`` of 0 did; ``mean``
replaces it by the head's mean context over a reference sample (mean ablation: the head still
contributes its average, so only what it does for this input goes), by default 200 sentences
from the training side of the Brown corpus's document split.

The decision is one ``attribution.gradients.Target``: a masked-token prediction (the top-k at
every mask before and after; with ``POSITION:TOKEN``, that token's probability too), BERT's NSP,
ALBERT's SOP, or a saved probe's class.

    >>> from bertscope import load_model
    >>> lm = load_model("bundled-mlm")
    >>> every_head_of_4_and_5 = [(layer, head) for layer in (4, 5) for head in range(12)]
    >>> r = ablate_heads(lm, "He wrote a [MASK] to his mother.", every_head_of_4_and_5, mode="zero")
    >>> [(p.token, round(p.score, 2)) for p in r.masks[0].before[:2]]   # intact
    [('letter', 0.47), ('word', 0.08)]
    >>> [(p.token, round(p.score, 2)) for p in r.masks[0].after[:2]]    # the top two layers' heads removed
    [('letter', 0.05), ('statement', 0.03)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from bertscope.attribution.gradients import Target, input_embeddings, score_function
from bertscope.core.forward import inspect
from bertscope.core.hook_points import every_layer
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.corpora.brown_tasks import brown_split_texts
from bertscope.corpora.sentences import shipped_corpus
from bertscope.errors import BertScopeError
from bertscope.mlm.fill_mask import Prediction, require_mlm, top_predictions

Mode = Literal["zero", "mean"]
MODES = ("zero", "mean")
REFERENCE_SENTENCES = 200
MAX_HEADS = 1024  # every head of BERT-large is 384


def check_heads(lm: LoadedModel, heads: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The heads, sorted and each one the model has, or one line naming the first it lacks."""
    chosen = tuple(sorted({(int(layer), int(head)) for layer, head in heads}))
    for layer, head in chosen:
        if not (0 <= layer < lm.num_layers and 0 <= head < lm.num_heads):
            raise BertScopeError(f"Layer {layer}, head {head} does not exist: {lm.name} has layers 0-{lm.num_layers - 1} "
                                 f"and heads 0-{lm.num_heads - 1}.")
    if len(chosen) > MAX_HEADS:
        raise BertScopeError(f"At most {MAX_HEADS} heads at once.")
    return chosen


def parse_heads(spec: str) -> list[tuple[int, int]]:
    """``"3:7,5:2"`` (layer:head, both from 0, as ``attention`` numbers them) -> [(3, 7), (5, 2)]."""
    heads = []
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        layer, colon, head = part.strip().partition(":")
        if not colon or not layer.strip().isdigit() or not head.strip().isdigit():
            raise BertScopeError(f"{part.strip()!r} is not LAYER:HEAD: write heads as 3:7,5:2 (numbered from 0).")
        heads.append((int(layer), int(head)))
    if not heads:
        raise BertScopeError("Give at least one head as LAYER:HEAD, e.g. 3:7.")
    return heads


def reference_texts(sentences: int = REFERENCE_SENTENCES) -> tuple[list[str], str]:
    """(texts, where they come from): Brown's training documents, else the shipped sample."""
    try:
        return brown_split_texts(sentences, held_out=False), f"{sentences} Brown sentences (training documents)"
    except BertScopeError:  # the corpus is not installed: the shipped sample of varied sentences
        texts = shipped_corpus()
        return texts, f"the shipped sample of {len(texts)} sentences (the Brown corpus is not installed)"


@dataclass(frozen=True)
class MeanContexts:
    """Each head's context averaged over a reference sample: what mean ablation puts in its place."""

    means: torch.Tensor  # [layer, head, d_head] float32, on the model's device
    reference: str  # what was averaged over, in words
    tokens: int  # real tokens averaged


def mean_head_contexts(lm: LoadedModel, texts: Sequence[str] | None = None, batch_size: int = 32,
                       progress: Callable[[int, int], None] | None = None) -> MeanContexts:
    """Each head's context averaged over every real token of ``texts`` (default: 200 Brown
    sentences from the training documents), accumulated on the model's device in float32.

    Args:
        lm: the model.
        texts: the reference sentences (None: 200 Brown sentences of the training documents, or the shipped sample
            when Brown is not installed).
        batch_size: sentences a pass.
        progress: called with (done, total) sentences.

    Returns:
        ``MeanContexts``: ``means`` [layer, head, d_head] float32 (layers and heads from 0), what was averaged over,
            in words, and the tokens counted ([CLS] and [SEP] included, padding not).
    """
    if texts is None:
        texts, where = reference_texts()
    else:
        texts, where = list(texts), f"{len(texts)} sentences given"
    if not texts:
        raise BertScopeError("Mean ablation needs at least one reference sentence.")
    d_head = lm.hidden_size // lm.num_heads
    sums = torch.zeros(lm.num_layers, lm.num_heads, d_head, device=lm.device)  # [layer, head, d_head]
    real: dict[str, torch.Tensor] = {}  # the current batch's [batch, token] mask, read by the hook
    count = done = 0

    def add(layer: int, context: torch.Tensor) -> None:  # context [batch, token, head, d_head]
        mask = real["mask"][..., None, None].to(context.dtype)
        sums[layer] += (context.float() * mask).sum(dim=(0, 1))
        return None

    hooks = every_layer("attn.hook_z", add, lm.num_layers)
    for rows, _padded, feed in batches(lm, texts, batch_size):
        real["mask"] = feed["attention_mask"].bool()
        lm.run(feed, hooks=hooks, encoder_only=True)
        count += int(feed["attention_mask"].sum())
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return MeanContexts(sums / max(count, 1), where, count)


def head_edit(lm: LoadedModel, heads: Sequence[tuple[int, int]], mode: Mode = "zero",
              means: MeanContexts | None = None):
    """The context manager that removes ``heads`` in every pass run inside it (this thread's)."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    if mode == "mean" and means is None:
        raise BertScopeError("Mean ablation needs the heads' mean contexts over a reference sample.")

    def edit(layer: int, context: torch.Tensor) -> torch.Tensor | None:  # [batch, token, head, d_head]
        chosen = by_layer.get(layer)
        if not chosen:
            return None
        new = context.clone()
        new[:, :, chosen] = 0 if mode == "zero" else means.means[layer, chosen].to(context.dtype)  # [head, d_head]
        return new

    return lm.hooks(every_layer("attn.hook_z", edit, lm.num_layers))


@dataclass(frozen=True)
class MaskChange:
    position: int
    before: list[Prediction]  # top-k, intact model
    after: list[Prediction]  # top-k, heads removed
    token: str | None = None  # the token asked about (POSITION:TOKEN), with its probability before and after
    token_before: float | None = None
    token_after: float | None = None

    def to_json(self) -> dict:
        out = {"position": self.position,
               "before": [{"token": p.token.strip(), "probability": p.score} for p in self.before],
               "after": [{"token": p.token.strip(), "probability": p.score} for p in self.after]}
        if self.token is not None:
            out.update(token=self.token, token_before=self.token_before, token_after=self.token_after)
        return out


@dataclass(frozen=True)
class AblationResult:
    mode: str
    heads: tuple[tuple[int, int], ...]
    tokens: list[str]
    masks: list[MaskChange]  # token targets: one per [MASK]
    decision: dict | None  # NSP / SOP / probe: {"target", "before", "after"} probabilities
    reference: str | None  # what mean ablation averaged over

    def to_json(self) -> dict:
        out = {"mode": self.mode, "heads": [list(h) for h in self.heads], "tokens": self.tokens}
        if self.decision is not None:
            out["decision"] = self.decision
        else:
            out["masks"] = [m.to_json() for m in self.masks]
        if self.reference:
            out["reference"] = self.reference
        return out


def ablate_heads(lm: LoadedModel, text: str, heads: Sequence[tuple[int, int]], mode: Mode = "zero",
                 pair: str | None = None, target: Target | None = None, top_k: int = 5,
                 reference: Sequence[str] | None = None, means: MeanContexts | None = None,
                 progress: Callable[[int, int], None] | None = None) -> AblationResult:
    """The decision on ``text`` with every model weight in place, then with ``heads`` removed.
    Mean mode averages over ``reference`` (default: Brown), unless ``means`` are given.

    Args:
        lm: the model.
        text: the text (a masked LM: with [MASK]).
        heads: (layer, head) pairs to remove, from 0.
        mode: "zero", or "mean" (each head's average context over ``reference``).
        pair: segment B, when a sentence-pair head is watched.
        target: the decision watched (default: the masked LM's predictions).
        top_k: predictions kept before and after.
        reference: texts the mean contexts come from.
        means: mean contexts computed already.
        progress: called with (done, total).

    Returns:
        ``AblationResult``: the predictions (or decision) before and after.
    """
    if mode not in MODES:
        raise BertScopeError(f"Unknown mode {mode!r}: use zero or mean.")
    chosen = check_heads(lm, heads)
    if not 1 <= top_k <= 100:
        raise BertScopeError("top-k must be between 1 and 100.")
    if mode == "mean" and means is None:
        means = mean_head_contexts(lm, reference, progress=progress)
    where = means.reference if mode == "mean" else None
    edit = head_edit(lm, chosen, mode, means)
    tokens, masks, decision = decision_change(lm, text, edit, pair, target, top_k)
    return AblationResult(mode, chosen, tokens, masks, decision, where)


def decision_change(lm: LoadedModel, text: str, edit, pair: str | None = None, target: Target | None = None,
                    top_k: int = 5) -> tuple[list[str], list[MaskChange], dict | None]:
    """(tokens, each mask's top-k before and after, or the decision's probability before and after):
    ``text`` read intact, then inside ``edit`` (a context manager of hooks: heads removed, features
    switched off or steered)."""
    if not 1 <= top_k <= 100:
        raise BertScopeError("top-k must be between 1 and 100.")
    if target is not None and target.kind != "token":
        template = inspect(lm, text, pair, with_logits=False, with_attentions=False, with_hidden_states=False)
        f, resolved = score_function(lm, template, target)
        x, _ = input_embeddings(lm, template)
        # f is a log-probability, except a regression head's value, which is watched as it is
        value = resolved.kind == "class" and lm.task is not None and lm.task.scoring == "none"
        with torch.no_grad():
            before, after = f(x.to(lm.dtype))[0], None
            with edit:
                after = f(x.to(lm.dtype))[0]
        before, after = (float(before), float(after)) if value else (float(before.exp()), float(after.exp()))
        return template.tokens, [], {"target": resolved.to_json(), "before": before, "after": after}
    require_mlm(lm)
    intact = inspect(lm, text, pair, with_attentions=False, with_hidden_states=False, logit_positions="masks")
    if not intact.logit_positions:
        raise BertScopeError("The text has no mask: put [MASK] where the prediction to test is, or give --target "
                             "nsp, sop or a probe.")
    with edit:
        ablated = inspect(lm, text, pair, with_attentions=False, with_hidden_states=False, logit_positions="masks")
    token_id = None
    if target is not None and target.token is not None:
        _, resolved = score_function(lm, intact, target)  # checks the position and finds the token's id
        token_id = resolved.token_id
    masks = []
    for position in intact.logit_positions:
        before, after = intact.logits_at(position), ablated.logits_at(position)
        change = MaskChange(position, top_predictions(before, top_k, lm.tokenizer),
                            top_predictions(after, top_k, lm.tokenizer))
        if token_id is not None and position == target.position:
            p_before = float(np.exp(before[token_id] - np.logaddexp.reduce(before)))
            p_after = float(np.exp(after[token_id] - np.logaddexp.reduce(after)))
            change = MaskChange(position, change.before, change.after, target.token, p_before, p_after)
        masks.append(change)
    if target is not None and target.position not in intact.logit_positions:
        raise BertScopeError(f"Token {target.position} is not a [MASK]: the masks are at {list(intact.logit_positions)}.")
    return intact.tokens, masks, None

