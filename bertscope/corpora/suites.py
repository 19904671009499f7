"""The catalogue of probe suites: the shipped suites (``bertscope/data/probing``, written by ``python -m probes.make_suites``, labels
correct by construction): ``pos`` (Universal POS, 2,091 tokens in 300 sentences), ``tense``,
``subject_number``, ``negation``, ``question``, ``bigram_shift``; and ``sense``: the embedding
shift page's 162 sentences, the target word labelled ``word:sense``.

The Brown suites (``brown-pos``, ``brown-tags``, ``brown-genre``) come from ``corpora.brown_tasks``
and need the corpus installed (``python -m bertscope corpus install``, which ``make`` runs).

The treebank tasks (``ewt-upos``, ``ewt-deprel``: ``analysis.treebank_probes``) read UD English-EWT
with its own train/test split (``corpus install ewt``).
"""

from __future__ import annotations

import re

from bertscope.corpora import DATA_DIR
from bertscope.corpora.brown_tasks import DEFAULT_SENTENCES, brown_task
from bertscope.corpora.probe_tasks import UNLABELLED, ProbeTask, finish_task, read_conllu, read_csv_task
from bertscope.corpora.senses import sense_presets
from bertscope.errors import BertScopeError

DATA = DATA_DIR / "probing"
SENTENCE_TASKS = ("tense", "subject_number", "negation", "question", "bigram_shift")
BROWN_TASKS = ("brown-pos", "brown-tags", "brown-genre")  # need the corpus installed (`make brown`)
SHIPPED = ("pos", "sense", *SENTENCE_TASKS)
TREEBANK_TASKS = {  # the only list: the probe command, its help and the Syntax tab read it
    "ewt-upos": "each word's universal part of speech (17 tags)",
    "ewt-deprel": "each arc's dependency label, from the dependent's and its head's vectors",
}
_WORD = re.compile(r"\w+|[^\w\s]")


def sense_task() -> ProbeTask:
    """The shift page's sentences: the first occurrence of the target word is labelled."""
    words, labels = [], []
    for target, rows in sense_presets().items():
        for sentence, sense in rows:
            tokens = _WORD.findall(sentence)
            lowered = [t.lower() for t in tokens]
            if target not in lowered:
                continue
            first = lowered.index(target)
            words.append(tokens)
            labels.append([f"{target}:{sense}" if i == first else UNLABELLED for i in range(len(tokens))])
    return finish_task("sense", "token", words, labels)


def shipped_task(name: str, size: int | None = None) -> ProbeTask:
    """A shipped suite, or a Brown suite (``brown-pos``, ``brown-tags``, ``brown-genre``) of
    ``size`` sentences (default: the quick sample; 0 = the whole corpus).

    Args:
        name: a shipped suite (``pos``, ``sense``, ``tense``, …) or a Brown suite.
        size: a Brown suite's sentences (None: the quick sample; 0: the whole corpus).

    Returns:
        A ``ProbeTask``: training and test sides, labels, the level (token or sentence).
    """
    if name in BROWN_TASKS:
        return brown_task(name, DEFAULT_SENTENCES if size is None else size)
    if name == "pos":
        return read_conllu((DATA / "pos.conllu").read_text(encoding="utf-8"), "pos")
    if name == "sense":
        return sense_task()
    if name in SENTENCE_TASKS:
        return read_csv_task((DATA / f"{name}.csv").read_text(encoding="utf-8"), name)
    if name in TREEBANK_TASKS:
        raise BertScopeError(f"{name} reads EWT's own train/test split: `python -m bertscope probe MODEL --task {name}` "
                             "(or analysis.treebank_probes.treebank_probe).")
    raise BertScopeError(f"No shipped task {name!r}: choose one of {', '.join(SHIPPED + BROWN_TASKS)}.")
