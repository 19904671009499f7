"""A fine-tuned model's decisions as targets of attribution, ablation and patching: the score f(x)
whose gradient is taken, on the model's own task head.

- ``class[:LABEL]`` (sequence classification): log p(LABEL) under the head's softmax; for a
  multi-label head log σ(logit), each label on its own; for regression the predicted value itself.
  Without a label: the predicted class.
- ``tag:POSITION[:LABEL]`` (token classification): log p(LABEL) at that token (default its
  predicted label).
- ``start[:POSITION]`` / ``end[:POSITION]`` (question answering): log p(start = POSITION) under the
  softmax over every token (default: the best answer's, decoded as ``tasks.spans`` decodes it);
  ``span``: log p(start) + log p(end) of the best answer. The question is segment A, the context B.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from bertscope.attribution.targets import TASK_TARGETS, Target  # noqa: F401  (TASK_TARGETS: read from here too)
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.passes import inspection_feed
from bertscope.core.task_head import SEQUENCE, SPANS, TOKEN
from bertscope.errors import BertScopeError
from bertscope.tasks.spans import window_spans

NEEDS = {"class": SEQUENCE, "tag": TOKEN, "start": SPANS, "end": SPANS, "span": SPANS}


def _label_index(lm: LoadedModel, label: str) -> int:
    if label not in lm.task.labels:
        raise BertScopeError(f"{lm.name} has no label {label!r}: its labels are {', '.join(lm.task.labels[:20])}.")
    return lm.task.labels.index(label)


def _position(ins: Inspection, position: int) -> int:
    if not 0 <= position < ins.n_tokens:
        raise BertScopeError(f"Position {position} does not exist: the input has {ins.n_tokens} tokens "
                             f"(0-{ins.n_tokens - 1}).")
    return position


def best_span(lm: LoadedModel, ins: Inspection) -> tuple[int, int]:
    """(start, end) tokens of the best answer in the context (segment B), as ``tasks.spans`` decodes."""
    if ins.text_pair is None:
        raise BertScopeError("A question-answering target needs the question and its context: give the context "
                             "as the second segment (--pair).")
    out = lm.run(inspection_feed(lm, ins))
    p_mask = [0 if (s == 1 or i == 0) else 1 for i, s in enumerate(ins.sequence_ids)]  # [CLS] and the context
    starts, ends, _, _ = window_spans(out.start_logits[0].float().cpu().numpy(),
                                      out.end_logits[0].float().cpu().numpy(), p_mask, 1, 15)
    if not len(starts):
        raise BertScopeError("No answer span in this context.")
    return int(starts[0]), int(ends[0])


def task_score_function(lm: LoadedModel, ins: Inspection, target: Target, run: Callable
                        ) -> tuple[Callable, Target]:
    """(f: [batch, token, emb] input embeddings -> [batch] score, the resolved target); ``run(e)``
    is the caller's pass on input embeddings (``attribution.gradients.score_function``)."""
    need = NEEDS[target.kind]
    if lm.task is None or lm.task.kind != need:
        has = "no task head" if lm.task is None else f"a {lm.task.kind.replace('-', ' ')} head"
        raise BertScopeError(f"--target {target.kind} needs a {need.replace('-', ' ')} model; {lm.name} has {has}.")
    if target.kind == "class":
        scoring = lm.task.scoring
        if target.label is None:
            logits = lm.run(inspection_feed(lm, ins)).logits[0]  # [label]
            label = lm.task.labels[int(logits.argmax())]
        else:
            label = target.label
        c = _label_index(lm, label)
        resolved = Target("class", label=label)
        if scoring == "none":
            return (lambda e: run(e).logits[:, c].float()), resolved
        if scoring == "sigmoid":
            return (lambda e: F.logsigmoid(run(e).logits[:, c].float())), resolved
        return (lambda e: torch.log_softmax(run(e).logits.float(), -1)[:, c]), resolved
    if target.kind == "tag":
        pos = _position(ins, target.position)
        if target.label is None:
            logits = lm.run(inspection_feed(lm, ins)).logits[0, pos]  # [label]
            label = lm.task.labels[int(logits.argmax())]
        else:
            label = target.label
        c = _label_index(lm, label)
        return (lambda e: torch.log_softmax(run(e).logits[:, pos].float(), -1)[:, c]), Target("tag", pos, label=label)
    if target.kind == "span" or target.position is None:
        start, end = best_span(lm, ins)
    else:
        start = end = _position(ins, target.position)
    if target.kind == "start":
        return (lambda e: torch.log_softmax(run(e).start_logits.float(), -1)[:, start]), Target("start", start)
    if target.kind == "end":
        return (lambda e: torch.log_softmax(run(e).end_logits.float(), -1)[:, end]), Target("end", end)

    def span(e):
        out = run(e)
        return torch.log_softmax(out.start_logits.float(), -1)[:, start] + \
            torch.log_softmax(out.end_logits.float(), -1)[:, end]

    return span, Target("span", start, end=end)
