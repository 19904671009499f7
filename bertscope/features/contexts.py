"""A feature's top contexts as a reader sees them: each of its top sentences (from the corpus
statistics) run again through the layer, every word piece with the feature's activation on it and
the gold tags of the word it belongs to. At most ``statistics.TOP`` sentences, in batches of like
length (little padding), the pass stopped at the layer: this is what keeps a feature's page under a
second on bundled-mlm."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.core.tokens import readable_tokens
from bertscope.core.word_pieces import piece_words
from bertscope.corpora.tagged import TaggedSentences
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.active import layer_output
from bertscope.features.sae import TopKSAE
from bertscope.features.statistics import FeatureStatistics


@dataclass(frozen=True)
class Context:
    sentence: int  # index in the corpus sample
    source: str  # "ca01 (news)"
    text: str
    peak: float  # the strongest activation in the sentence
    pieces: list[dict]  # {"token", "activation", "tags": {tagset: tag} of its word}

    def to_json(self) -> dict:
        return {"sentence": self.sentence, "source": self.source, "text": self.text, "peak": round(self.peak, 6),
                "tokens": self.pieces}


@torch.no_grad()
def feature_contexts(lm: LoadedModel, sae: TopKSAE, stats: FeatureStatistics, corpus: TaggedSentences,
                     feature: int, layer: int, top: int = 10) -> list[Context]:
    """A feature's top sentences from the corpus statistics, run again through the layer: every word piece with the
    feature's activation on it and the gold tags of its word.

    Args:
        lm: the model the SAE was made for.
        sae: the SAE of layer ``layer``'s output.
        stats: that SAE's statistics over ``corpus`` (``feature_statistics``), which rank the sentences.
        corpus: the tagged sample the statistics were computed on.
        feature: the feature, from 0.
        layer: the layer, from 0.
        top: sentences, at most (the statistics keep ``TOP``, 20, a feature).

    Returns:
        One ``Context`` a sentence, strongest first: its index in the sample, source ("ca01 (news)"), text, peak
            activation and ``pieces`` ({"token", "activation", "tags": {tagset: tag}}, [CLS] and [SEP] left out; tags
            empty for a piece outside every word). Empty when the feature never fired.
    """
    feature = stats.check_feature(sae.check_feature(feature))
    layer = check_layer(lm, layer)
    sae.check_for(lm, resid_post(layer))
    if stats.corpus != corpus.name or stats.sentences != len(corpus):
        raise BertScopeError(f"These statistics are of {stats.corpus}, not {corpus.name}.")
    if stats.hook != resid_post(layer):
        raise BertScopeError(f"These statistics are of {stats.hook}, not {resid_post(layer)}: index this layer first.")
    chosen = [s for s, _ in stats.contexts(feature)[:top]]
    if not chosen:
        return []
    found: dict[int, Context] = {}
    texts = [corpus.texts[s] for s in chosen]
    for rows, padded, feed in batches(lm, texts, batch_size=4):  # by length: little padding
        hidden = layer_output(lm, feed, layer)  # [batch, token, d_model]
        pre = sae.encode(hidden.float())[..., feature].cpu().numpy()  # [batch, token]
        ids = padded.feed["input_ids"].numpy()
        for b, r in enumerate(rows):
            s = chosen[r]
            keep = ~padded.special[b]
            owners = piece_words(corpus.spans[s], padded.offsets[b])  # [token] its word, -1: none
            names = readable_tokens(lm.tokenizer, ids[b][keep].tolist(),
                                    [w for w, k in zip(padded.word_ids[b], keep) if k], [False] * int(keep.sum()))
            pieces = []
            for name, t in zip(names, np.flatnonzero(keep)):
                w = int(owners[t])
                tags = {ts: corpus.tags[ts][s][w] for ts in corpus.tagsets} if w >= 0 else {}
                pieces.append({"token": name, "activation": round(float(pre[b, t]), 6), "tags": tags})
            found[s] = Context(s, corpus.sources[s], corpus.texts[s], max(p["activation"] for p in pieces), pieces)
    return [found[s] for s in chosen if s in found]
