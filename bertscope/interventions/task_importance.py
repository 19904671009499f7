"""Head importance on a fine-tuned classifier's own task (Michel, Levy & Neubig 2019, §4.1: BERT
fine-tuned on MNLI), and the pruning curve scored by the task's held-out accuracy.

The same gates and the same estimator as ``interventions.importance`` (``I_h = E_x |∂L(x)/∂ξ_h|``
accumulated per batch, divided by the tokens seen, each layer ℓ2-normalised), with L the
cross-entropy of the head's softmax against the gold labels of a labelled file (single-label
classification; pairs as the model reads them). The pruning curve removes heads 10% at a time
(``importance.curve_of``) and scores accuracy on held-out labelled records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.core.hook_points import every_layer
from bertscope.core.hooked_pass import turn
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches, wide
from bertscope.core.task_head import SEQUENCE, require_task
from bertscope.errors import BertScopeError
from bertscope.interventions.ablation import head_edit
from bertscope.interventions.importance import HeadImportance, PruningCurve, curve_of, importance_from_sums, new_gates

Labelled = list[tuple[list[int], dict, torch.Tensor]]  # (rows, feed on the device, gold label ids [batch])


def labelled_batches(lm: LoadedModel, texts: Sequence[str], gold: Sequence[str], pairs: Sequence[str] | None = None,
                     batch_size: int = 16) -> Labelled:
    """The records in batches bounded by bytes, each with its gold label ids."""
    require_task(lm, SEQUENCE)
    if lm.task.scoring != "softmax":
        raise BertScopeError(f"Head importance on the task loss takes a single-label classifier; {lm.name}'s head "
                             f"is {'multi-label' if lm.task.scoring == 'sigmoid' else 'a regression'}.")
    if len(gold) != len(texts) or not texts:
        raise BertScopeError("Give one gold label for each text (and at least one text).")
    unknown = sorted(set(gold) - set(lm.task.labels))
    if unknown:
        raise BertScopeError(f"The file's labels {', '.join(unknown[:10])} are not the model's: it has "
                             f"{', '.join(lm.task.labels)}.")
    ids = np.array([lm.task.labels.index(g) for g in gold])
    return [(rows, feed, torch.from_numpy(ids[rows]).to(lm.device))
            for rows, _, feed in batches(lm, texts, batch_size, pairs=pairs)]


def task_gated_loss(lm: LoadedModel, gates: torch.Tensor, feed: dict, gold: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of the head against ``gold`` with each head's context multiplied by
    its gate (``gates`` [layer, head]), in the caller's grad mode."""

    def gate(layer: int, context: torch.Tensor) -> torch.Tensor:  # [batch, token, head, d_head]
        return context * gates[layer].to(context.dtype)[None, None, :, None]

    logits = lm.run(feed, hooks=every_layer("attn.hook_z", gate, lm.num_layers), grad=None).logits  # [batch, label]
    return F.cross_entropy(wide(logits), gold)


def task_head_importance(lm: LoadedModel, texts: Sequence[str], gold: Sequence[str],
                         pairs: Sequence[str] | None = None, batch_size: int = 16,
                         progress: Callable[[int, int], None] | None = None) -> HeadImportance:
    """Every head's importance for the classifier's loss on labelled ``texts``."""
    gates = new_gates(lm)
    total = torch.zeros(lm.num_layers, lm.num_heads, device=lm.device)  # Σ |∂L/∂ξ| over batches
    tokens = done = 0
    loss_sum = 0.0
    for rows, feed, labels in labelled_batches(lm, texts, gold, pairs, batch_size):
        with turn(lm), torch.enable_grad():  # the forward and its backward; a batch at a time
            loss = task_gated_loss(lm, gates, feed, labels)
            (grad,) = torch.autograd.grad(loss, gates)
        total += grad.abs()
        tokens += int(feed["attention_mask"].sum())
        loss_sum += float(loss.detach()) * len(rows)
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return importance_from_sums(total.cpu().numpy(), tokens, len(texts), loss_sum, len(texts))


def task_accuracy(lm: LoadedModel, held: Labelled, removed: Sequence[tuple[int, int]] = ()) -> float:
    """Accuracy on held-out labelled batches with ``removed`` heads zeroed."""
    right = count = 0
    with head_edit(lm, removed):
        for _, feed, labels in held:
            right += int((lm.run(feed).logits.argmax(-1) == labels).sum())
            count += len(labels)
    return right / max(count, 1)


def task_pruning_curve(lm: LoadedModel, importance: HeadImportance, texts: Sequence[str], gold: Sequence[str],
                       pairs: Sequence[str] | None = None, batch_size: int = 32, seed: int = 0,
                       progress: Callable[[int, int], None] | None = None) -> PruningCurve:
    """Held-out accuracy as heads go, least important first and in random orders (seeded)."""
    held = labelled_batches(lm, texts, gold, pairs, batch_size)
    return curve_of(lm, importance, lambda removed: task_accuracy(lm, held, removed), len(texts), seed=seed,
                    progress=progress)


def split_records(texts: Sequence[str], gold: Sequence[str], pairs: Sequence[str | None] | None = None,
                  seed: int = 0) -> tuple[tuple, tuple]:
    """One labelled file in two seeded halves: (texts, gold, pairs) to estimate importance on, and
    the held-out half the pruning curve scores (Michel et al. estimate on training data and
    prune on held-out data; one file stands for both here)."""
    if len(texts) < 2:
        raise BertScopeError("Give at least two labelled records: one half estimates importance, the other is "
                             "held out.")
    order = np.random.default_rng(seed).permutation(len(texts))
    half = len(texts) // 2
    take = lambda rows: (  # noqa: E731
        [texts[i] for i in rows], [gold[i] for i in rows], None if pairs is None else [pairs[i] for i in rows])
    return take(sorted(order[half:].tolist())), take(sorted(order[:half].tolist()))


def classes_with_heads_removed(lm: LoadedModel, text: str, pair: str | None, heads: Sequence[tuple[int, int]],
                               mode: str = "zero", means=None):
    """(intact, heads removed): every label's score for one input (``tasks.classify``), before and
    after ``heads`` are removed (``ablation.head_edit``)."""
    from bertscope.interventions.ablation import check_heads
    from bertscope.tasks.classify import classify

    chosen = check_heads(lm, heads)
    pairs = None if pair is None else [pair]
    before = classify(lm, [text], pairs)[0]
    with head_edit(lm, chosen, mode, means):
        after = classify(lm, [text], pairs)[0]
    return before, after
