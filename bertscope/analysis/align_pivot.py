"""Alignment across hundreds of languages against one pivot: for every language, the P@1 of retrieving
the pivot's translation of each item (a UDHR article in language X -> the same article in English
among the 30), per layer, raw and mean-centred (Libovický et al. 2020); beside it, how the tokenizer
covers the language (the share of unknown pieces, pieces per word). Every pair against every pair
would be 270,000 pairs for the UDHR's 521 versions; against the pivot it is one per language, in the
same JSON shape as ``align.RetrievalResult`` (``"p_at_1": {"xxx-eng": …}``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertscope.analysis.align import AlignmentVectors, centre
from bertscope.core.layers import hidden_label
from bertscope.core.models import LoadedModel
from bertscope.corpora.parallel import ParallelData
from bertscope.errors import BertScopeError

COVERED = 0.2  # a language with more unknown pieces than this is reported as not covered (Vai: 48%)
SPACED = 15  # characters a whitespace "word" has at most on average in a script that spaces its words


def pivot_accuracy(vectors: np.ndarray, pivot: int = 0) -> np.ndarray:
    """[language, item, layer, dim] -> [layer, language] P@1 of each language's items retrieving the
    pivot's same item by cosine (the pivot against itself: NaN)."""
    n_lang, n_items, n_layers, _ = vectors.shape
    unit = vectors / np.clip(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12, None)
    out = np.full((n_layers, n_lang), np.nan)
    target = np.arange(n_items)
    for layer in range(n_layers):
        pivot_items = unit[pivot, :, layer]  # [item, dim]
        sims = np.einsum("lid,jd->lij", unit[:, :, layer], pivot_items)  # [language, item, pivot item]
        out[layer] = (sims.argmax(-1) == target).mean(-1)
    out[:, pivot] = np.nan
    return out


@dataclass(frozen=True)
class LanguageCoverage:
    language: str
    unknown_share: float  # pieces that are the unknown token
    pieces_per_word: float  # pieces per whitespace-separated word; NaN for a script written without spaces
    pieces_per_char: float

    @property
    def covered(self) -> bool:
        return self.unknown_share <= COVERED


def language_coverage(lm: LoadedModel, data: ParallelData) -> list[LanguageCoverage]:
    tok = lm.tokenizer
    unk = tok.unk_token_id
    out = []
    for language in data.languages:
        texts = data.texts(language)
        ids = tok(texts, add_special_tokens=False)["input_ids"]
        pieces = sum(len(x) for x in ids)
        unknown = sum(1 for x in ids for i in x if unk is not None and i == unk)
        words = sum(len(t.split()) for t in texts)
        chars = sum(len(t) for t in texts)
        spaced = words and chars / words < SPACED  # Han, Kana, Thai … write words without spaces
        out.append(LanguageCoverage(language, unknown / max(pieces, 1), pieces / words if spaced else float("nan"),
                                    pieces / max(chars, 1)))
    return out


@dataclass(frozen=True)
class PivotRetrieval:
    languages: tuple[str, ...]  # the pivot first
    n_items: int
    raw: np.ndarray  # [layer, language] P@1 against the pivot
    centred: np.ndarray
    coverage: tuple[LanguageCoverage, ...]
    names: dict[str, str]  # code -> the language's name
    scripts: dict[str, str]  # code -> its script

    @property
    def pivot(self) -> str:
        return self.languages[0]

    @property
    def chance(self) -> float:
        return 1.0 / self.n_items

    def mean(self, centred: bool = False, covered_only: bool = True) -> np.ndarray:
        """[layer] mean P@1 over the languages (the covered ones by default)."""
        table = self.centred if centred else self.raw
        keep = [i for i, c in enumerate(self.coverage) if i > 0 and (c.covered or not covered_only)]
        if not keep:
            return np.full(table.shape[0], np.nan)
        return np.nanmean(table[:, keep], axis=1)

    @property
    def best_layer(self) -> int:
        means = self.mean(centred=True)
        return int(np.nanargmax(means)) if not np.all(np.isnan(means)) else 0

    def to_json(self) -> dict:
        names = [f"{g}-{self.pivot}" for g in self.languages[1:]]
        return {
            "pivot": self.pivot, "languages": list(self.languages), "items": self.n_items, "chance": self.chance,
            "best_layer": hidden_label(self.best_layer),
            "coverage": [{"language": c.language, "name": self.names.get(c.language, c.language),
                          "script": self.scripts.get(c.language, ""), "unknown_share": round(c.unknown_share, 6),
                          "pieces_per_word": None if np.isnan(c.pieces_per_word) else round(c.pieces_per_word, 4),
                          "pieces_per_char": round(c.pieces_per_char, 4), "covered": c.covered}
                         for c in self.coverage],
            "layers": [{
                "layer": hidden_label(layer),
                "p_at_1": {n: float(self.raw[layer, i + 1]) for i, n in enumerate(names)},
                "p_at_1_centered": {n: float(self.centred[layer, i + 1]) for i, n in enumerate(names)},
                "mean_p_at_1": float(self.mean()[layer]),
                "mean_p_at_1_centered": float(self.mean(True)[layer]),
            } for layer in range(self.raw.shape[0])],
        }


def pivot_retrieval(lm: LoadedModel, av: AlignmentVectors, names: dict[str, str] | None = None,
                    scripts: dict[str, str] | None = None) -> PivotRetrieval:
    """Each language of ``av`` against its first (the pivot)."""
    if len(av.languages) < 2:
        raise BertScopeError("Alignment against a pivot needs at least one other language.")
    return PivotRetrieval(av.languages, av.data.n_items, pivot_accuracy(av.vectors), pivot_accuracy(centre(av.vectors)),
                          tuple(language_coverage(lm, av.data)), dict(names or {}), dict(scripts or {}))
