"""Causal models over a task's variables, and the counterfactual pairs they define (Geiger et al., "Finding
Alignments Between Interpretable Causal Variables and Distributed Neural Representations", CLeaR 2024).

A causal model here is three small functions over a setting of named variables: ``sample`` draws a setting,
``text`` renders it as the input the encoder reads, ``output`` says what the task's answer is. One variable,
``variable``, is the one an interchange intervention swaps: for a base setting ``b`` and a source ``s`` the
high-level model's counterfactual answer is ``output(b with variable := s[variable])`` — the output the
network should give when its representation of the variable on ``base`` is replaced by the one it computed
on ``source``. The foil is the other value the output can take.

The shipped models (each kept only where the network gets the base and the source right, as DAS is trained
on a model's correct behaviour):

- ``agreement`` (masked LM): "The {subject} near the {attractor} [MASK] {ending}." → was/were by the
  subject's number; subject and attractor drawn independently from Brown's nouns in either number, so the
  attractor disagrees with the subject half the time. A source is its base with another subject (the
  same number or not), so that the network's behaviour on the interchanged input is its behaviour on a
  sentence it was checked on; the others draw every variable of the source anew.
- ``negation`` (sentiment classifier): "The {thing} was {very|not} {adjective}." → positive/negative.
- ``tagging`` (part-of-speech tagger): "{They|The} {word} in the river." → VERB/NOUN at the word.

A user's own pairs come from a CSV (``base``, ``source``, ``answer``, ``foil``, and ``word`` for a tagger).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.circuits.pairs import CLASS, MASK, TAG
from bertscope.circuits.tasks import brown_nouns
from bertscope.corpora.records import csv_records, source_text
from bertscope.errors import BertScopeError

Setting = dict[str, Any]
MAX_PAIRS = 2_000


@dataclass(frozen=True)
class Counterfactual:
    """One interchange: the network should give ``answer`` (not ``foil``) on ``base`` when the variable's
    representation comes from ``source``. ``word``: a tagger's pairs name the word whose tag is read."""

    base: str
    source: str
    answer: str
    foil: str
    word: str = ""
    same: bool = False  # the variable has the same value in both (the answer is the base's own output)

    def to_json(self) -> dict:
        return {"base": self.base, "source": self.source, "answer": self.answer, "foil": self.foil,
                **({"word": self.word} if self.word else {})}


@dataclass(frozen=True)
class CausalModel:
    """A task's high-level model. ``slot``: the variable's word in the text (its first word piece is the
    position the interchange aligns by default); ``outputs``: the two values ``output`` can return."""

    name: str
    title: str
    reads: str  # "mask", "class" or "tag": the network it runs on
    model: str  # the shipped model it is checked on
    variable: str
    slot: int  # the word of the text (from 0, split at spaces) that renders the variable
    outputs: tuple[str, str]
    sample: Callable[[random.Random], Setting]
    text: Callable[[Setting], str]
    output: Callable[[Setting], str]
    word: Callable[[Setting], str] | None = None  # a tagger: the word whose tag is read
    varies: tuple[str, ...] = ()  # the variables a source draws anew (the rest are the base's); () for all

    def counterfactual(self, base: Setting, source: Setting) -> Counterfactual:
        """The pair (base, source) with the high-level model's answer under the interchange."""
        answer = self.output({**base, self.variable: source[self.variable]})
        if answer not in self.outputs:
            raise BertScopeError(f"The causal model {self.name} returned {answer!r}; it may return only "
                                 f"{' or '.join(self.outputs)} (the outputs the network is read at).")
        foil = self.outputs[1] if answer == self.outputs[0] else self.outputs[0]
        return Counterfactual(self.text(base), self.text(source), answer, foil,
                              self.word(base) if self.word else "", base[self.variable] == source[self.variable])


_ENDINGS = ("here", "ready", "late", "gone", "tired", "happy", "wrong", "there")
_THINGS = ("film", "movie", "food", "service", "game", "book", "show", "hotel", "meal", "trip", "song", "party")
_GOOD = ("good", "great", "nice", "fun", "funny", "helpful", "fine", "clean", "friendly", "exciting")
_NOUN_VERBS = ("fish", "work", "run", "walk", "play", "swim", "dance", "cook", "drink", "sleep", "talk", "shop",
               "study", "race", "fight", "paint", "ride", "jump", "sail", "hunt")


