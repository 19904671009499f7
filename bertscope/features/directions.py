"""What a feature's decoder direction does, read from the weights alone (no corpus pass).

- ``logit_weights``: the tokens it promotes and suppresses through the masked-LM head, Neuronpedia's
  "logit weights" for an encoder: the head applied (as the logit lens applies it) to the SAE's
  centre b_dec (its estimate of the layer's typical output) with the feature's unit direction added
  at ``scale`` (default |b_dec|: a step the size of a typical hidden state), minus the head applied
  to the centre alone. The ranking, not the size, is the reading. BERT's head has a dense layer, GELU and
  LayerNorm before its vocabulary projection, so the plain product W_dec[f] @ W_U that decoder-LM
  tools show would skip them; the difference of two readings does not.
- ``nearest_features``: the features whose decoder directions are closest by cosine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.features.sae import TopKSAE
from bertscope.mlm.logit_lens import mlm_head


@dataclass(frozen=True)
class LogitWeights:
    feature: int
    scale: float
    promoted: list[tuple[str, float]]  # (token, logit change), largest first
    suppressed: list[tuple[str, float]]  # most negative first

    def to_json(self) -> dict:
        return {"feature": self.feature, "scale": self.scale,
                "promoted": [{"token": t, "logit_change": v} for t, v in self.promoted],
                "suppressed": [{"token": t, "logit_change": v} for t, v in self.suppressed]}


@torch.no_grad()
def logit_weights(lm: LoadedModel, sae: TopKSAE, feature: int, scale: float | None = None,
                  top: int = 10) -> LogitWeights:
    """The tokens a feature's decoder direction promotes and suppresses through the masked-LM head (module docstring):
    the head read at b_dec + ``scale`` W_dec[feature], minus the head read at b_dec.

    Args:
        lm: a model with a masked-LM head, the one the SAE was made for.
        sae: the SAE.
        feature: the feature, from 0.
        scale: how far along the decoder row's direction the head reads (None: ‖b_dec‖, a typical hidden state's
            size). The row is scaled to unit length first (a TopK SAE trained here stores it so; SAELens's files
            need not), so ``scale`` means the same for every SAE.
        top: tokens kept each way.

    Returns:
        ``LogitWeights``: the feature, the scale used, ``promoted`` [(token, logit change)] largest first and
            ``suppressed`` most negative first, changes rounded to 6 decimals.
    """
    feature = sae.check_feature(feature)
    sae.check_for(lm)
    if "mlm" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has no masked-LM head: logit weights need one (bundled-mlm has).")
    head = mlm_head(lm)
    base = sae.b_dec.to(lm.device, torch.float32)  # [d_model]
    scale = float(base.norm()) if scale is None else float(scale)
    row = sae.W_dec[feature].to(lm.device, torch.float32)  # [d_model]
    direction = row / row.norm().clamp_min(1e-12)  # [d_model], unit norm
    both = torch.stack([base, base + scale * direction]).to(lm.dtype)  # [2, d_model]
    logits = head(both).float()  # [2, vocab]
    change = (logits[1] - logits[0]).cpu().numpy()  # [vocab]
    order = np.argsort(change)
    tokens = lm.tokenizer.convert_ids_to_tokens
    up = [(tokens(int(i)), round(float(change[i]), 6)) for i in order[::-1][:top]]
    down = [(tokens(int(i)), round(float(change[i]), 6)) for i in order[:top]]
    return LogitWeights(feature, float(scale), up, down)


@torch.no_grad()
def nearest_features(sae: TopKSAE, feature: int, top: int = 10) -> list[tuple[int, float]]:
    """(feature, cosine) of the ``top`` decoder directions closest to ``feature``'s, itself left out.

    Args:
        sae: the SAE.
        feature: the feature, from 0.
        top: features returned (at most every other feature).

    Returns:
        [(feature, cosine of the decoder rows)], the closest first, cosines rounded to 6 decimals.
    """
    feature = sae.check_feature(feature)
    rows = sae.W_dec / sae.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)  # [d_sae, d_in]
    cosine = rows @ rows[feature]  # [d_sae]
    cosine[feature] = -2.0
    values, indices = cosine.topk(min(top, sae.d_sae - 1))
    return [(int(i), round(float(v), 6)) for v, i in zip(values, indices)]


def promoted_id(lm: LoadedModel, token: str) -> int:
    """The vocabulary id of ``token`` for ``features_promoting``; one line for a model without a masked-LM head, an
    empty word, one of several pieces or one the vocabulary lacks (read from the tokenizer, before any pass)."""
    if "mlm" not in lm.outputs:
        raise BertScopeError(f"{lm.name} has no masked-LM head: searching features by the token they promote needs "
                             "one (bundled-mlm has).")
    if not token.strip():
        raise BertScopeError("The word is empty: give one the vocabulary holds whole.")
    ids = lm.tokenizer(token.strip(), add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        pieces = lm.tokenizer.convert_ids_to_tokens(ids)
        raise BertScopeError(f"{token.strip()!r} is {len(ids)} word pieces ({' '.join(pieces)}) for {lm.name}: "
                             "give one the vocabulary holds whole.")
    if ids[0] == lm.tokenizer.unk_token_id:
        raise BertScopeError(f"{token.strip()!r} is not in {lm.name}'s vocabulary (it reads as "
                             f"{lm.tokenizer.unk_token}).")
    return int(ids[0])


@torch.no_grad()
def features_promoting(lm: LoadedModel, sae: TopKSAE, token: str, top: int = 20, scale: float | None = None,
                       chunk: int = 256) -> list[tuple[int, float]]:
    """(feature, logit change) of the features whose direction raises ``token``'s logit most (the
    same reading as ``logit_weights``, for every feature, one vocabulary column kept). ``token`` is a
    word the tokenizer keeps whole.

    Args:
        lm: a model with a masked-LM head, the one the SAE was made for.
        sae: the SAE.
        token: one word piece of the vocabulary (surrounding spaces stripped); a word split into pieces, or read as
            the unknown token, is refused.
        top: features returned.
        scale: how far along each decoder row's direction (scaled to unit length) from b_dec the head reads
            (None: ‖b_dec‖).
        chunk: decoder rows read by the head at once.

    Returns:
        [(feature, logit change)], the largest change first, changes rounded to 6 decimals.
    """
    sae.check_for(lm)
    ids = [promoted_id(lm, token)]
    head = mlm_head(lm)
    base = sae.b_dec.to(lm.device, torch.float32)  # [d_model]
    scale = float(base.norm()) if scale is None else float(scale)
    reference = head(base[None].to(lm.dtype)).float()[0, ids[0]]
    change = torch.empty(sae.d_sae)
    for start in range(0, sae.d_sae, chunk):
        rows = sae.W_dec[start:start + chunk].to(lm.device, torch.float32)  # [chunk, d_model]
        rows = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)  # unit rows, as logit_weights reads them
        change[start:start + len(rows)] = (head((base + scale * rows).to(lm.dtype)).float()[:, ids[0]]
                                           - reference).cpu()
    values, order = change.topk(min(top, sae.d_sae))
    return [(int(f), round(float(v), 6)) for v, f in zip(values, order)]
