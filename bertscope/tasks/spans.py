"""Extractive question answering: a question and a context -> the best answer spans, with scores and
character offsets into the context (BERT, §4.2: a start vector S and an end vector E; the span
i..j scores S·T_i + E·T_j, with j >= i).

transformers 5 removed its ``question-answering`` pipeline; this ports the algorithm of its last
version (4.53, ``pipelines/question_answering.py``: ``preprocess``, ``select_starts_ends``,
``decode_spans``, ``postprocess`` with ``align_to_words``) for fast tokenizers, and
``tests/tasks/test_predict.py`` holds it to a brute-force enumeration of every allowed span:
- the context is cut into windows of at most ``max_seq_len`` tokens (default min(384, the
  model's limit)) overlapping by ``doc_stride`` (default min(max_seq_len // 2, 128)), the
  question whole in each (``truncation="only_second"``);
- in each window the start and end logits of tokens outside the context (question, special
  tokens; [CLS] kept) are set to -10000, each is softmaxed, [CLS]'s probabilities are then set to
  0, and the span score is p_start(i) · p_end(j) for i <= j < i + ``max_answer_len``;
- spans are widened to whole words, and answers with the same text (case aside) found in several
  windows add their scores; the ``top_k`` best are returned.
The windows of every question run together in batches bounded by bytes, through the one owner of
a pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES, plan_batches, row_feed, tokenize
from bertscope.core.models import LoadedModel
from bertscope.core.passes import pass_bytes, wide
from bertscope.core.task_head import SPANS, require_task
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import to_device

MAX_CONTEXT_CHARS = 1_000_000
MASKED = -10000.0


@dataclass(frozen=True)
class Answers:
    """One question's best spans in its context."""

    question: str
    context: str
    answers: list[dict]  # {"answer", "start", "end", "score"}, best first
    windows: int  # how many windows the context was cut into

    def to_json(self) -> dict:
        return {"question": self.question, "context": self.context, "answers": self.answers,
                "windows": self.windows}


def decode_spans(start: np.ndarray, end: np.ndarray, top_k: int, max_answer_len: int,
                 allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, scores) of the ``top_k`` best spans of one window: start [1, token] and end
    [1, token] probabilities, ``allowed`` [1, token] 1 where a span may begin or end."""
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))  # [1, start, end]
    candidates = np.tril(np.triu(outer), max_answer_len - 1)  # end >= start, at most max_answer_len tokens
    flat = candidates.flatten()
    if top_k == 1:
        order = [np.argmax(flat)]
    elif len(flat) < top_k:
        order = np.argsort(-flat)
    else:
        best = np.argpartition(-flat, top_k)[0:top_k]
        order = best[np.argsort(-flat[best])]
    starts, ends = np.unravel_index(order, candidates.shape)[1:]
    keep = np.isin(starts, allowed.nonzero()) & np.isin(ends, allowed.nonzero())
    starts, ends = starts[keep], ends[keep]
    return starts, ends, candidates[0, starts, ends]


def window_spans(start: np.ndarray, end: np.ndarray, p_mask: np.ndarray, top_k: int, max_answer_len: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One window's candidate spans from its logits ([token] each) and p_mask ([token], 1 where no
    answer may be), and the no-answer score (p_start([CLS]) · p_end([CLS]))."""
    allowed = (np.abs(np.asarray(p_mask)[None] - 1)).astype(np.int64)  # [1, token]
    start = np.where(allowed == 0, MASKED, start[None])
    end = np.where(allowed == 0, MASKED, end[None])
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    null = float(start[0, 0] * end[0, 0])
    start[0, 0] = end[0, 0] = 0.0
    starts, ends, scores = decode_spans(start, end, top_k, max_answer_len, allowed)
    return starts, ends, scores, null


def _char_span(enc, s: int, e: int, sequence_index: int) -> tuple[int, int]:
    """Token span s..e -> character span in the context, widened to whole words."""
    try:
        start = enc.word_to_chars(enc.token_to_word(s), sequence_index=sequence_index)[0]
        end = enc.word_to_chars(enc.token_to_word(e), sequence_index=sequence_index)[1]
    except Exception:  # a token of no word (the pipeline's own fallback)
        start, end = enc.offsets[s][0], enc.offsets[e][1]
    return start, end


@dataclass(frozen=True)
class Window:
    """One window of a question over its context: the tokenizer's encoding (ids, offsets, words) and
    p_mask ([token] 1 where no answer may be: the question and special tokens, [CLS] kept)."""

    question: int  # which question
    encoding: object  # a tokenizers Encoding
    p_mask: np.ndarray  # [token]
    context_index: int  # the context's sequence index in the pair (1: question first)


