"""What each feature of an SAE does over a tagged corpus, in one streamed pass: its top contexts,
its activation histogram and firing rate, and the gold tags it goes with.

Never the dense token x feature matrix (all of Brown, 1.16 M word pieces x 3,072 latents, is 14 GB
in float32): each batch's latents are reduced on the model's device into fixed-size tables and
dropped.

- **Top contexts**: a bounded table per feature, the ``TOP`` sentences where it fires hardest (a
  sentence counted once, at its strongest word piece), merged batch by batch with one ``topk``.
- **Histogram**: each firing's activation in ``BINS`` log-spaced bins from 10^-2 to 10^2 (values
  outside go to the end bins); **firing rate**: word pieces where it fires / all word pieces.
- **Tag labels without a language model**: a feature fires on a *word* when it fires on any of
  its pieces; for each tag t, precision = P(word has t | feature fires on it) and recall =
  P(feature fires | word has t). A feature's label is the tag with the best F1 (the harmonic mean
  of the two) among tags seen at least ``MIN_TAG_WORDS`` times: "past-tense verbs, precision 0.93,
  recall 0.41".

Layers are read in one pass stopped at the highest (``active.layer_outputs``). Results are kept
on disk (``.npz`` without pickles + a JSON header), keyed by the SAE's weights, the model's
weights and tokenizer and the corpus sample, so the first visit pays and every later one reads.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertscope.analysis.hidden_cache import tokenizer_fingerprint, weights_fingerprint
from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.core.word_pieces import batch_word_owners
from bertscope.corpora.tagged import TaggedSentences
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.active import layer_outputs
from bertscope.features.sae import TopKSAE
from bertscope.runtime.atomic import write_file
from bertscope.runtime.disk_quota import make_room, touch
from bertscope.runtime.user_cache import user_cache_dir

FORMAT_VERSION = 2  # 2: a piece out of the space before a word is the word's (core.word_pieces)
TOP = 20  # sentences kept per feature
BINS = 40
LOW, HIGH = -2.0, 2.0  # log10 of the histogram's range
MIN_TAG_WORDS = 20  # a tag seen fewer times cannot label a feature


def bin_edges() -> np.ndarray:
    return np.logspace(LOW, HIGH, BINS + 1)


def sae_digest(sae: TopKSAE) -> str:
    """A fingerprint of the SAE's weights (what it computes), not of where it was read from."""
    h = hashlib.sha256(repr((sae.architecture, sae.d_in, sae.d_sae, sae.k)).encode())
    for tensor in (sae.W_enc, sae.b_enc, sae.W_dec, sae.b_dec, sae.threshold):
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:24]


@dataclass(frozen=True)
class TagLabel:
    tagset: str
    tag: str
    precision: float
    recall: float
    words: int  # words with the tag where the feature fires

    @property
    def f1(self) -> float:
        return 2 * self.precision * self.recall / max(self.precision + self.recall, 1e-12)

    def to_json(self) -> dict:
        return {"tagset": self.tagset, "tag": self.tag, "precision": round(self.precision, 4),
                "recall": round(self.recall, 4), "f1": round(self.f1, 4), "words": self.words}


