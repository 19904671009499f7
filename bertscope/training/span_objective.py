"""The second stage's span objective (BERT, §4.2, SQuAD): a start and an end vector over the
context's tokens, trained with the mean of the start and end cross-entropies, and scored by SQuAD's
exact match and F1 on the held-out questions.

Windows are the inference tool's (``tasks.spans.question_windows``: the question whole in each, the
context cut into windows of ``seq_len`` tokens overlapping by ``doc_stride``), so training, the
per-epoch scores and the Predictions page read a question the same way. A window's labels are its
first gold answer's first and last tokens, or [CLS] where the answer is not inside the window or
the question has none (Devlin et al.'s SQuAD 2.0 recipe; Hugging Face's ``run_qa.py``, with its
search for the tokens kept inside the context). Scoring decodes each question's best span over all
its windows (``tasks.spans.best_answers``: p_start · p_end, at most ``MAX_ANSWER_TOKENS`` tokens,
widened to whole words; "no answer" competes only when the data has unanswerable questions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.corpora.questions import Questions
from bertscope.errors import BertScopeError
from bertscope.tasks.spans import Window, best_answers, question_windows
from bertscope.training.processes import Processes
from bertscope.training.span_scores import question_scores
from bertscope.training.task_objective import Encoded, TaskObjective, pad

MAX_ANSWER_TOKENS = 30  # the longest answer decoded when scoring (BERT's and run_qa.py's SQuAD setting)


def doc_stride(seq_len: int) -> int:
    """The windows' overlap: run_qa.py's 128 for 384-token windows, scaled to shorter ones."""
    return min(128, seq_len // 3)


def scoring_settings(seq_len: int, no_answer: bool) -> dict:
    """How a run's questions were windowed and decoded, kept in the exported model's config
    (``task_specific_params["question-answering"]``) so the Predictions page answers the same way."""
    return {"max_seq_len": seq_len, "doc_stride": doc_stride(seq_len), "max_answer_len": MAX_ANSWER_TOKENS,
            "handle_impossible_answer": no_answer}


def window_label(window: Window, answer: tuple[str, int] | None, cls: int) -> tuple[int, int]:
    """(first token, last token) of ``answer`` (text, first character) inside ``window``, or (cls,
    cls) when the window does not hold all of it or there is none."""
    if answer is None:
        return cls, cls
    text, start_char = answer
    end_char = start_char + len(text)
    offsets = window.encoding.offsets
    inside = [t for t, s in enumerate(window.encoding.sequence_ids) if s == window.context_index]
    if not inside:
        return cls, cls
    first, last = inside[0], inside[-1]
    if not (offsets[first][0] <= start_char and offsets[last][1] >= end_char):
        return cls, cls
    start = first
    while start <= last and offsets[start][0] <= start_char:
        start += 1
    end = last
    while end >= first and offsets[end][1] >= end_char:
        end -= 1
    return start - 1, end + 1


@dataclass(frozen=True)
class SpanEncoded(Encoded):
    """One side's windows (rows), each labelled (start, end) token, with what scoring needs."""

    windows: list[Window] = field(default_factory=list)
    questions: Questions | None = None
    several: int = 0  # questions whose context took more than one window
    too_long: int = 0  # questions that left a window no room for their context: no window (scored as unanswered)

    def question_rows(self, questions: range) -> list[int]:
        """The windows of some questions."""
        return [r for r, w in enumerate(self.windows) if w.question in questions]


def encode_spans(tokenizer: Any, side: Questions, seq_len: int) -> SpanEncoded:
    """``side``'s windows, tokenised and labelled (module docstring)."""
    windows = question_windows(tokenizer, side.questions, side.contexts, seq_len, doc_stride(seq_len), skip_long=True)
    with_types = "token_type_ids" in tokenizer.model_input_names
    labels = []
    for w in windows:
        ids = w.encoding.ids
        cls = ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
        gold = side.answers[w.question]
        labels.append(window_label(w, gold[0] if gold else None, cls))
    counts = np.bincount([w.question for w in windows], minlength=len(side))
    if not windows:
        raise BertScopeError(f"{side.name}: every question is too long for windows of {seq_len} tokens.")
    return SpanEncoded([w.encoding.ids for w in windows], [w.encoding.type_ids for w in windows] if with_types else None,
                       labels, 0, 0, windows, side, int((counts > 1).sum()), int((counts == 0).sum()))