def question_windows(tok, questions: Sequence[str], contexts: Sequence[str], max_seq_len: int, doc_stride: int,
                     skip_long: bool = False) -> list[Window]:
    """Each question's windows over its context (the reference pipeline's ``preprocess``), the
    questions checked first (one line each). A question that leaves fewer than two of a window's
    tokens to its context is refused in one line, or with ``skip_long`` given no window (training
    data: counted by the caller); a stride longer than the room left is cut to fit it."""
    if len(questions) != len(contexts):
        raise BertScopeError(f"{len(questions)} questions but {len(contexts)} contexts.")
    if doc_stride > max_seq_len:
        raise BertScopeError(f"The stride ({doc_stride}) is longer than a window ({max_seq_len}).")
    question_first = getattr(tok, "padding_side", "right") == "right"
    specials = tok.num_special_tokens_to_add(pair=True)
    windows = []
    lengths = [len(ids) for ids in tok([q if isinstance(q, str) and q.strip() else "-" for q in questions],
                                       add_special_tokens=False)["input_ids"]] if questions else []
    for i, (q, c) in enumerate(zip(questions, contexts)):
        item = f"Item {i + 1}: the" if len(questions) > 1 else "The"
        for what, text in (("question", q), ("context", c)):
            if not isinstance(text, str) or not text.strip():
                raise BertScopeError(f"{item} {what} is empty.")
        if len(c) > MAX_CONTEXT_CHARS:
            raise BertScopeError(f"{item} context has {len(c):,} characters; at most {MAX_CONTEXT_CHARS:,}.")
        room = max_seq_len - specials - lengths[i]  # the context's tokens
        if room < 2:
            if skip_long:
                continue
            raise BertScopeError(f"{item} question is too long for windows of {max_seq_len} tokens (it leaves "
                                 f"{max(room, 0)} for the context).")
        try:  # a stride as long as the room makes the tokenizer panic (a Rust panic, not an Exception): cut it
            encoded = tok(text=q if question_first else c, text_pair=c if question_first else q,
                          truncation="only_second" if question_first else "only_first", max_length=max_seq_len,
                          stride=min(doc_stride, room - 1), return_token_type_ids=True,
                          return_overflowing_tokens=True, return_offsets_mapping=True,
                          return_special_tokens_mask=True, verbose=False)
        except Exception as err:
            raise BertScopeError(f"{item} question and context cannot be cut into windows of {max_seq_len} tokens "
                                 f"({type(err).__name__}: {str(err)[:80]}).") from None
        for w in range(len(encoded["input_ids"])):
            # the reference's p_mask: 1 outside the context (question first), [CLS] kept
            p_mask = [tid != 1 if question_first else 0 for tid in encoded.sequence_ids(w)]
            ids = encoded["input_ids"][w]
            if tok.cls_token_id is not None:
                for at in np.nonzero(np.array(ids) == tok.cls_token_id)[0]:
                    p_mask[at] = 0
            windows.append(Window(i, encoded[w], np.asarray(p_mask, np.int64), 1 if question_first else 0))
    return windows


def best_answers(windows: Sequence[Window], logits: Sequence[tuple[np.ndarray, np.ndarray]],
                 contexts: Sequence[str], top_k: int = 1, max_answer_len: int = 15,
                 handle_impossible_answer: bool = False) -> list[tuple[list[dict], int]]:
    """Per question: (its ``top_k`` best answers, best first, and how many windows it had), from
    each window's (start, end) logits ([token] each): the reference's ``postprocess``."""
    pre_top_k = top_k * 2 + 10  # more candidates before widening to words merges some
    found: list[list[dict]] = [[] for _ in contexts]
    nulls = [1_000_000.0] * len(contexts)
    counts = [0] * len(contexts)
    for window, (start, end) in zip(windows, logits):
        i, enc = window.question, window.encoding
        counts[i] += 1
        starts, ends, scores, null = window_spans(start, end, window.p_mask, pre_top_k, max_answer_len)
        nulls[i] = min(nulls[i], null)
        for s, e, score in zip(starts, ends, scores):
            a, b = _char_span(enc, int(s), int(e), window.context_index)
            text = contexts[i][a:b]
            same = next((x for x in found[i] if x["answer"].lower() == text.lower()), None)
            if same is not None:
                same["score"] += float(score)
            else:
                found[i].append({"answer": text, "start": int(a), "end": int(b), "score": float(score)})
    results = []
    for i, answers in enumerate(found):
        if handle_impossible_answer:
            answers.append({"answer": "", "start": 0, "end": 0, "score": nulls[i]})
        results.append((sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k], counts[i]))
    return results


