"""Pairs of inputs a circuit is found on: a clean text, a corrupted one of the same token count, and the
decision between an answer and a foil that the corruption flips (Hanna et al. 2024; MIB's tasks).

Where the decision is read depends on the model: a masked LM at the first [MASK] (the answer's and the
foil's vocabulary logits), a sequence classifier at its head (two of its labels), a tagger at one word's
first piece (two of its tags: the pair names the word). The metric is logit(answer) − logit(foil), as in
EAP-IG's ``logit_diff``. Pairs whose token counts differ are refused, one line naming the pair.

A question-answering model reads a question beside a context: the pair's clean and corrupted texts are
two questions of one ``context``, and the answer and the foil are two spans of that context (the clean
question's answer and the corrupted one's). The metric is the span score BERT's SQuAD head ranks spans by
(Devlin et al. 2019, §4.2), start logit plus end logit, of the answer less the foil's:

    (start[answer's first piece] + end[answer's last piece]) − (start[foil's first] + end[foil's last])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertscope.attribution.gradients import token_id
from bertscope.core.hooked_pass import check_text, feed_of
from bertscope.core.models import LoadedModel
from bertscope.core.passes import wide
from bertscope.core.task_head import SEQUENCE, SPANS, TOKEN
from bertscope.corpora.labelled import read_jsonl
from bertscope.corpora.records import csv_records, source_text
from bertscope.errors import BertScopeError
from bertscope.mlm.fill_mask import require_mlm
from bertscope.mlm.logit_lens import mlm_head
from bertscope.tasks.spans import span_margin, two_spans

MAX_PAIRS = 2_000  # a dataset larger than this is refused: every pair costs several passes
MASK, CLASS, TAG, SPAN = "mask", "class", "tag", "span"


@dataclass(frozen=True)
class Pair:
    """One example: the model should prefer ``answer`` on ``clean`` and ``foil`` on ``corrupted``."""

    clean: str
    corrupted: str
    answer: str
    foil: str
    word: str = ""  # a tagger's decision: the word of ``clean`` whose tag is read
    context: str = ""  # question answering: the passage both questions are asked of; answer and foil are its spans

    def to_json(self) -> dict:
        return {"clean": self.clean, "corrupted": self.corrupted, "answer": self.answer, "foil": self.foil,
                **({"word": self.word} if self.word else {}), **({"context": self.context} if self.context else {})}


@dataclass(frozen=True)
class PreparedPair:
    """A pair tokenised for ``lm``: both feeds [1, token] on the device, where the decision is read."""

    pair: Pair
    clean_feed: dict
    corrupted_feed: dict
    tokens: list[str]
    corrupted_tokens: list[str]
    position: int  # the token position the decision is read at (a span: the answer's first piece)
    ids: tuple[int, int]  # the answer's and the foil's vocabulary ids or label indices (spans: first pieces)
    ends: tuple[int, int] = (0, 0)  # spans: the answer's and the foil's last pieces

    @property
    def length(self) -> int:
        return len(self.tokens)


def reads(lm: LoadedModel) -> str:
    """Where ``lm`` decides: "mask", "class" or "tag"; one line for a model that decides nothing a pair
    can flip (a regression head, question answering, a model without a masked-LM head)."""
    if lm.task is None:
        require_mlm(lm)
        return MASK
    if lm.task.kind == SEQUENCE:
        if lm.task.scoring == "none":
            raise BertScopeError(f"{lm.name} is a regression head (one value): a circuit needs two labels to "
                                 "compare.")
        return CLASS
    if lm.task.kind == TOKEN:
        return TAG
    if lm.task.kind == SPANS:
        return SPAN
    raise BertScopeError(f"Circuits read a masked-token prediction, a classifier's labels or a tagger's tags; "
                         f"{lm.name} is a {lm.task.kind.replace('-', ' ')} model.")


def _label(lm: LoadedModel, name: str) -> int:
    assert lm.task is not None  # ``reads`` said class or tag
    labels = list(lm.task.labels)
    if name not in labels:
        raise BertScopeError(f"{lm.name} has no label {name!r}: its labels are {', '.join(labels[:30])}.")
    return labels.index(name)


def prepare(lm: LoadedModel, pair: Pair, where: str, index: int = 0,
            roles: tuple[str, str] = ("clean", "corrupted")) -> PreparedPair:
    """``pair`` tokenised and checked for ``lm`` (``where``: ``reads(lm)``); one line naming the pair
    (``index`` from 1 as a reader counts) and its texts by ``roles`` (an interchange's are base and source)
    when it cannot be used."""
    name = f"pair {index + 1}"
    first, second = roles
    clean = check_text(pair.clean, f"{first} text of {name}")
    corrupted = check_text(pair.corrupted, f"{second} text of {name}")
    if not pair.answer.strip() or not pair.foil.strip():
        raise BertScopeError(f"{name.capitalize()} needs an answer and a foil.")
    if where == SPAN:
        return _prepare_span(lm, pair, clean, corrupted, name)
    clean_feed, corrupted_feed = feed_of(lm, clean), feed_of(lm, corrupted)
    n_clean, n_corrupted = clean_feed["input_ids"].shape[1], corrupted_feed["input_ids"].shape[1]
    if n_clean != n_corrupted:
        raise BertScopeError(f"{name.capitalize()} has {n_clean} tokens {first} and {n_corrupted} {second} "
                             f"(“{clean[:60]}” / “{corrupted[:60]}”): every position of one is put into the other, "
                             "so both need the same number.")
    tokens = lm.tokenizer.convert_ids_to_tokens(clean_feed["input_ids"][0].tolist())
    corrupted_tokens = lm.tokenizer.convert_ids_to_tokens(corrupted_feed["input_ids"][0].tolist())
    if where == MASK:
        mask = lm.tokenizer.mask_token_id
        ids = clean_feed["input_ids"][0].tolist()
        if mask not in ids:
            raise BertScopeError(f"The {first} text of {name} has no {lm.tokenizer.mask_token}: put one where the "
                                 "answer and the foil compete.")
        position = ids.index(mask)
        if corrupted_feed["input_ids"][0, position].item() != mask:
            raise BertScopeError(f"The {second} text of {name} has no {lm.tokenizer.mask_token} at position "
                                 f"{position}, where the {first} text's is: the decision is read at the same place "
                                 "in both.")
        answer_ids = (token_id(lm, pair.answer.strip()), token_id(lm, pair.foil.strip()))
    else:
        answer_ids = (_label(lm, pair.answer.strip()), _label(lm, pair.foil.strip()))
        position = 0  # a classifier's head reads [CLS] (its pooler)
        if where == TAG:
            position = word_position(lm, clean, pair.word, name, first)
    if answer_ids[0] == answer_ids[1]:
        raise BertScopeError(f"The answer and the foil of {name} are the same item ({pair.answer!r}).")
    return PreparedPair(pair, clean_feed, corrupted_feed, tokens, corrupted_tokens, position, answer_ids)


def _prepare_span(lm: LoadedModel, pair: Pair, clean: str, corrupted: str, name: str) -> PreparedPair:
    """Both questions beside the one context; the answer's and the foil's first and last pieces in it."""
    context = pair.context.strip()
    if not context:
        raise BertScopeError(f"A question-answering model reads a question beside a context: {name} has no context.")
    check_text(context, f"context of {name}")
    both, ((a_start, a_end), (f_start, f_end)) = two_spans(lm, clean, corrupted, context, (pair.answer, pair.foil),
                                                           name)
    return PreparedPair(pair, *both.feeds, *both.tokens, a_start, (a_start, f_start), (a_end, f_end))


def word_position(lm: LoadedModel, text: str, word: str, name: str, role: str = "clean") -> int:
    """The first piece of the first whole word ``word`` of ``text`` (the ``role`` text of pair ``name``)."""
    if not word.strip():
        raise BertScopeError(f"A tagger's pair names the word whose tag it reads: {name} has no word.")
    enc = lm.tokenizer(text, truncation=True, max_length=lm.max_length, return_offsets_mapping=True)
    words = enc.word_ids()
    for i, w in enumerate(words):
        if w is None or (i > 0 and words[i - 1] == w):
            continue
        start, end = enc.word_to_chars(w)
        if text[start:end] == word.strip():
            return i
    raise BertScopeError(f"The word {word!r} of {name} is not a word of its {role} text.")


def _read(output: Any, where: str) -> torch.Tensor:
    """[rows, token or label, ...] the output a decision at ``where`` reads first."""
    return output.start_logits if where == SPAN else output.last_hidden_state if where == MASK else output.logits


def decision(lm: LoadedModel, output: Any, prepared: PreparedPair, where: str) -> torch.Tensor:
    """[rows] logit(answer) − logit(foil) from a pass's output (an encoder-only pass for a masked LM), every row
    a run of the one pair ``prepared``."""
    return decisions(lm, output, [prepared] * _read(output, where).shape[0], where)


def decisions(lm: LoadedModel, output: Any, rows: Sequence[PreparedPair], where: str) -> torch.Tensor:
    """[rows] logit(answer) − logit(foil) of a pass over pairs' feeds of one length (row i is ``rows[i]``'s, read at
    its own position with its own answer and foil), on the output's device (differentiable)."""
    first = _read(output, where)
    device = first.device

    def column(values: Sequence[int]) -> torch.Tensor:
        return torch.tensor(values, device=device)  # [rows]
    at, answer, foil = column(range(len(rows))), column([p.ids[0] for p in rows]), column([p.ids[1] for p in rows])
    if where == SPAN:
        ends = column([p.ends[0] for p in rows]), column([p.ends[1] for p in rows])
        start, end = wide(output.start_logits), wide(output.end_logits)  # [rows, token]
        return span_margin(start, end, (answer, ends[0]), (foil, ends[1]))
    if where == CLASS:
        logits = wide(output.logits)  # [rows, label]
    else:
        picked = first[at, column([p.position for p in rows])]  # [rows, d_model or tag]
        logits = wide(mlm_head(lm)(picked) if where == MASK else picked)  # [rows, vocab or tag]
    return logits[at, answer] - logits[at, foil]