@dataclass
class FeatureStatistics:
    """One layer's SAE over one corpus sample. Arrays on the host, numpy."""

    model: str
    hook: str
    corpus: str
    sentences: int
    pieces: int  # word pieces read
    words: int  # corpus words that kept a piece
    top_values: np.ndarray  # [d_sae, TOP] float32, strongest first; 0 where fewer sentences fired
    top_sentences: np.ndarray  # [d_sae, TOP] int32 sentence index in the corpus sample; -1 none
    fires: np.ndarray  # [d_sae] int64 word pieces where the feature fires
    activation_sum: np.ndarray  # [d_sae] float64 over those pieces
    histogram: np.ndarray  # [d_sae, BINS] int64 firings by activation
    tags: dict[str, list[str]] = field(default_factory=dict)  # tagset -> its tags
    tag_words: dict[str, np.ndarray] = field(default_factory=dict)  # tagset -> [tag] words with it
    tag_fires: dict[str, np.ndarray] = field(default_factory=dict)  # tagset -> [d_sae, tag] words with it fired on
    fired_words: np.ndarray | None = None  # [d_sae] words fired on (any piece)

    @property
    def d_sae(self) -> int:
        return len(self.fires)

    def check_feature(self, feature: int) -> int:
        if not 0 <= int(feature) < self.d_sae:
            raise BertScopeError(f"Feature {feature} does not exist: this SAE has features 0 to {self.d_sae - 1}.")
        return int(feature)

    def firing_rate(self, feature: int) -> float:
        return float(self.fires[self.check_feature(feature)]) / max(self.pieces, 1)

    def mean_activation(self, feature: int) -> float:
        f = self.check_feature(feature)
        return float(self.activation_sum[f] / max(self.fires[f], 1))

    def labels(self, feature: int, tagset: str, top: int = 3) -> list[TagLabel]:
        """The tags of ``tagset`` that best go with the feature's firing, best F1 first."""
        f = self.check_feature(feature)
        if tagset not in self.tags:
            raise BertScopeError(f"No tagset {tagset!r} here: {', '.join(self.tags) or 'none'}.")
        hits = self.tag_fires[tagset][f].astype(np.float64)  # [tag]
        fired = float(self.fired_words[f])
        if fired == 0:
            return []
        precision = hits / fired
        recall = hits / np.maximum(self.tag_words[tagset], 1)
        f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
        f1[self.tag_words[tagset] < MIN_TAG_WORDS] = -1
        order = [int(t) for t in np.argsort(-f1, kind="stable")[:top] if f1[t] > 0]
        return [TagLabel(tagset, self.tags[tagset][t], float(precision[t]), float(recall[t]), int(hits[t]))
                for t in order]

    def label(self, feature: int, tagset: str | None = None) -> TagLabel | None:
        """The best label over ``tagset`` (default: every tagset)."""
        found = [lab for ts in ([tagset] if tagset else self.tags) for lab in self.labels(feature, ts, 1)]
        return max(found, key=lambda lab: lab.f1) if found else None

    def features_for_tag(self, tagset: str, tag: str, top: int = 20) -> list[tuple[int, TagLabel]]:
        """(feature, its label for ``tag``) of the features whose firing best goes with ``tag``, by F1."""
        if tagset not in self.tags or tag not in self.tags[tagset]:
            known = ", ".join(self.tags.get(tagset, [])) or "none"
            raise BertScopeError(f"No tag {tag!r} in {tagset}: the tags are {known}.")
        t = self.tags[tagset].index(tag)
        hits = self.tag_fires[tagset][:, t].astype(np.float64)  # [d_sae]
        precision = hits / np.maximum(self.fired_words, 1)
        recall = hits / max(int(self.tag_words[tagset][t]), 1)
        f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
        order = [int(f) for f in np.argsort(-f1, kind="stable")[:top] if f1[f] > 0]
        return [(f, TagLabel(tagset, tag, float(precision[f]), float(recall[f]), int(hits[f]))) for f in order]

    def contexts(self, feature: int) -> list[tuple[int, float]]:
        """(sentence index, strongest activation in it) of the feature's top sentences."""
        f = self.check_feature(feature)
        return [(int(s), float(v)) for s, v in zip(self.top_sentences[f], self.top_values[f]) if s >= 0 and v > 0]

    def summary(self, feature: int) -> dict:
        f = self.check_feature(feature)
        label = self.label(f)
        return {"feature": f, "firing_rate": round(self.firing_rate(f), 6), "fires": int(self.fires[f]),
                "mean_activation": round(self.mean_activation(f), 6), "label": label.to_json() if label else None}

    # -- on disk ---------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        arrays = {"top_values": self.top_values, "top_sentences": self.top_sentences, "fires": self.fires,
                  "activation_sum": self.activation_sum, "histogram": self.histogram,
                  "fired_words": self.fired_words}
        for ts in self.tags:
            arrays[f"tag_words.{ts}"] = self.tag_words[ts]
            arrays[f"tag_fires.{ts}"] = self.tag_fires[ts]
        header = {"model": self.model, "hook": self.hook, "corpus": self.corpus, "sentences": self.sentences,
                  "pieces": self.pieces, "words": self.words, "tags": self.tags, "format_version": FORMAT_VERSION}
        make_room(sum(int(np.asarray(a).nbytes) for a in arrays.values()), "keeping these feature statistics")
        write_file(path, lambda tmp: np.savez(tmp, header=np.frombuffer(json.dumps(header).encode(), np.uint8),
                                              **arrays))

    @classmethod
    def load(cls, path: Path) -> FeatureStatistics:
        touch(path)  # the most recently used, for a disk quota
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(data["header"].tobytes().decode())
            arrays = {k: data[k] for k in data.files if k != "header"}
        tags = header["tags"]
        return cls(header["model"], header["hook"], header["corpus"], header["sentences"], header["pieces"],
                   header["words"], arrays["top_values"], arrays["top_sentences"], arrays["fires"],
                   arrays["activation_sum"], arrays["histogram"], tags,
                   {ts: arrays[f"tag_words.{ts}"] for ts in tags}, {ts: arrays[f"tag_fires.{ts}"] for ts in tags},
                   arrays["fired_words"])