def run_settings(lm: LoadedModel) -> dict:
    """The windows and decoding a model fine-tuned here was scored with (its config's
    ``task_specific_params["question-answering"]``: max_seq_len, doc_stride, max_answer_len,
    handle_impossible_answer), or {} for a model from elsewhere."""
    params = getattr(lm.model.config, "task_specific_params", None) or {}
    found = params.get(SPANS) or {}
    return {k: found[k] for k in ("max_seq_len", "doc_stride", "max_answer_len", "handle_impossible_answer")
            if k in found}


def answer(lm: LoadedModel, questions: Sequence[str], contexts: Sequence[str], top_k: int = 1,
           max_answer_len: int | None = None, max_seq_len: int | None = None, doc_stride: int | None = None,
           handle_impossible_answer: bool | None = None, batch_size: int = 32,
           max_batch_bytes: int = DEFAULT_BATCH_BYTES, progress: Callable[[int, int], None] | None = None
           ) -> list[Answers]:
    """The ``top_k`` best answer spans of each question in its context, in the order given. Settings
    left out are the model's own (``run_settings``: a model fine-tuned here answers as it was scored),
    else the reference pipeline's (15 tokens at most, windows of min(384, the model's length)
    overlapping by min(half, 128), no "no answer").

    Args:
        lm: an extractive question-answering model.
        questions: the questions.
        contexts: each question's context, as many.
        top_k: answers kept a question, from 1.
        max_answer_len: the longest answer, in tokens.
        max_seq_len: a window's length in tokens, question included.
        doc_stride: the tokens two windows of a long context overlap by.
        handle_impossible_answer: add "no answer" (an empty span at 0) as a candidate.
        batch_size: windows a pass, at most.
        max_batch_bytes: about how many bytes of outputs one pass may hold.
        progress: called with (done, total) windows.

    Returns:
        One ``Answers`` a question: the question, its context, the answers best first ({"answer", "start", "end":
            characters in the context, "score"}; the same text found again, in any case, adds its score) and how
            many windows the context was cut into.
    """
    require_task(lm, SPANS)
    own = run_settings(lm)
    max_answer_len = own.get("max_answer_len", 15) if max_answer_len is None else max_answer_len
    max_seq_len = own.get("max_seq_len") if max_seq_len is None else max_seq_len
    doc_stride = own.get("doc_stride") if doc_stride is None else doc_stride
    if handle_impossible_answer is None:
        handle_impossible_answer = own.get("handle_impossible_answer", False)
    tok = lm.tokenizer
    if len(questions) != len(contexts):
        raise BertScopeError(f"{len(questions)} questions but {len(contexts)} contexts.")
    if not questions:
        raise BertScopeError("No question to answer.")
    if top_k < 1 or max_answer_len < 1:
        raise BertScopeError("top-k and the longest answer are numbers from 1.")
    max_seq_len = min(tok.model_max_length or lm.max_length, 384, lm.max_length) if max_seq_len is None \
        else max_seq_len
    doc_stride = min(max_seq_len // 2, 128) if doc_stride is None else doc_stride
    windows = question_windows(tok, questions, contexts, max_seq_len, doc_stride)
    logits: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(windows)
    lengths = [len(w.encoding.ids) for w in windows]
    done = 0
    for rows in plan_batches(lengths, lambda n: pass_bytes(lm, n), batch_size, max_batch_bytes):
        width = max(lengths[r] for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id or 0, dtype=torch.long)  # [batch, token]
        types = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            enc = windows[r].encoding
            ids[b, :lengths[r]] = torch.tensor(enc.ids)
            types[b, :lengths[r]] = torch.tensor(enc.type_ids)
            mask[b, :lengths[r]] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feed = {k: to_device(v, lm.device) for k, v in feed.items() if k in tok.model_input_names}
        out = lm.run(feed)
        starts, ends = wide(out.start_logits).cpu().numpy(), wide(out.end_logits).cpu().numpy()  # [batch, token]
        for b, r in enumerate(rows):
            logits[r] = (starts[b, :lengths[r]], ends[b, :lengths[r]])
        done += len(rows)
        if progress:
            progress(done, len(windows))
    found = best_answers(windows, logits, contexts, top_k, max_answer_len, handle_impossible_answer)
    return [Answers(q, c, best, n) for q, c, (best, n) in zip(questions, contexts, found)]


@dataclass(frozen=True)
class QuestionPair:
    """Two questions of one context, tokenised once, as patching and circuits put one into the other."""

    feeds: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]  # each [1, token], on the model's device
    tokens: tuple[list[str], list[str]]  # the pieces of each, cut as the feeds are
    lengths: tuple[int, int]  # pieces of each with the context, before the cut at the model's maximum
    encoding: Any  # the first question's encoding (cut): where the context's spans are found

    @property
    def same_length(self) -> bool:
        """Whether every position of one can be put into the other. Compared before the cut: with a long
        context both rows come out equally long, and the context would start at another position in each."""
        return self.lengths[0] == self.lengths[1]