def read_pairs(source: str | Path | bytes, name: str = "") -> list[Pair]:
    """Pairs from a CSV (header: clean, corrupted, answer, foil[, word][, context]) or JSON Lines file (one
    object per line with those keys), given as a path or the file's bytes (``name`` says which format).

    Args:
        source: a path, or the file's bytes.
        name: the file's name (its extension says the format), when bytes are given.

    Returns:
        A ``Pair`` a row.
    """
    text, name = source_text(source, name, "No pairs file at {path}.")
    rows = read_jsonl(text, name) if name.lower().endswith((".jsonl", ".json")) else \
        [row for _, row in csv_records(text, name)[1]]
    if not rows:
        raise BertScopeError(f"{name} holds no pairs: give rows with clean, corrupted, answer and foil.")
    missing = {"clean", "corrupted", "answer", "foil"} - set(rows[0])
    if missing:
        raise BertScopeError(f"{name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(sorted(missing))}: "
                             "pairs need clean, corrupted, answer and foil (and word for a tagger, context for "
                             "question answering).")
    if len(rows) > MAX_PAIRS:
        raise BertScopeError(f"{name} has {len(rows):,} pairs; the limit is {MAX_PAIRS:,}.")
    return [Pair(str(r.get("clean") or ""), str(r.get("corrupted") or ""), str(r.get("answer") or ""),
                 str(r.get("foil") or ""), str(r.get("word") or ""), str(r.get("context") or "")) for r in rows]


def prepare_all(lm: LoadedModel, pairs: Sequence[Pair]) -> tuple[str, list[PreparedPair]]:
    """(where ``lm`` decides, every pair prepared); one line for the first pair that cannot be used."""
    if not pairs:
        raise BertScopeError("The dataset is empty: a circuit needs at least one pair.")
    if len(pairs) > MAX_PAIRS:
        raise BertScopeError(f"{len(pairs):,} pairs; the limit is {MAX_PAIRS:,}.")
    where = reads(lm)
    return where, [prepare(lm, p, where, i) for i, p in enumerate(pairs)]
