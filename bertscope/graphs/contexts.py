"""Where a transcoder feature fires most: its strongest word pieces over a sample of text, so a graph's feature
says what it reads (the feature browser's top contexts, for transcoders). One pass through every layer's
feed-forward input (``blocks.{l}.hook_resid_mid``); each feature's ``KEPT`` strongest (sentence, position) kept as
the pass goes, merged batch by batch on the device; [CLS], [SEP] and padding never count (the graphs have no
features there)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches
from bertscope.errors import BertScopeError
from bertscope.features.transcoder import Transcoder

KEPT = 16  # strongest pieces kept a feature (several may share a sentence, or repeat one)
SHOWN = 3  # distinct sentences shown
WINDOW = 6  # word pieces either side of the peak in a snippet


@dataclass(frozen=True)
class FeatureExample:
    """One place a feature fires: the snippet around the piece (the piece between « and »), its activation."""

    snippet: str
    activation: float


@dataclass
class FeatureExamples:
    """Each layer's features' strongest places over ``tokens`` (one list of word pieces a sentence, specials
    included, as the pass read them)."""

    tokens: list[list[str]]
    values: dict[int, np.ndarray]  # layer -> [d_sae, KEPT] activations, strongest first, 0 where none
    where: dict[int, np.ndarray]  # layer -> [d_sae, KEPT, 2] (sentence, position)

    def of(self, layer: int, feature: int, shown: int = SHOWN) -> list[FeatureExample]:
        """Up to ``shown`` distinct sentences where ``feature`` of ``layer`` fires most, strongest first."""
        if layer not in self.values or not 0 <= feature < len(self.values[layer]):
            raise BertScopeError(f"No feature {feature} at layer {layer} in these examples.")
        found: list[FeatureExample] = []
        seen: set[str] = set()  # a sentence the sample holds twice is shown once
        for value, (sentence, position) in zip(self.values[layer][feature], self.where[layer][feature]):
            pieces = self.tokens[int(sentence)]
            if value <= 0 or " ".join(pieces) in seen or len(found) == shown:
                continue
            seen.add(" ".join(pieces))
            left = pieces[max(0, position - WINDOW):position]
            right = pieces[position + 1:position + 1 + WINDOW]
            found.append(FeatureExample(" ".join([*left, f"«{pieces[position]}»", *right]), float(value)))
        return found


@torch.no_grad()
def feature_examples(lm: LoadedModel, transcoders: Mapping[int, Transcoder], texts: Sequence[str],
                     batch_size: int = 32, progress: Callable[[int, int], None] | None = None) -> FeatureExamples:
    """Each transcoder feature's strongest word pieces over ``texts``.

    Args:
        lm: the model the transcoders replace the feed-forwards of.
        transcoders: {layer: transcoder}.
        texts: the sample read (the page: Brown's held-out sentences, or the shipped corpus).
        batch_size: texts a pass.
        progress: called with (done, total) texts.

    Returns:
        ``FeatureExamples``: ``of(layer, feature)`` gives the snippets.
    """
    if not texts:
        raise BertScopeError("No sentences to find the features' examples in.")
    for tc in transcoders.values():
        tc.check_for(lm)
    device = lm.device
    values = {ly: torch.zeros(tc.d_sae, KEPT, device=device) for ly, tc in transcoders.items()}
    where = {ly: torch.full((tc.d_sae, KEPT, 2), -1, dtype=torch.long, device=device) for ly, tc in transcoders.items()}
    tokens: list[list[str]] = [[] for _ in texts]
    names = {ly: tc.info.input_hook for ly, tc in transcoders.items()}
    done = 0
    for rows, padded, feed in batches(lm, list(texts), batch_size):
        _, cache = lm.run_with_cache(feed, list(names.values()), encoder_only=True)
        real = torch.from_numpy(~padded.special).to(device)  # [batch, token]: word pieces
        b, t = real.nonzero(as_tuple=True)  # [piece] each
        sentence = torch.tensor(rows, device=device)[b]  # [piece]
        mask = padded.feed["attention_mask"].bool()  # [batch, token], padding on either side
        t = t - mask.int().argmax(1).to(device)[b]  # [piece] the position in the sentence's own tokens
        for i, row in enumerate(rows):
            tokens[row] = lm.tokenizer.convert_ids_to_tokens(padded.feed["input_ids"][i][mask[i]].tolist())
        for ly, tc in transcoders.items():
            codes = tc.encode(cache[names[ly]][real].to(tc.W_enc.device))  # [piece, d_sae]
            top = codes.topk(min(KEPT, len(codes)), dim=0)  # values, indices [k, d_sae]
            idx = top.indices.to(device)
            merged = torch.cat([values[ly], top.values.T.to(device)], dim=1)  # [d_sae, KEPT + k]
            places = torch.cat([where[ly], torch.stack([sentence[idx], t[idx]], dim=-1).transpose(0, 1)], dim=1)
            best = merged.topk(KEPT, dim=1)
            values[ly] = best.values
            where[ly] = places.gather(1, best.indices[..., None].expand(-1, -1, 2))
        done += len(rows)
        if progress:
            progress(done, len(texts))
    return FeatureExamples(tokens, {ly: v.cpu().numpy() for ly, v in values.items()},
                           {ly: w.cpu().numpy() for ly, w in where.items()})