def _agreement_setting(rng: random.Random) -> Setting:
    return {"plural": rng.random() < 0.5, "subject": rng.choice(brown_nouns()),
            "attractor_plural": rng.random() < 0.5, "attractor": rng.choice(brown_nouns()),
            "ending": rng.choice(_ENDINGS)}


def _agreement_text(s: Setting) -> str:
    return f"The {s['subject'][s['plural']]} near the {s['attractor'][s['attractor_plural']]} [MASK] {s['ending']}."


def _negation_setting(rng: random.Random) -> Setting:
    return {"negated": rng.random() < 0.5, "thing": rng.choice(_THINGS), "adjective": rng.choice(_GOOD)}


def _tagging_setting(rng: random.Random) -> Setting:
    return {"verb": rng.random() < 0.5, "word": rng.choice(_NOUN_VERBS)}


MODELS: dict[str, CausalModel] = {m.name: m for m in (
    CausalModel("agreement", "Subject–verb agreement across an attractor (the subject's number)", MASK,
                "bundled-mlm", "plural", 1, ("were", "was"), _agreement_setting, _agreement_text,
                lambda s: "were" if s["plural"] else "was", varies=("plural", "subject")),
    CausalModel("negation", "Negation flips the sentiment (whether the sentence is negated)", CLASS,
                "bundled-sentiment", "negated", 3, ("positive", "negative"), _negation_setting,
                lambda s: f"The {s['thing']} was {'not' if s['negated'] else 'very'} {s['adjective']}.",
                lambda s: "negative" if s["negated"] else "positive"),
    CausalModel("tagging", "A word's tag after a pronoun or an article (whether it is a verb)", TAG,
                "bundled-upos", "verb", 0, ("VERB", "NOUN"), _tagging_setting,
                lambda s: f"{'They' if s['verb'] else 'The'} {s['word']} in the river.",
                lambda s: "VERB" if s["verb"] else "NOUN", word=lambda s: s["word"]),
)}


def draw_pairs(model: CausalModel, n: int, seed: int = 0) -> list[Counterfactual]:
    """``n`` counterfactual pairs (a source draws the model's ``varies`` anew), every other one with the variable's
    value the same in both (so that an intervention that always flips the output is wrong half the time)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base, fresh = model.sample(rng), model.sample(rng)
        source = {**base, **{k: fresh[k] for k in model.varies}} if model.varies else fresh
        same = i % 2 == 0
        if (base[model.variable] == source[model.variable]) != same:
            source = {**source, model.variable: not source[model.variable]}  # the shipped variables are two-valued
        out.append(model.counterfactual(base, source))
    return out


def read_counterfactuals(source: str | Path | bytes, name: str = "") -> list[Counterfactual]:
    """Pairs from a CSV (header: base, source, answer, foil[, word]), as a path or the file's bytes.

    Args:
        source: a path, or the file's bytes.
        name: the file's name, when bytes are given.

    Returns:
        A ``Counterfactual`` a row.
    """
    text, name = source_text(source, name, "No pairs file at {path}: give a CSV with base, source, answer and foil.")
    header, rows = csv_records(text, name)
    records = [row for _, row in rows]
    missing = {"base", "source", "answer", "foil"} - set(header)
    if missing:
        raise BertScopeError(f"{name} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(sorted(missing))}: "
                             "counterfactual pairs need base, source, answer and foil (and word for a tagger).")
    if not records:
        raise BertScopeError(f"{name} holds no pairs: give rows with base, source, answer and foil.")
    if len(records) > MAX_PAIRS:
        raise BertScopeError(f"{name} has {len(records):,} pairs; the limit is {MAX_PAIRS:,}.")
    return [Counterfactual(str(r.get("base") or ""), str(r.get("source") or ""), str(r.get("answer") or ""),
                           str(r.get("foil") or ""), str(r.get("word") or "")) for r in records]


def model_for(name: str) -> CausalModel:
    if name not in MODELS:
        raise BertScopeError(f"Unknown causal task {name!r}: use {', '.join(MODELS)}, or --data FILE.")
    return MODELS[name]


def names_for(reads: str) -> Sequence[str]:
    """The shipped causal models a network that decides at ``reads`` can run."""
    return [m.name for m in MODELS.values() if m.reads == reads]
