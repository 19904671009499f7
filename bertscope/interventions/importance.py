"""Which heads matter: head importance from gate gradients, and the pruning curve (Michel, Levy &
Neubig 2019, "Are Sixteen Heads Really Better than One?", NeurIPS; §4.1, eq. 2-3, Figure 3).

- Gates ``ξ_h = 1`` multiply each head's slice of the attention context (the hook point ``blocks.{l}.attn.hook_z``); the
  importance of head h is ``I_h = E_x |∂L(x)/∂ξ_h|``, with L the masked-LM loss at BERT's 15%
  positions (``heads.masking``'s rule, seeded), accumulated per batch as the absolute gate
  gradient and divided by the tokens seen, then each layer's scores are divided by their ℓ2 norm
  ("normalised per layer", §4.1). Checked against transformers' bertology example of the paper
  (``run_bertology.py``: ``compute_heads_importance``), which does the same per batch.
- The pruning curve: heads removed (zeroed) in increasing importance, 10% of all heads at a time,
  and the masked-LM top-1 accuracy on held-out Brown documents at each step, beside the same curve
  for random orders (mean and spread). Whether the importance order keeps accuracy longer is a
  finding on the model at hand, not a given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.core.hook_points import UNEMBED_IN, every_layer
from bertscope.core.hooked_pass import merged, turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches, mlm_logits, wide
from bertscope.corpora.brown_tasks import brown_split_texts
from bertscope.corpora.sentences import shipped_corpus
from bertscope.errors import BertScopeError
from bertscope.interventions.ablation import check_heads, head_edit
from bertscope.mlm.fill_mask import require_mlm
from bertscope.mlm.masking import IGNORE_INDEX, replacement_ids
from bertscope.runtime.engine import Engine
from bertscope.training.batches import mask_tokens, special_mask
from bertscope.training.config import RecipeConfig
from bertscope.training.model import vocabulary_layer

FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))  # share of all heads removed: 0, 10%, ..., 100%
RANDOM_ORDERS = 3


@dataclass(frozen=True)
class HeadImportance:
    importance: np.ndarray  # [layer, head] normalised per layer (ℓ2)
    raw: np.ndarray  # [layer, head] mean |∂L/∂ξ| per token, before the per-layer normalisation
    sentences: int
    positions: int  # masked-LM positions the loss counted
    loss: float  # the mean masked-LM loss over them (the intact model)

    def order(self) -> np.ndarray:
        """[layer x head] flat head indices (layer * heads + head), least important first."""
        return np.argsort(self.importance.ravel(), kind="stable")

    def to_json(self) -> dict:
        return {"importance": self.importance.round(6).tolist(), "raw": self.raw.tolist(),
                "sentences": self.sentences, "positions": self.positions, "loss": self.loss,
                "numbering": "importance[layer][head], both from 0 as in `attention`"}


def bert_corruption(lm: LoadedModel, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 on a CPU batch of ids: (inputs, labels), by the one masking rule."""
    replacements = torch.from_numpy(replacement_ids(lm.tokenizer, lm.vocab_size))
    return mask_tokens(ids, special_mask(lm.tokenizer, ids), replacements, lm.tokenizer.mask_token_id,
                       RecipeConfig(), generator)


def masked_batches(lm: LoadedModel, texts: Sequence[str], batch_size: int, seed: int
                   ) -> Iterator[tuple[list[int], dict, torch.Tensor, torch.Tensor]]:
    """(rows, feed with BERT's corruption, chosen [batch, token] bool, gold ids [chosen]), all on
    the device; the corruption is seeded, so the same texts and seed give the same positions."""
    generator = torch.Generator().manual_seed(seed)
    for rows, padded, feed in batches(lm, texts, batch_size):
        inputs, labels = bert_corruption(lm, padded.feed["input_ids"], generator)
        chosen = (labels != IGNORE_INDEX).to(lm.device)  # [batch, token]
        yield rows, {**feed, "input_ids": inputs.to(lm.device)}, chosen, labels.to(lm.device)[chosen]