def statistics_path(lm: LoadedModel, sae: TopKSAE, corpus: TaggedSentences, layer: int,
                    root: Path | None = None) -> Path:
    key = repr((FORMAT_VERSION, weights_fingerprint(lm), tokenizer_fingerprint(lm), lm.max_length, layer,
                sae_digest(sae), corpus.name, corpus.digest, TOP, BINS))
    return (root or user_cache_dir() / "features" / "statistics") / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.npz"


def statistics_on_disk(lm: LoadedModel, saes: dict[int, TopKSAE], corpus: TaggedSentences,
                       root: Path | None = None) -> dict[int, FeatureStatistics]:
    """The layers whose statistics are already kept (read without a pass)."""
    found = {}
    for layer, sae in saes.items():
        path = statistics_path(lm, sae, corpus, layer, root)
        if path.is_file():
            found[layer] = FeatureStatistics.load(path)
    return found


class _Tallies:
    """One layer's running statistics over the pass: firings, activation sums, the log histogram, each feature's top
    sentences, and the words (and their tags) it fires on, on the device."""

    def __init__(self, d: int, tag_lists: dict[str, list[str]], dev: torch.device) -> None:
        self.d = d
        self.top_values = torch.zeros(d, TOP, device=dev)
        self.top_sentences = torch.full((d, TOP), -1, device=dev)
        self.fires = torch.zeros(d, dtype=torch.int64, device=dev)
        self.activation_sum = torch.zeros(d, dtype=torch.float64, device=dev)
        self.histogram = torch.zeros(d * BINS, dtype=torch.int64, device=dev)
        self.fired_words = torch.zeros(d, dtype=torch.int64, device=dev)
        self.tag_fires = {ts: torch.zeros(d, len(tags), dtype=torch.int64, device=dev) for ts, tags in tag_lists.items()}
        self.log_edges = torch.linspace(LOW, HIGH, BINS + 1, device=dev)[1:-1]  # inner edges, log10

    def add(self, piece: torch.Tensor, feat: torch.Tensor, value: torch.Tensor, words: _BatchWords) -> None:
        """One batch's firings (``piece``, ``feat``, ``value`` [firing] each, sparse)."""
        d = self.d
        self.fires += torch.bincount(feat, minlength=d)
        self.activation_sum += torch.bincount(feat, weights=value.double(), minlength=d)
        bins = torch.bucketize(value.log10(), self.log_edges)  # [firing] 0..BINS-1
        self.histogram += torch.bincount(feat * BINS + bins, minlength=d * BINS)
        # top sentences: each sentence's strongest piece, merged with the table so far
        n_rows = len(words.sentence_ids)
        best = torch.zeros(n_rows * d, device=value.device).scatter_reduce_(  # [batch x d_sae]
            0, words.row_of[piece] * d + feat, value, "amax").view(n_rows, d)
        values = torch.cat([self.top_values, best.t()], 1)  # [d_sae, TOP + batch]
        ids = torch.cat([self.top_sentences, words.sentence_ids.expand(d, -1)], 1)
        keep = values.topk(TOP, dim=1)
        self.top_values, self.top_sentences = keep.values, ids.gather(1, keep.indices)
        # words: fired when any piece fires; each (word, feature) pair counted once
        mine = words.in_word[piece]
        pairs = torch.unique(words.owner[piece[mine]] * d + feat[mine])  # [pair] word x d_sae + feature
        word, feature = pairs // d, pairs % d
        self.fired_words += torch.bincount(feature, minlength=d)
        for ts, fires in self.tag_fires.items():
            n_tags = fires.shape[1]
            fires += torch.bincount(feature * n_tags + words.tags[ts][word], minlength=d * n_tags).view(d, n_tags)

    def finish(self, lm: LoadedModel, layer: int, corpus: TaggedSentences, pieces: int, words: int,
               tag_lists: dict[str, list[str]], tag_words: dict[str, np.ndarray]) -> FeatureStatistics:
        values = self.top_values.cpu().numpy()
        sentences = np.where(values > 0, self.top_sentences.cpu().numpy(), -1).astype(np.int32)
        return FeatureStatistics(
            lm.name, resid_post(layer), corpus.name, len(corpus), pieces, words, values.astype(np.float32), sentences,
            self.fires.cpu().numpy(), self.activation_sum.cpu().numpy(),
            self.histogram.view(self.d, BINS).cpu().numpy(), tag_lists, tag_words,
            {ts: fires.cpu().numpy() for ts, fires in self.tag_fires.items()}, self.fired_words.cpu().numpy())


