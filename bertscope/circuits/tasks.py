"""Circuit tasks that run offline: datasets of clean/corrupted pairs built from templates, each kept only
where the model at hand behaves as the task says (the clean run prefers the answer, the corrupted run the
foil), as the Interventions page's patching examples are chosen (``interventions.examples``).

- ``agreement`` (masked LM): subject–verb agreement across an attractor, "The {plural noun} near the
  {singular noun} [MASK] …" → were/was, the corrupted subject singular. The nouns are Brown's: every noun
  tagged NN whose plural (+s) is tagged NNS, both common (``corpora.brown``).
- ``gender`` (masked LM): "The {woman} said that [MASK] was …" → she/he, the corrupted noun male (and the
  other way round).
- ``capitals`` (masked LM): "{Paris} is the capital of [MASK]." → its country against the corrupted
  city's country.
- ``negation`` (a sentiment classifier): "The {film} was very {good}." → positive/negative against
  "… was not {good}.".
- ``tagging`` (a part-of-speech tagger): "They {fish} in the river." → VERB/NOUN at the word, against
  "The {fish} in the river.".
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

import torch

from bertscope.circuits.pairs import CLASS, MASK, TAG, Pair, PreparedPair, decisions, prepare, reads
from bertscope.core.hooked_pass import turn
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError

DEFAULT_SIZE = 40
MAX_SIZE = 1_000


@cache
def brown_nouns(most: int = 80) -> tuple[tuple[str, str], ...]:
    """(singular, plural): the ``most`` commonest Brown nouns tagged NN whose +s form is tagged NNS, by the
    rarer form's count."""
    from bertscope.corpora.brown import read_brown

    counts: Counter[tuple[str, str]] = Counter()
    for sentence in read_brown().sentences:
        for token, tag in zip(sentence.tokens, sentence.fine):
            if tag in ("nn", "nns") and token.isalpha() and token.islower():
                counts[(token, tag)] += 1
    both = {w: min(n, counts[(w + "s", "nns")]) for (w, tag), n in counts.items() if tag == "nn"}
    common = sorted((w for w, n in both.items() if n > 0), key=lambda w: (-both[w], w))[:most]
    return tuple((w, w + "s") for w in sorted(common))


_ENDINGS = ("here", "ready", "late", "gone", "tired", "happy", "wrong", "there")
_FEMALE_MALE = (("woman", "man"), ("girl", "boy"), ("mother", "father"), ("sister", "brother"), ("queen", "king"),
                ("wife", "husband"), ("daughter", "son"), ("aunt", "uncle"), ("lady", "gentleman"),
                ("actress", "actor"), ("princess", "prince"), ("grandmother", "grandfather"), ("niece", "nephew"),
                ("bride", "groom"), ("nun", "priest"), ("waitress", "waiter"))
_GENDER_FRAMES = ("The {} said that [MASK] was {}.", "The {} knew that [MASK] was {}.",
                  "The {} told us that [MASK] was {}.", "The {} felt that [MASK] was {}.")
_CAPITALS = (("paris", "france"), ("rome", "italy"), ("berlin", "germany"), ("madrid", "spain"), ("tokyo", "japan"),
             ("london", "england"), ("moscow", "russia"), ("athens", "greece"), ("cairo", "egypt"),
             ("lisbon", "portugal"), ("vienna", "austria"), ("dublin", "ireland"), ("ottawa", "canada"),
             ("warsaw", "poland"), ("beijing", "china"), ("stockholm", "sweden"), ("oslo", "norway"),
             ("budapest", "hungary"), ("helsinki", "finland"), ("copenhagen", "denmark"), ("brussels", "belgium"),
             ("havana", "cuba"), ("tehran", "iran"), ("baghdad", "iraq"), ("seoul", "korea"), ("manila", "philippines"))
_CAPITAL_FRAMES = ("{} is the capital of [MASK].", "The city of {} is the capital of [MASK].")
_THINGS = ("film", "movie", "food", "service", "game", "book", "show", "hotel", "meal", "trip", "song", "party")
_GOOD = ("good", "great", "nice", "fun", "funny", "helpful", "fine", "clean", "friendly", "exciting")
_NOUN_VERBS = ("fish", "work", "run", "walk", "play", "swim", "dance", "cook", "drink", "sleep", "talk", "shop",
               "study", "race", "fight", "paint", "ride", "jump", "sail", "hunt")
_TAG_FRAMES = (("They {} in the river.", "The {} in the river."), ("We {} every day.", "The {} every day."),
               ("They {} at night.", "The {} at night."))


def _agreement(rng: random.Random) -> list[Pair]:
    nouns = list(brown_nouns())
    out = []
    for (sing, plural), (attractor, _) in itertools.product(nouns, nouns):
        if sing == attractor:
            continue
        ending = rng.choice(_ENDINGS)
        out.append(Pair(f"The {plural} near the {attractor} [MASK] {ending}.",
                        f"The {sing} near the {attractor} [MASK] {ending}.", "were", "was"))
    return out


def _gender(rng: random.Random) -> list[Pair]:
    out = []
    for (female, male), frame, ending in itertools.product(_FEMALE_MALE, _GENDER_FRAMES, _ENDINGS[3:]):
        out.append(Pair(frame.format(female, ending), frame.format(male, ending), "she", "he"))
        out.append(Pair(frame.format(male, ending), frame.format(female, ending), "he", "she"))
    return out


def _capitals(rng: random.Random) -> list[Pair]:
    return [Pair(frame.format(a.capitalize()), frame.format(b.capitalize()), country_a, country_b)
            for (a, country_a), (b, country_b) in itertools.permutations(_CAPITALS, 2) for frame in _CAPITAL_FRAMES]