def chosen_logits(lm: LoadedModel, feed: dict, chosen: torch.Tensor, hooks: dict | None = None,
                   grad: bool | None = False) -> torch.Tensor:
    """[chosen, vocab] masked-LM logits at ``chosen`` ([batch, token] bool) only: where the head's
    vocabulary projection is a plain Linear, it sees only those rows (``unembed.hook_in``)."""
    gather = vocabulary_layer(lm.model) is not None
    only_chosen = {UNEMBED_IN: lambda x, hook: x[chosen]} if gather else None  # [batch, token, d] -> [chosen, d]
    logits = mlm_logits(lm.run(feed, hooks=merged(hooks, only_chosen), grad=grad))
    return logits if gather else logits[chosen]


def gated_loss(lm: LoadedModel, gates: torch.Tensor, feed: dict, chosen: torch.Tensor, gold: torch.Tensor
               ) -> torch.Tensor:
    """The mean masked-LM loss at ``chosen`` with each head's context multiplied by its gate
    (``gates`` [layer, head]); differentiable in the gates. Run under the model's guard."""

    def gate(layer: int, context: torch.Tensor) -> torch.Tensor:  # [batch, token, head, d_head]
        return context * gates[layer].to(context.dtype)[None, None, :, None]

    hooks = every_layer("attn.hook_z", gate, lm.num_layers)
    logits = chosen_logits(lm, feed, chosen, hooks, grad=None)  # [chosen, vocab], in the caller's grad mode
    return F.cross_entropy(wide(logits), gold)


def batch_gradient(lm: LoadedModel, gates: torch.Tensor, feed: dict, chosen: torch.Tensor, gold: torch.Tensor
                   ) -> tuple[torch.Tensor, float]:
    """One batch's |∂L/∂ξ| ([layer, head], on the device) and its mean masked-LM loss."""
    with turn(lm), torch.enable_grad():  # the forward and its backward; a batch at a time: others get turns
        loss = gated_loss(lm, gates, feed, chosen, gold)
        (grad,) = torch.autograd.grad(loss, gates)
    return grad.abs(), float(loss.detach())


def new_gates(lm: LoadedModel) -> torch.Tensor:
    return torch.ones(lm.num_layers, lm.num_heads, device=lm.device, requires_grad=True)  # ξ, [layer, head]


def importance_from_sums(total: np.ndarray, tokens: int, positions: int, loss_sum: float,
                         sentences: int) -> HeadImportance:
    """From Σ|∂L/∂ξ| over batches ([layer, head]), the real tokens and masked positions seen and
    the summed loss: what ``head_importance`` adds up, and what engines that split the batches
    (Ray) add up too."""
    raw = np.asarray(total, np.float64) / max(tokens, 1)
    normalised = raw / (np.sqrt((raw ** 2).sum(-1, keepdims=True)) + 1e-20)  # ℓ2 per layer
    return HeadImportance(normalised.astype(np.float32), raw.astype(np.float32), sentences, positions,
                          loss_sum / max(positions, 1))


def head_importance(lm: LoadedModel, texts: Sequence[str], batch_size: int = 16, seed: int = 0,
                    progress: Callable[[int, int], None] | None = None, engine: Engine | None = None
                    ) -> HeadImportance:
    """Every head's importance for the masked-LM loss over ``texts``; with an ``engine``
    (``runtime.engine``) its workers take the gradients of the batches drawn here.

    Args:
        lm: a model with a masked-LM head.
        texts: the sentences masked (BERT's 15 %, seeded).
        batch_size: sentences a batch.
        seed: the masking's seed.
        progress: called with (done, total) sentences.
        engine: who takes the gradients (``runtime.engine``).

    Returns:
        ``HeadImportance``: [layer, head] importance (each layer normalised) and the raw gradients.
    """
    require_mlm(lm)
    if not texts:
        raise BertScopeError("Head importance needs at least one sentence.")
    if engine is not None:
        total, tokens, positions, loss_sum = engine.importance_sums(lm, texts, batch_size, seed, progress)
        return importance_from_sums(total, tokens, positions, loss_sum, len(texts))
    gates = new_gates(lm)
    total = torch.zeros(lm.num_layers, lm.num_heads, device=lm.device)  # Σ |∂L/∂ξ| over batches
    tokens = positions = done = 0
    loss_sum = 0.0
    for rows, feed, chosen, gold in masked_batches(lm, texts, batch_size, seed):
        grad, loss = batch_gradient(lm, gates, feed, chosen, gold)
        total += grad
        tokens += int(feed["attention_mask"].sum())
        positions += len(gold)
        loss_sum += loss * len(gold)
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return importance_from_sums(total.cpu().numpy(), tokens, positions, loss_sum, len(texts))