def question_pair(lm: LoadedModel, first: str, second: str, context: str) -> QuestionPair:
    """``first`` and ``second`` each beside ``context``, tokenised in one call."""
    tokenized = tokenize(lm, [first, second], [context, context])
    first_tokens, second_tokens = (lm.tokenizer.convert_ids_to_tokens(e.ids) for e in tokenized.encodings)
    return QuestionPair((row_feed(lm, tokenized, 0), row_feed(lm, tokenized, 1)), (first_tokens, second_tokens),
                        (tokenized.original[0], tokenized.original[1]), tokenized.encodings[0])


def span_in_context(encoding: Any, context: str, text: str, what: str, name: str) -> tuple[int, int]:
    """(first, last) piece of the first occurrence of ``text`` in ``context`` that starts and ends where pieces do
    ("man" in "the woman and the man" is the second), as ``encoding`` (a fast tokenizer's encoding of question and
    context) holds it; one line naming ``what`` of ``name`` when there is none."""
    found = False
    for match in re.finditer(re.escape(text), context):
        found = True
        first = encoding.char_to_token(match.start(), sequence_index=1)
        last = encoding.char_to_token(match.end() - 1, sequence_index=1)
        if first is not None and last is not None and encoding.offsets[first][0] == match.start() and \
                encoding.offsets[last][1] == match.end():
            return first, last
    if not found:
        raise BertScopeError(f"The {what} {text!r} of {name} is not in its context: answers are spans of the context.")
    read = max((end for (_, end), seq in zip(encoding.offsets, encoding.sequence_ids) if seq == 1), default=0)
    if context.find(text) + len(text) > read:  # the context's characters the pieces kept end before it
        raise BertScopeError(f"The {what} {text!r} of {name} lies beyond the {len(encoding.ids)} pieces the model "
                             "reads.")
    raise BertScopeError(f"The {what} {text!r} of {name} does not start and end where the context's pieces do (part "
                         "of a word?): give whole pieces.")


def two_spans(lm: LoadedModel, first: str, second: str, context: str, spans: tuple[str, str],
              name: str) -> tuple[QuestionPair, tuple[tuple[int, int], tuple[int, int]]]:
    """Two questions of one context (clean, corrupted), put one into the other position by position (patching,
    circuits): their
    tokenisation (one line when their lengths differ) and the (first, last) pieces of two different spans of the
    context (one line when a span is not there, or both are the same)."""
    both = question_pair(lm, first, second, context)
    if not both.same_length:
        raise BertScopeError(f"{name.capitalize()} has {both.lengths[0]} tokens clean and {both.lengths[1]} corrupted "
                             f"(“{first[:60]}” / “{second[:60]}”, each with its context): each position of one is put "
                             "into the other, so both questions need the same number.")
    found = (span_in_context(both.encoding, context, spans[0].strip(), "answer", name),
             span_in_context(both.encoding, context, spans[1].strip(), "foil", name))
    if found[0] == found[1]:
        raise BertScopeError(f"The answer and the foil of {name} are the same span ({spans[0].strip()!r}): give two "
                             "different spans.")
    return both, found


def span_margin(start: torch.Tensor, end: torch.Tensor, answer: tuple[Any, Any], foil: tuple[Any, Any]
                ) -> torch.Tensor:
    """[rows] the answer span's score less the foil's, a span's score being its first piece's start logit plus its
    last piece's end logit (BERT's SQuAD head, Devlin et al. 2019, §4.2). ``start``/``end`` [rows, token]; each span
    (first, last) as ints or [rows] index tensors."""
    rows = torch.arange(start.shape[0], device=start.device)
    return start[rows, answer[0]] + end[rows, answer[1]] - start[rows, foil[0]] - end[rows, foil[1]]
