"""Write the shipped probe suites: ``python -m probes.make_suites`` (seeded, reproducible).

Every label is correct by construction: each sentence comes from a template whose slots have
a fixed Universal POS tag, filled from word lists in which every word has that tag in that
slot. The sentence-level suites vary one property on otherwise matched sentences:
- tense (past / present), subject number (singular / plural), negation (affirmative /
  negated), question vs statement: minimal pairs from the same frames;
- bigram shift (Conneau et al. 2018, "What you can cram into a single vector"): the sentence
  as written, or with two adjacent words swapped (never the final punctuation).
Output: ``bertscope/data/probing/pos.conllu`` and ``<task>.csv`` (sentence,label).
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "bertscope" / "data" / "probing"

DET = ["the", "this", "that", "every", "each"]  # no "a": it would need "an" before vowels
ADJ = ["old", "small", "red", "quiet", "happy", "heavy", "bright", "cold", "young", "strange", "tall", "green",
       "narrow", "famous", "empty", "angry", "gentle", "brave", "silent", "dusty", "golden", "rusty", "tiny",
       "huge", "calm", "proud", "rough", "smooth", "shy", "clever", "lonely", "noisy", "polite", "modern",
       "ancient", "wooden", "broken", "careful", "curious", "dark", "pale", "warm", "wild", "fresh", "sharp"]
NOUN = ["man", "woman", "child", "dog", "cat", "teacher", "farmer", "doctor", "bird", "student", "driver", "baker",
        "nurse", "pilot", "sailor", "painter", "singer", "soldier", "neighbour", "lawyer", "butcher", "tailor",
        "horse", "rabbit", "fox", "wolf", "goat", "monkey", "captain", "clerk", "guard", "judge", "priest",
        "waiter", "writer", "miner", "hunter", "poet", "king"]
THING = ["book", "table", "letter", "box", "window", "garden", "river", "house", "lamp", "chair", "road", "bridge",
         "basket", "ladder", "mirror", "bottle", "carpet", "fence", "kettle", "pillow", "wagon", "bucket",
         "candle", "blanket", "drawer", "envelope", "helmet", "jacket", "napkin", "parcel", "saddle", "shovel",
         "statue", "tunnel", "violin", "whistle", "anchor", "barrel", "cabinet", "cottage", "harbour", "meadow"]
PLURAL = ["dogs", "cats", "children", "teachers", "farmers", "birds", "students", "drivers", "bakers", "women",
          "nurses", "pilots", "sailors", "painters", "singers", "soldiers", "horses", "rabbits", "foxes",
          "wolves", "goats", "monkeys", "clerks", "guards", "waiters", "writers", "miners", "hunters", "poets"]
PROPN = ["Anna", "Peter", "Maria", "London", "Tokyo", "Paris", "Omar", "Lena", "Carlos", "Mei", "Berlin",
         "Cairo", "Lisbon", "Oslo", "Priya", "Tomas", "Yuki", "Fatima", "Ivan", "Sofia", "Dublin", "Lagos",
         "Kenji", "Chloe", "Mateo", "Nadia", "Quito", "Vienna", "Hugo", "Ingrid"]
PRON = ["she", "he", "they", "we", "I", "you"]
ADP = ["near", "behind", "under", "beside", "across", "into", "over", "from", "without", "after"]
ADV = ["quickly", "slowly", "yesterday", "often", "quietly", "carefully", "today", "outside", "again", "early"]
MANNER = ["quickly", "slowly", "often", "quietly", "carefully", "outside", "again", "early"]  # no time words
NUM = ["two", "three", "four", "five", "six", "seven", "ten", "twelve"]
CCONJ = ["and", "or", "but"]
INTJ = ["oh", "well", "wow", "hey"]
SCONJ = ["when", "because", "although", "while", "if"]
# (past, present 3rd singular, present plural, -ing, bare) of transitive verbs
VERBS = [
    ("opened", "opens", "open", "opening", "open"), ("painted", "paints", "paint", "painting", "paint"),
    ("cleaned", "cleans", "clean", "cleaning", "clean"), ("carried", "carries", "carry", "carrying", "carry"),
    ("watched", "watches", "watch", "watching", "watch"), ("moved", "moves", "move", "moving", "move"),
    ("pushed", "pushes", "push", "pushing", "push"), ("visited", "visits", "visit", "visiting", "visit"),
    ("fixed", "fixes", "fix", "fixing", "fix"), ("found", "finds", "find", "finding", "find"),
    ("saw", "sees", "see", "seeing", "see"), ("built", "builds", "build", "building", "build"),
    ("polished", "polishes", "polish", "polishing", "polish"), ("dropped", "drops", "drop", "dropping", "drop"),
    ("lifted", "lifts", "lift", "lifting", "lift"), ("sold", "sells", "sell", "selling", "sell"),
    ("borrowed", "borrows", "borrow", "borrowing", "borrow"), ("hid", "hides", "hide", "hiding", "hide"),
    ("washed", "washes", "wash", "washing", "wash"), ("dragged", "drags", "drag", "dragging", "drag"),
    ("noticed", "notices", "notice", "noticing", "notice"), ("repaired", "repairs", "repair", "repairing", "repair"),
    ("measured", "measures", "measure", "measuring", "measure"), ("guarded", "guards", "guard", "guarding", "guard"),
    ("admired", "admires", "admire", "admiring", "admire"), ("bought", "buys", "buy", "buying", "buy"),
]
PLURAL_OF = {"man": "men", "woman": "women", "child": "children", "fox": "foxes", "wolf": "wolves",
}
# Words whose tag depends on the sentence, so that a word's identity does not give its tag
# (otherwise Hewitt & Liang's control task would match the real one).
VERB_AS_NOUN = ["walk", "work", "watch", "paint", "move", "fix", "visit", "rest", "smile", "laugh", "wait", "build"]
NOUN_AS_VERB = ["book", "water", "plant", "light", "park", "box", "house", "paint"]
ADJ_OR_ADV = ["early", "late", "fast", "hard"]
ADP_OR_ADV = ["outside", "behind", "over", "across", "near", "after"]
# intransitive: (past, present 3rd singular, present plural)
INTRANSITIVE = [("slept", "sleeps", "sleep"), ("waited", "waits", "wait"), ("arrived", "arrives", "arrive"),
                ("laughed", "laughs", "laugh"), ("smiled", "smiles", "smile"), ("worked", "works", "work"),
                ("walked", "walks", "walk"), ("rested", "rests", "rest"), ("coughed", "coughs", "cough"),
                ("shouted", "shouts", "shout"), ("danced", "dances", "dance"), ("trembled", "trembles", "tremble"),
                ("sneezed", "sneezes", "sneeze"), ("wandered", "wanders", "wander"), ("paused", "pauses", "pause"),
                ("complained", "complains", "complain"), ("hesitated", "hesitates", "hesitate"),
                ("yawned", "yawns", "yawn"), ("whispered", "whispers", "whisper"), ("shivered", "shivers", "shiver")]


def pos_sentences(rng: random.Random, n: int) -> list[list[tuple[str, str]]]:
    """Tagged sentences from nine templates (every slot's tag fixed by the template)."""
    c = rng.choice

    def templates():
        verb, intr = c(VERBS), c(INTRANSITIVE)
        return [
            [(c(DET), "DET"), (c(ADJ), "ADJ"), (c(NOUN), "NOUN"), (verb[0], "VERB"), (c(DET), "DET"),
             (c(THING), "NOUN"), (c(ADP), "ADP"), (c(DET), "DET"), (c(THING), "NOUN"), (".", "PUNCT")],
            [(c(["she", "he", "I"]), "PRON"), ("was", "AUX"), (verb[3], "VERB"), (c(DET), "DET"), (c(ADJ), "ADJ"),
             (c(THING), "NOUN"), (".", "PUNCT")],
            [(c(PROPN), "PROPN"), (verb[0], "VERB"), (c(DET), "DET"), (c(THING), "NOUN"), (c(CCONJ), "CCONJ"),
             (c(DET), "DET"), (c(THING), "NOUN"), (".", "PUNCT")],
            [(c(DET), "DET"), (c(THING), "NOUN"), ("was", "AUX"), ("very", "ADV"), (c(ADJ), "ADJ"), (".", "PUNCT")],
            [(c(NUM), "NUM"), (c(PLURAL), "NOUN"), (intr[0], "VERB"), (c(ADP), "ADP"), (c(DET), "DET"),
             (c(THING), "NOUN"), (".", "PUNCT")],
            [(c(PRON), "PRON"), ("did", "AUX"), ("not", "PART"), (verb[4], "VERB"), (c(DET), "DET"),
             (c(THING), "NOUN"), (c(ADV), "ADV"), (".", "PUNCT")],
            [(c(INTJ), "INTJ"), (",", "PUNCT"), (c(PROPN), "PROPN"), (intr[0], "VERB"), (c(ADV), "ADV"),
             ("!", "PUNCT")],
            [(c(SCONJ), "SCONJ"), (c(DET), "DET"), (c(NOUN), "NOUN"), (intr[0], "VERB"), (",", "PUNCT"),
             (c(PRON), "PRON"), (verb[0], "VERB"), (c(DET), "DET"), (c(THING), "NOUN"), (".", "PUNCT")],
            [(c(["the", "these", "those"]), "DET"), (c(ADJ), "ADJ"), (c(PLURAL), "NOUN"), (intr[2], "VERB"),
             (c(MANNER), "ADV"),
             (c(CCONJ), "CCONJ"), (c(["they", "we", "you"]), "PRON"), (c(INTRANSITIVE)[2], "VERB"), (".", "PUNCT")],
            [("the", "DET"), (c(VERB_AS_NOUN), "NOUN"), ("was", "AUX"), ("very", "ADV"), (c(ADJ), "ADJ"),
             (".", "PUNCT")],
            [(c(["they", "we", "you", "I"]), "PRON"), (c(NOUN_AS_VERB), "VERB"), ("the", "DET"), (c(THING), "NOUN"),
             (c(ADJ_OR_ADV), "ADV"), (".", "PUNCT")],
            [("the", "DET"), (c(ADJ_OR_ADV), "ADJ"), (c(NOUN), "NOUN"), (intr[0], "VERB"), (c(ADJ_OR_ADV), "ADV"),
             (".", "PUNCT")],
            [(c(PRON[:3]), "PRON"), ("said", "VERB"), ("that", "SCONJ"), ("the", "DET"), (c(NOUN), "NOUN"),
             (intr[0], "VERB"), (".", "PUNCT")],
            [("that", "PRON"), ("was", "AUX"), ("very", "ADV"), (c(ADJ), "ADJ"), (".", "PUNCT")],
            [("the", "DET"), (c(PLURAL), "NOUN"), (intr[0], "VERB"), (c(ADP_OR_ADV), "ADV"), (".", "PUNCT")],
            [("the", "DET"), (c(PLURAL), "NOUN"), (intr[0], "VERB"), (c(ADP_OR_ADV), "ADP"), ("the", "DET"),
             (c(THING), "NOUN"), (".", "PUNCT")],
        ]

    out, seen = [], set()
    while len(out) < n:
        sentence = c(templates())
        text = " ".join(w for w, _ in sentence)
        if text in seen:
            continue
        seen.add(text)
        first, tag = sentence[0]
        sentence[0] = (first if tag == "PROPN" or first == "I" else first.capitalize(), tag)
        out.append(sentence)
    return out


def write_conllu(sentences: list[list[tuple[str, str]]], path: Path) -> None:
    lines = []
    for i, sentence in enumerate(sentences, start=1):
        text = " ".join(w for w, _ in sentence)
        lines += [f"# sent_id = {i}", f"# text = {text}"]
        lines += [f"{j}\t{w}\t_\t{t}\t_\t_\t_\t_\t_\t_" for j, (w, t) in enumerate(sentence, start=1)]
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def sentence_pairs(rng: random.Random, n: int) -> dict[str, list[tuple[str, str]]]:
    """Matched sentences for tense, subject number, negation and question."""
    tasks: dict[str, list[tuple[str, str]]] = {"tense": [], "subject_number": [], "negation": [], "question": []}
    c = rng.choice
    for _ in range(n):
        det, adj, thing = c(["the", "this", "that"]), c(ADJ), c(THING)
        i = rng.randrange(len(NOUN))
        noun, plural = NOUN[i], PLURAL_OF.get(NOUN[i], NOUN[i] + "s")
        verb, intr = c(VERBS), c(INTRANSITIVE)
        tasks["tense"] += [(f"The {noun} {verb[0]} the {adj} {thing}.", "past"),
                           (f"The {noun} {verb[1]} the {adj} {thing}.", "present")]
        tasks["subject_number"] += [(f"The {adj} {noun} {intr[1]} {c(MANNER)}.", "singular"),
                                    (f"The {adj} {plural} {intr[2]} {c(MANNER)}.", "plural")]
        tasks["negation"] += [(f"The {noun} {verb[1]} {det} {thing}.", "affirmative"),
                              (f"The {noun} does not {verb[4]} {det} {thing}.", "negated")]
        tasks["question"] += [(f"The {thing} is {adj}.", "statement"), (f"Is the {thing} {adj}?", "question")]
    return {name: list(dict.fromkeys(rows)) for name, rows in tasks.items()}


def bigram_shift(rng: random.Random, sentences: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    rows = []
    for sentence in sentences:
        words = [w for w, _ in sentence]
        if rng.random() < 0.5:
            rows.append((" ".join(words), "original"))
            continue
        i = rng.randrange(len(words) - 2)  # never the final punctuation
        words[i], words[i + 1] = words[i + 1], words[i]
        rows.append((" ".join(words), "shifted"))
    return rows


def write_csv(rows: list[tuple[str, str]], path: Path) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sentence", "label"])
        writer.writerows(rows)


def main(out: Path = OUT) -> None:
    rng = random.Random(20261122)
    out.mkdir(parents=True, exist_ok=True)
    tagged = pos_sentences(rng, 300)
    write_conllu(tagged, out / "pos.conllu")
    for name, rows in sentence_pairs(rng, 150).items():
        write_csv(rows, out / f"{name}.csv")
    write_csv(bigram_shift(rng, pos_sentences(rng, 300)), out / "bigram_shift.csv")
    print(f"wrote {out}: {sum(len(s) for s in tagged)} tagged tokens in {len(tagged)} sentences")


if __name__ == "__main__":
    main()