SHIPPED_FIT_SHARE = 0.7  # without Brown: the shipped sample's first 70% to measure on, the rest held out


def sample_texts(fit: int = 256, held: int = 200) -> tuple[list[str], list[str], str]:
    """(sentences to measure importance on, held-out sentences to score pruning on, where they
    come from): Brown's training and held-out documents; without the corpus, the shipped sample
    split in two (its first 70% and the rest), never sharing a sentence."""
    if fit < 1 or held < 1:
        raise BertScopeError("Give at least one sentence to measure on and one to score on.")
    try:
        return (brown_split_texts(fit, held_out=False), brown_split_texts(held, held_out=True),
                f"{fit} Brown sentences (training documents); pruning scored on {held} from held-out documents")
    except BertScopeError:  # the corpus is not installed
        texts = shipped_corpus()
        cut = int(len(texts) * SHIPPED_FIT_SHARE)
        return (texts[:cut][:fit], texts[cut:][:held],
                f"the shipped sample ({len(texts)} sentences; the Brown corpus is not installed): importance on "
                f"{min(fit, cut)}, pruning scored on {min(held, len(texts) - cut)} others")


def held_out_texts(held: int = 200) -> tuple[list[str], str]:
    """Sentences to score on: Brown's held-out documents, else the shipped sample's held-out part."""
    try:
        return brown_split_texts(held, held_out=True), f"{held} Brown sentences from held-out documents"
    except BertScopeError:  # the corpus is not installed
        texts = shipped_corpus()
        kept = texts[int(len(texts) * SHIPPED_FIT_SHARE):][:held]
        return kept, f"{len(kept)} sentences of the shipped sample (the Brown corpus is not installed)"


@dataclass(frozen=True)
class PruningCurve:
    fractions: tuple[float, ...]  # share of all heads removed
    importance_order: list[float]  # held-out top-1 per fraction, least important heads removed first
    random_orders: list[list[float]]  # the same for each random order
    intact: float  # top-1 with every head
    positions: int  # held-out masked-LM positions scored

    @property
    def random_mean(self) -> np.ndarray:
        return np.mean(self.random_orders, axis=0)

    @property
    def random_spread(self) -> tuple[np.ndarray, np.ndarray]:
        values = np.array(self.random_orders)
        return values.min(axis=0), values.max(axis=0)

    def to_json(self) -> dict:
        return {"fraction": list(self.fractions), "importance_order": self.importance_order,
                "random_orders": self.random_orders, "positions": self.positions}


def _held_out_batches(lm: LoadedModel, texts: Sequence[str], batch_size: int, seed: int) -> list[tuple]:
    """One fixed corruption of the held-out texts: [(feed, chosen [batch, token], gold [chosen])]."""
    return [(feed, chosen, gold) for _, feed, chosen, gold in masked_batches(lm, texts, batch_size, seed + 1_000_003)]


def mlm_top1(lm: LoadedModel, held: list[tuple], removed: Sequence[tuple[int, int]] = ()) -> float:
    """Held-out top-1 over the chosen positions, with ``removed`` heads zeroed."""
    right = count = 0
    with head_edit(lm, removed) if removed else nullcontext():
        for feed, chosen, gold in held:
            best = chosen_logits(lm, feed, chosen).argmax(-1)
            right += int((best == gold).sum())
            count += len(gold)
    return right / max(count, 1)