@dataclass
class SpanObjective(TaskObjective):
    """Training and held-out scoring of a question-answering head."""

    no_answer: bool = False  # the data has unanswerable questions: "no answer" ([CLS]) competes when scoring

    def _count(self, labels: torch.Tensor) -> float:
        return float(len(labels))  # windows: each one start and one end

    def output_loss(self, output, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Summed over rows, (CE(start) + CE(end)) / 2 per window ([batch, 2] labels), padding
        left out of the softmax (so a window's loss is the same in any batch)."""
        pad = mask == 0  # [batch, token]
        start = output.start_logits.float().masked_fill(pad, -1e4)  # [batch, token]
        end = output.end_logits.float().masked_fill(pad, -1e4)
        return (F.cross_entropy(start, labels[:, 0], reduction="sum")
                + F.cross_entropy(end, labels[:, 1], reduction="sum")) / 2

    @torch.no_grad()
    def answers(self, model, encoded: SpanEncoded, rows: int, questions: range | None = None) -> tuple:
        """(loss sum over the windows, their number, per question (predicted text, exact match, F1,
        score)) for ``questions`` (default all) of ``encoded``."""
        side = encoded.questions
        questions = range(len(side)) if questions is None else questions
        chosen = sorted(encoded.question_rows(questions), key=lambda r: len(encoded.ids[r]))  # little padding
        was = model.training
        model.eval()
        logits: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        loss_sum = 0.0
        for start in range(0, len(chosen), rows):
            part = chosen[start:start + rows]
            feed, labels = pad(encoded, part, self.pad_id, False).part(slice(None), self.device)
            output = model(**feed)
            loss_sum += float(self.output_loss(output, labels, feed["attention_mask"]))
            starts, ends = output.start_logits.float().cpu().numpy(), output.end_logits.float().cpu().numpy()
            for b, r in enumerate(part):
                n = len(encoded.ids[r])
                logits[r] = (starts[b, :n], ends[b, :n])
        model.train(was)
        order = sorted(logits)
        found = best_answers([encoded.windows[r] for r in order], [logits[r] for r in order], side.contexts,
                             max_answer_len=MAX_ANSWER_TOKENS, handle_impossible_answer=self.no_answer)
        per_question = {}
        for q in questions:
            best = found[q][0]
            predicted = best[0]["answer"] if best else ""
            em, f1 = question_scores([text for text, _ in side.answers[q]], predicted)
            per_question[q] = (predicted, em, f1, best[0]["score"] if best else 0.0)
        return loss_sum, len(chosen), per_question

    def evaluate(self, model, rows: int, group: Processes) -> dict:
        held: SpanEncoded = self.held
        mine = group.share(len(held.questions))
        loss_sum, windows, per_question = self.answers(model, held, rows, range(mine.start, mine.stop))
        self.last_rows = per_question if group.world == 1 else None  # the worst questions reuse them
        sums = [loss_sum, windows, len(per_question), sum(v[1] for v in per_question.values()),
                sum(v[2] for v in per_question.values()), sum(v[0] == "" for v in per_question.values())]
        if group.world > 1:
            sums = group.sum(torch.tensor(sums, dtype=torch.float64)).tolist()
        loss_sum, windows, n, em, f1, empty = sums
        if n == 0:
            raise BertScopeError("The held-out side has no question to score.")
        return {"loss": loss_sum / windows, "exact_match": em / n, "f1": f1 / n, "questions": int(n),
                "windows": int(windows), "no_answer": int(empty)}

    def worst(self, model, rows: int, n: int) -> list[dict]:
        """The held-out questions answered worst (lowest F1, then the least sure)."""
        held: SpanEncoded = self.held
        per_question = self.last_rows if self.last_rows is not None else self.answers(model, held, rows)[2]
        ranked = sorted(per_question.items(), key=lambda item: (item[1][2], item[1][3]))[:n]
        side = held.questions
        return [{"question": side.questions[q], "context": side.contexts[q], "id": side.ids[q],
                 "gold": [text for text, _ in side.answers[q]], "predicted": predicted, "exact_match": em,
                 "f1": f1, "score": score} for q, (predicted, em, f1, score) in ranked]