def _negation(rng: random.Random) -> list[Pair]:
    return [Pair(f"The {thing} was very {adj}.", f"The {thing} was not {adj}.", "positive", "negative")
            for thing, adj in itertools.product(_THINGS, _GOOD)]


def _tagging(rng: random.Random) -> list[Pair]:
    return [Pair(clean.format(word), corrupted.format(word), "VERB", "NOUN", word)
            for word, (clean, corrupted) in itertools.product(_NOUN_VERBS, _TAG_FRAMES)]


@dataclass(frozen=True)
class CircuitTask:
    name: str
    title: str
    reads: str  # "mask", "class" or "tag": what kind of model it needs
    model: str  # the shipped model it is checked on
    build: Callable[[random.Random], list[Pair]]
    labels: tuple[str, ...] = ()  # a classifier's or tagger's labels the task needs


TASKS: dict[str, CircuitTask] = {t.name: t for t in (
    CircuitTask("agreement", "Subject–verb agreement across an attractor", MASK, "bundled-mlm", _agreement),
    CircuitTask("gender", "Pronoun and gender", MASK, "bundled-mlm", _gender),
    CircuitTask("capitals", "Capital cities", MASK, "bundled-mlm", _capitals),
    CircuitTask("negation", "Negation flips the sentiment", CLASS, "bundled-sentiment", _negation,
                ("positive", "negative")),
    CircuitTask("tagging", "A word's tag: verb or noun", TAG, "bundled-upos", _tagging, ("VERB", "NOUN")),
)}
_KINDS = {MASK: "a masked-token prediction", CLASS: "a sentiment classifier's labels", TAG: "a tagger's tags"}


@dataclass(frozen=True)
class TaskPairs:
    """A task's pairs on one model: those it gets right, and how many were tried."""

    task: str
    pairs: list[Pair]
    tried: int
    unusable: int  # pairs the model cannot read (an answer of several word pieces, lengths that differ)


def tasks_for(lm: LoadedModel) -> list[str]:
    """The tasks ``lm`` can run (its kind of decision, and the labels they need)."""
    try:
        where = reads(lm)
    except BertScopeError:
        return []
    labels = set(lm.task.labels) if lm.task is not None else set()
    return [t.name for t in TASKS.values() if t.reads == where and set(t.labels) <= labels]


def task_pairs(lm: LoadedModel, name: str, size: int = DEFAULT_SIZE, seed: int = 0) -> TaskPairs:
    """Up to ``size`` pairs of task ``name`` that ``lm`` gets right, drawn in a seeded order.

    Args:
        lm: the model.
        name: a circuit task (``TASKS``: agreement, gender, capitals, negation, tagging).
        size: pairs kept.
        seed: the order drawn in.

    Returns:
        ``TaskPairs``: the pairs kept, how many were tried, how many could not be read.
    """
    if name not in TASKS:
        raise BertScopeError(f"Unknown circuit task {name!r}: use {', '.join(TASKS)}.")
    if not 1 <= size <= MAX_SIZE:
        raise BertScopeError(f"A task's size is 1 to {MAX_SIZE:,} pairs; {size:,} was asked.")
    task = TASKS[name]
    if name not in tasks_for(lm):
        fits = tasks_for(lm)
        raise BertScopeError(f"The {name} task reads {_KINDS[task.reads]}, which {lm.name} does not have; run it on "
                             f"{task.model}" + (f", or on {lm.name} run {', '.join(fits)}." if fits else "."))
    rng = random.Random(seed)
    candidates = task.build(rng)
    if task.reads == MASK and lm.tokenizer.mask_token != "[MASK]":  # RoBERTa's <mask>, …
        mask = lm.tokenizer.mask_token
        candidates = [replace(p, clean=p.clean.replace("[MASK]", mask), corrupted=p.corrupted.replace("[MASK]", mask))
                      for p in candidates]
    rng.shuffle(candidates)
    kept: list[Pair] = []
    tried = unusable = 0
    for batch in _chunks(candidates, 32):
        prepared = []
        for pair in batch:
            try:
                prepared.append(prepare(lm, pair, task.reads))
            except BertScopeError:
                unusable += 1
        tried += len(batch)
        kept += [p.pair for p, right in zip(prepared, _behaving(lm, prepared, task.reads)) if right]
        if len(kept) >= size:
            break
    if not kept:
        raise BertScopeError(f"{lm.name} gets none of the {tried} {name} pairs tried right (the clean run preferring "
                             "the answer, the corrupted run the foil): there is no behaviour for a circuit to carry.")
    return TaskPairs(name, kept[:size], tried, unusable)


def _chunks(items: Sequence[Pair], n: int) -> list[Sequence[Pair]]:
    return [items[i:i + n] for i in range(0, len(items), n)]


def _behaving(lm: LoadedModel, prepared: Sequence[PreparedPair], where: str) -> list[bool]:
    """Which pairs ``lm`` gets right (the clean run prefers the answer, the corrupted run the foil): the pairs of one
    token count in one pass, clean and corrupted rows together (no padding, so no mask to get wrong)."""
    right = [False] * len(prepared)
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prepared):
        by_length.setdefault(p.length, []).append(i)
    with turn(lm), torch.inference_mode():
        for chosen in by_length.values():
            rows = [prepared[i] for i in chosen]
            feed = {key: torch.cat([p.clean_feed[key] for p in rows] + [p.corrupted_feed[key] for p in rows])
                    for key in rows[0].clean_feed}  # [2 x pairs, token]
            diff = decisions(lm, lm.run(feed, encoder_only=where == MASK), rows + rows, where)  # [2 x pairs]
            for i, clean, corrupted in zip(chosen, diff[:len(rows)].tolist(), diff[len(rows):].tolist()):
                right[i] = clean > 0 > corrupted
    return right