@dataclass(frozen=True)
class HeldOutAccuracy:
    intact: float  # masked-LM top-1 with every head
    removed: float  # with the chosen heads zeroed
    positions: int
    sentences: int


def held_out_accuracy(lm: LoadedModel, texts: Sequence[str], removed: Sequence[tuple[int, int]],
                      batch_size: int = 32, seed: int = 0) -> HeldOutAccuracy:
    """Masked-LM top-1 on ``texts`` (BERT's corruption, seeded) with and without ``removed``.

    Args:
        lm: a model with a masked-LM head.
        texts: held-out sentences.
        removed: (layer, head) pairs zeroed, both from 0.
        batch_size: sentences a pass.
        seed: the corruption, drawn with ``seed`` + 1,000,003 (not the draw ``head_importance`` makes with the same
            seed).

    Returns:
        ``HeldOutAccuracy``: top-1 intact and with the heads removed, over the same positions; the positions scored
            and the sentences.
    """
    require_mlm(lm)
    removed = check_heads(lm, removed)  # each head the model has, or one line
    if not texts:
        raise BertScopeError("The held-out accuracy needs sentences to score.")
    held = _held_out_batches(lm, texts, batch_size, seed)
    positions = sum(len(gold) for _, _, gold in held)
    return HeldOutAccuracy(mlm_top1(lm, held), mlm_top1(lm, held, removed), positions, len(texts))


def pruning_curve(lm: LoadedModel, importance: HeadImportance, held_out: Sequence[str], batch_size: int = 32,
                  orders: int = RANDOM_ORDERS, seed: int = 0,
                  progress: Callable[[int, int], None] | None = None) -> PruningCurve:
    """Held-out masked-LM top-1 as heads go, 10% of them at a time: least important first, and in
    ``orders`` random orders (seeded).

    Args:
        lm: the model.
        importance: the heads' importance (``head_importance``).
        held_out: sentences scored.
        batch_size: sentences a batch.
        orders: random orders beside the importance order.
        seed: the orders' and the masking's seed.
        progress: called with (done, total) steps.

    Returns:
        ``PruningCurve``: top-1 at each fraction removed, in the importance order and the random ones.
    """
    require_mlm(lm)
    if not held_out:
        raise BertScopeError("The pruning curve needs held-out sentences to score.")
    held = _held_out_batches(lm, held_out, batch_size, seed)
    positions = sum(len(gold) for _, _, gold in held)
    return curve_of(lm, importance, lambda removed: mlm_top1(lm, held, removed), positions, orders, seed, progress)


def curve_of(lm: LoadedModel, importance: HeadImportance, score: Callable[[list[tuple[int, int]]], float],
             scored: int, orders: int = RANDOM_ORDERS, seed: int = 0,
             progress: Callable[[int, int], None] | None = None) -> PruningCurve:
    """The pruning curve of any held-out ``score(removed heads)``: heads removed 10% at a time, least
    important first and in ``orders`` random orders (seeded); ``scored``: what the score counted."""
    n = lm.num_layers * lm.num_heads
    rng = np.random.default_rng(seed)
    all_orders = [importance.order(), *(rng.permutation(n) for _ in range(orders))]
    counts = [int(round(f * n)) for f in FRACTIONS]
    cache: dict[frozenset, float] = {}
    curves, done, total = [], 0, len(all_orders) * len(counts)
    for order in all_orders:
        curve = []
        for k in counts:
            removed = frozenset((int(i) // lm.num_heads, int(i) % lm.num_heads) for i in order[:k])
            if removed not in cache:  # every order shares the first point (nothing removed) and the last
                cache[removed] = score(sorted(removed))
            curve.append(cache[removed])
            done += 1
            if progress:
                progress(done, total)
        curves.append(curve)
    return PruningCurve(FRACTIONS, curves[0], curves[1:], curves[0][0], scored)
