"""Sentences with gold tags on every word, as one shape for whatever reads them (the SAE feature
statistics): the text the model reads, each word's character span in it, and one tag sequence per
tagset.

- ``brown_tagged(sentences, seed)``: Brown (``brown.sample_sentences``: spread over all 500
  documents, every genre in proportion; 0 = all 57,340) with tagsets ``universal`` (Petrov et al.'s
  12, "." shown as PUNCT) and ``brown`` (Brown's own tags, decorations stripped: ``vbd`` past-tense
  verb, ``nns`` plural noun, ...); each sentence's source is its document and genre.
- ``ewt_tagged(sentences, split)``: UD English-EWT with tagsets ``upos`` and ``deprel`` (the word's
  relation to its head), when installed (``corpus install ewt``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from bertscope.errors import BertScopeError

TAGSET_NAMES = {"universal": "Brown POS (universal tags)", "brown": "Brown tags", "upos": "EWT UPOS",
                "deprel": "EWT dependency relation"}


def describe_tag(tagset: str, tag: str) -> str:
    """A tag as a label reads: Brown's own tags with their meaning ("vbd (past-tense verb)"), the others
    as they are."""
    if tagset == "brown":
        from bertscope.corpora.brown import tag_meaning

        meaning = tag_meaning(tag)
        return f"{tag} ({meaning})" if meaning else tag
    return tag


@dataclass(frozen=True)
class TaggedSentences:
    name: str  # "brown-5000", "ewt-train-all": what a cache key and a page name
    texts: tuple[str, ...]
    spans: tuple[tuple[tuple[int, int], ...], ...]  # [sentence][word] (start, end) in its text
    tags: dict[str, tuple[tuple[str, ...], ...]]  # tagset -> [sentence][word]
    sources: tuple[str, ...]  # [sentence] "ca01 (news)", "ewt-train-12"

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def tagsets(self) -> list[str]:
        return list(self.tags)

    @cached_property
    def digest(self) -> str:
        """A fingerprint of the sample: its texts, word spans and every tagset's tags (computed once)."""
        h = hashlib.sha256("\n".join(self.texts).encode())
        h.update(repr(self.spans).encode())
        for tagset in sorted(self.tags):
            h.update(f"{tagset}:{self.tags[tagset]!r}".encode())
        return h.hexdigest()


def brown_tagged(sentences: int = 5000, seed: int = 0, folder=None, side: str | None = None) -> TaggedSentences:
    """``side``: None (every document), "train" or "held-out" (``brown.split_documents``)."""
    from bertscope.corpora.brown import read_brown, split_documents, tag_name
    from bertscope.corpora.brown_tasks import sample_sentences

    corpus = read_brown(folder)
    documents = corpus.documents
    if side is not None:
        train, held = split_documents([d.id for d in documents], seed=seed)
        wanted = set({"train": train, "held-out": held}[side])
        documents = tuple(d for d in documents if d.id in wanted)
    picked = sample_sentences(documents, sentences, seed)
    texts, spans, universal, fine, sources = [], [], [], [], []
    for d, s in picked:
        text, offsets = s.text, s.offsets
        texts.append(text)
        spans.append(tuple(offsets))
        universal.append(tuple(tag_name(t) for t in s.universal))
        fine.append(s.fine)
        sources.append(f"{s.document} ({documents[d].genre})")
    size = "all" if sentences == 0 else str(len(texts))
    name = f"brown{'-' + side if side else ''}-{size}" + (f"-seed{seed}" if seed and sentences else "")
    return TaggedSentences(name, tuple(texts), tuple(spans), {"universal": tuple(universal), "brown": tuple(fine)},
                           tuple(sources))


def ewt_tagged(sentences: int = 0, split: str = "train", folder=None) -> TaggedSentences:
    from bertscope.corpora.brown import detokenize
    from bertscope.corpora.ewt import read_ewt

    chosen = read_ewt(split, folder)
    if sentences < 0:
        raise BertScopeError("The number of sentences must be 0 (all) or more.")
    if sentences:
        chosen = chosen[:sentences]
    texts, spans, upos, deprels, sources = [], [], [], [], []
    for s in chosen:
        text, offsets = detokenize(s.tokens)
        texts.append(text)
        spans.append(tuple(offsets))
        upos.append(tuple(s.upos))
        deprels.append(tuple(d.split(":")[0] for d in s.deprels))  # nmod:poss -> nmod: the universal relation
        sources.append(s.id)
    size = "all" if not sentences else str(len(texts))
    return TaggedSentences(f"ewt-{split}-{size}", tuple(texts), tuple(spans),
                           {"upos": tuple(upos), "deprel": tuple(deprels)}, tuple(sources))


def tagged_corpus(name: str, sentences: int, seed: int = 0) -> TaggedSentences:
    """``brown`` or ``ewt`` (its training split) by name."""
    if name == "brown":
        return brown_tagged(sentences, seed)
    if name == "ewt":
        return ewt_tagged(sentences)
    raise BertScopeError(f"No tagged corpus {name!r}: choose brown or ewt.")