@dataclass
class _BatchWords:
    """A batch's word pieces and the words they belong to, on the device."""

    row_of: torch.Tensor  # [piece] its row in the batch
    owner: torch.Tensor  # [piece] its batch word, -1 none
    in_word: torch.Tensor  # [piece] bool
    tags: dict[str, torch.Tensor]  # tagset -> [batch word] tag index
    seen: torch.Tensor  # [batch word] bool: words that kept a piece
    sentence_ids: torch.Tensor  # [batch]
    real: torch.Tensor  # [batch, token] bool: the word pieces


def _batch_words(padded, rows: list[int], corpus: TaggedSentences, tag_index: dict[str, dict[str, int]],
                 dev: torch.device) -> _BatchWords:
    owners, word_row = batch_word_owners(padded, [corpus.spans[s] for s in rows])
    real = torch.from_numpy(~padded.special).to(dev)  # [batch, token]
    owner = torch.from_numpy(owners).to(dev)[real]  # [piece]
    in_word = owner >= 0
    tags = {ts: torch.tensor([tag_index[ts][t] for s in rows for t in corpus.tags[ts][s]],
                             dtype=torch.int64, device=dev) for ts in corpus.tagsets}  # [batch word]
    seen = torch.zeros(len(word_row), dtype=torch.bool, device=dev)
    seen[owner[in_word]] = True
    return _BatchWords(real.nonzero()[:, 0], owner, in_word, tags, seen,
                       torch.tensor(rows, dtype=torch.int64, device=dev), real)


@torch.no_grad()
def feature_statistics(lm: LoadedModel, saes: dict[int, TopKSAE], corpus: TaggedSentences,
                       root: Path | None = None, batch_size: int = 32,
                       progress: Callable[[int, int], None] | None = None) -> dict[int, FeatureStatistics]:
    """``{layer: statistics}`` for each layer's SAE over ``corpus``: from disk, or one pass now for
    the layers missing (kept). ``progress(done, total)`` counts sentences.

    Args:
        lm: the model the SAEs were made for.
        saes: {layer: the SAE of that layer's output}, layers from 0.
        corpus: the tagged sample read (``brown_tagged``, ``ewt_tagged``).
        root: the folder the statistics are kept in (default: the user cache's ``features/statistics``).
        batch_size: sentences a pass.
        progress: called with (done, total) sentences.

    Returns:
        {layer: ``FeatureStatistics``}: per feature its ``TOP`` (20) strongest sentences, firing count, activation
            sum and histogram over word pieces, and the words it fires on by gold tag (its labels).
    """
    if not saes:
        raise BertScopeError("No SAE given.")
    if not len(corpus):
        raise BertScopeError("The corpus sample is empty.")
    for layer, sae in saes.items():
        sae.check_for(lm, resid_post(check_layer(lm, layer)))
    found = statistics_on_disk(lm, saes, corpus, root)
    missing = {layer: sae.to(lm.device).eval() for layer, sae in saes.items() if layer not in found}
    if not missing:
        return found
    dev = lm.device
    tag_lists = {ts: sorted({t for sent in corpus.tags[ts] for t in sent}) for ts in corpus.tagsets}
    tag_index = {ts: {t: i for i, t in enumerate(tags)} for ts, tags in tag_lists.items()}
    tallies = {layer: _Tallies(sae.d_sae, tag_lists, dev) for layer, sae in missing.items()}
    tag_words = {ts: np.zeros(len(tags), np.int64) for ts, tags in tag_lists.items()}
    pieces = words = done = 0
    for rows, padded, feed in batches(lm, list(corpus.texts), batch_size):
        outputs = layer_outputs(lm, feed, missing)
        batch = _batch_words(padded, rows, corpus, tag_index, dev)
        for ts, tags in tag_lists.items():
            tag_words[ts] += torch.bincount(batch.tags[ts][batch.seen], minlength=len(tags)).cpu().numpy()
        words += int(batch.seen.sum())
        pieces += int(batch.real.sum())
        for layer, sae in missing.items():
            tallies[layer].add(*sae.firings(outputs[layer][batch.real].float()), batch)  # [firing] each, sparse
        done += len(rows)
        if progress:
            progress(done, len(corpus))
    results = dict(found)
    for layer, sae in missing.items():
        results[layer] = tallies[layer].finish(lm, layer, corpus, pieces, words, tag_lists, tag_words)
        results[layer].save(statistics_path(lm, sae, corpus, layer, root))
    return results
