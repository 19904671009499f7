"""A sentence the user types, through a trained distance probe: its predicted tree (no gold).

The words are the sentence's runs of letters and digits and its single other marks (the
tokenisation the probe suites use); each word's vector is the mean of its pieces at the probe's
hidden state, as in training. The marks the UUAS metric leaves out (its punctuation tags: quotes,
commas, full stops and the like, colons and dashes, brackets) are left out of the tree; others ($,
%, &) stay in it, as they do in scoring. A word the tokenizer gives no piece (or that falls past the
model's limit) is named and left out.

    >>> from bertscope import load_model
    >>> from bertscope.analysis.structural_runs import structural_probes
    >>> lm = load_model("bundled")
    >>> result = structural_probes(lm, max_train=300)                               # doctest: +SKIP
    >>> tree = typed_tree(lm, result.probe, result.tree_state, "The cat sat on the mat.")  # doctest: +SKIP
    >>> tree.predicted_edges                                                         # doctest: +SKIP
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from bertscope.analysis.hidden_cache import pooled_rows, word_table
from bertscope.analysis.structural_probe import ProbeSentence, TrainedProbe, spanning_edges
from bertscope.core.layers import hidden_label
from bertscope.core.models import LoadedModel
from bertscope.corpora.probe_tasks import ProbeTask
from bertscope.errors import BertScopeError

WORD = re.compile(r"\w+|[^\w\s]")
MAX_WORDS = 120  # a tree drawn over more words is unreadable, and the MST is quadratic in them
# the characters of the Penn tags structural_probe.PUNCTUATION_XPOS names ('' , . : `` -LRB- -RRB-)
PUNCTUATION = set(".,:;!?'\"`()[]{}-\u2013\u2014\u2026\u2018\u2019\u201c\u201d")


@dataclass(frozen=True)
class TypedTree:
    text: str
    layer: object  # "embeddings" or a block number, as every surface names it
    words: list[str]  # the words with a vector, numbered from 1 in ``predicted_edges``
    punctuation: list[bool]  # [word] left out of the tree
    predicted_edges: list[list[int]]  # [[i, j], …] 1-based, i < j: the minimum spanning tree
    distances: np.ndarray  # [word, word] the probe's squared distances
    left_out: list[str]  # words without a vector

    def to_json(self) -> dict:
        return {"text": self.text, "layer": self.layer, "words": self.words, "punctuation": self.punctuation,
                "predicted_edges": self.predicted_edges, "left_out": self.left_out,
                "distances": np.round(self.distances, 4).tolist()}


def typed_words(text: str) -> tuple[list[re.Match], list[bool]]:
    """The sentence's words (as matches, with their characters) and which are punctuation; a text
    without two words to join, or with too many, is refused in one line (before any model runs)."""
    matches = list(WORD.finditer(text or ""))
    if len(matches) > MAX_WORDS:
        raise BertScopeError(f"{len(matches)} words; a typed sentence's tree takes at most {MAX_WORDS}.")
    punctuation = [all(ch in PUNCTUATION for ch in m.group()) for m in matches]
    if sum(not p for p in punctuation) < 2:
        raise BertScopeError("A tree needs at least two words (punctuation is left out of it).")
    return matches, punctuation


def typed_tree(lm: LoadedModel, probe: TrainedProbe, state: int, text: str) -> TypedTree:
    """The tree ``probe`` (a distance probe trained at hidden state ``state`` of ``lm``: 0 = the
    embeddings) predicts for ``text``."""
    if probe.what != "distance":
        raise BertScopeError("A predicted tree needs the distance probe.")
    if probe.probe.proj.shape[0] != lm.hidden_size or not 0 <= state <= lm.num_layers:
        raise BertScopeError(f"This probe was trained on another model ({probe.probe.proj.shape[0]} wide) than "
                             f"{lm.name} ({lm.hidden_size} wide, hidden states 0-{lm.num_layers}).")
    matches, punctuation = typed_words(text)
    words = [m.group() for m in matches]
    task = ProbeTask("typed", "token", (tuple(words),), (tuple("w" for _ in words),), sentences=(text,),
                     spans=(tuple((m.start(), m.end()) for m in matches),))
    vectors = np.full((len(words), lm.hidden_size), np.nan, np.float32)  # [word, dim]
    for _, rows, pooled in pooled_rows(lm, [text], word_table(task), "mean", batch_size=1):
        vectors[rows] = pooled[:, state]  # pooled [example, layer + 1, dim]
    has = ~np.isnan(vectors).any(axis=1)  # [word] got at least one piece
    kept = np.flatnonzero(has)
    left_out = [words[i] for i in np.flatnonzero(~has)]
    words_kept = [words[i] for i in kept]
    marks = [punctuation[i] for i in kept]
    if sum(not p for p in marks) < 2:
        raise BertScopeError("Fewer than two words kept a piece of the tokenizer: no tree to draw"
                             + (f" ({', '.join(left_out[:5])} left out)." if left_out else "."))
    sentence = ProbeSentence("typed", vectors[kept], [0] * len(kept), ["." if p else "W" for p in marks])
    distances = probe.predict(sentence)  # [word, word]
    edges = sorted(spanning_edges(distances, [not p for p in marks]))
    return TypedTree(text, hidden_label(state), words_kept, marks, [[a + 1, b + 1] for a, b in edges], distances,
                     left_out)
