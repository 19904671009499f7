"""Switch a feature off, or steer with it, through the hook point its SAE reads
(``blocks.{l}.hook_resid_post``), and watch a decision change.

- ``remove``: the feature's own contribution is taken out of the layer's output,
  x' = x - z_f(x) W_dec[f] (z_f: its activation on that token, 0 where it does not fire), so the
  SAE's reconstruction error and every other feature stay; where it does not fire nothing changes.
- ``steer``: x' = x + strength W_dec[f] at the [MASK] tokens (``at="masks"``, the default: the
  prediction read there is what moves) or at every token but [CLS] and [SEP] (``at="all"``, as
  Neuronpedia steers a decoder's every position). The direction is W_dec's row at unit norm (a TopK
  SAE's rows are; a ReLU or JumpReLU SAE from elsewhere need not be), so ``strength`` is
  in the layer's own units (bundled-mlm's hidden states have norms about 10).

    >>> from bertscope import load_model
    >>> from bertscope.features import load_sae, shipped_saes
    >>> lm = load_model("bundled-mlm")
    >>> sae = load_sae(shipped_saes("bundled-mlm") / "layer_01")    # feature 334 promotes should, shall, must
    >>> r = edit_features(lm, "You [MASK] go home now.", {1: sae}, [FeatureEdit(1, 334, "steer", 6.0)])
    >>> [(p.token, round(p.score, 2)) for p in r.masks[0].before[:3]]
    [('will', 0.23), ('can', 0.21), ('could', 0.06)]
    >>> [(p.token, round(p.score, 2)) for p in r.masks[0].after[:3]]    # what the direction moved
    [('will', 0.15), ('should', 0.11), ('can', 0.1)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from bertscope.attribution.gradients import Target
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.sae import TopKSAE
from bertscope.interventions.ablation import MaskChange, decision_change

EditMode = Literal["remove", "steer"]
EDIT_MODES = ("remove", "steer")
STEER_AT = ("masks", "all")
MAX_EDITS = 64


@dataclass(frozen=True)
class FeatureEdit:
    layer: int
    feature: int
    mode: EditMode = "remove"
    strength: float = 0.0  # steer only: how far along the direction
    at: str = "masks"  # steer only: "masks" or "all" (every token but [CLS] and [SEP])

    def to_json(self) -> dict:
        out = {"layer": self.layer, "feature": self.feature, "mode": self.mode}
        if self.mode == "steer":
            out.update(strength=self.strength, at=self.at)
        return out


def parse_feature_edits(spec: str, steer: float | None = None, at: str = "masks") -> list[FeatureEdit]:
    """``"2:342,3:17"`` (layer:feature, both from 0) -> removals; with ``steer``, steering at that strength."""
    edits = []
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        layer, colon, feature = part.strip().partition(":")
        if not colon or not layer.strip().isdigit() or not feature.strip().isdigit():
            raise BertScopeError(f"{part.strip()!r} is not LAYER:FEATURE: write features as 2:342,3:17 (from 0).")
        edits.append(FeatureEdit(int(layer), int(feature), "steer" if steer is not None else "remove",
                                 float(steer or 0.0), at))
    if not edits:
        raise BertScopeError("Give at least one feature as LAYER:FEATURE, e.g. 2:342.")
    return edits


def check_edits(lm: LoadedModel, saes: dict[int, TopKSAE], edits: Sequence[FeatureEdit]) -> list[FeatureEdit]:
    if not edits:
        raise BertScopeError("No feature to edit.")
    if len(edits) > MAX_EDITS:
        raise BertScopeError(f"At most {MAX_EDITS} feature edits at once.")
    for e in edits:
        layer = check_layer(lm, e.layer)
        if e.mode not in EDIT_MODES:
            raise BertScopeError(f"Unknown feature edit {e.mode!r}: use remove or steer.")
        if layer not in saes:
            have = ", ".join(map(str, sorted(saes))) or "none"
            raise BertScopeError(f"No SAE for layer {layer} (the SAEs given read layers {have}).")
        saes[layer].check_for(lm, resid_post(layer))
        saes[layer].check_feature(e.feature)
        if e.mode == "steer" and e.at not in STEER_AT:
            raise BertScopeError(f"Steer at {e.at!r}? Use masks or all.")
        if e.mode == "steer" and not -1000 <= e.strength <= 1000:
            raise BertScopeError(f"Steering strength {e.strength} is out of range (-1000 to 1000).")
    return list(edits)


def feature_edit(lm: LoadedModel, saes: dict[int, TopKSAE], edits: Sequence[FeatureEdit],
                 places: dict[str, torch.Tensor] | None = None):
    """The context manager that applies ``edits`` in every pass run inside it (this thread's).
    ``places``: {"masks", "all"} -> [batch, token] bool, where steering applies (default: everywhere)."""
    edits = list(dict.fromkeys(check_edits(lm, saes, edits)))  # the same edit twice is one edit
    by_layer: dict[int, list[FeatureEdit]] = {}
    for e in edits:
        by_layer.setdefault(e.layer, []).append(e)

    def hook_for(layer: int, chosen: list[FeatureEdit]):
        sae = saes[layer]

        def edit(x: torch.Tensor, hook) -> torch.Tensor:  # [batch, token, d_model]
            sae.to(x.device)
            removed = list(dict.fromkeys(e.feature for e in chosen if e.mode == "remove"))
            delta = torch.zeros_like(x, dtype=torch.float32)
            if removed:
                z = sae.encode(x.float())[..., removed]  # [batch, token, removed]
                delta -= z @ sae.W_dec[removed].float()  # their contributions
            for e in chosen:
                if e.mode == "steer":
                    row = sae.W_dec[e.feature].float()  # [d_model]
                    step = e.strength * row / row.norm().clamp_min(1e-12)  # a unit direction, whatever the SAE
                    place = (places or {}).get(e.at)
                    if place is None:
                        keep = torch.ones(x.shape[:2], device=x.device)  # [batch, token]: everywhere
                    elif tuple(place.shape) == tuple(x.shape[:2]):
                        keep = place.to(x.device).float()
                    else:
                        raise BertScopeError(f"The steering places are {tuple(place.shape)}, the pass "
                                             f"{tuple(x.shape[:2])}: steer on the text they were made for.")
                    delta += keep[..., None] * step
            return (x.float() + delta).to(x.dtype)

        return edit

    return lm.hooks({resid_post(layer): hook_for(layer, chosen) for layer, chosen in by_layer.items()})


@dataclass(frozen=True)
class FeatureEditResult:
    edits: tuple[FeatureEdit, ...]
    tokens: list[str]
    masks: list[MaskChange]
    decision: dict | None

    def to_json(self) -> dict:
        out = {"features": [e.to_json() for e in self.edits], "tokens": self.tokens}
        if self.decision is not None:
            out["decision"] = self.decision
        else:
            out["masks"] = [m.to_json() for m in self.masks]
        return out


@torch.no_grad()
def edit_features(lm: LoadedModel, text: str, saes: dict[int, TopKSAE], edits: Sequence[FeatureEdit],
                  pair: str | None = None, target: Target | None = None, top_k: int = 5) -> FeatureEditResult:
    """The decision on ``text`` intact, then with ``edits`` applied (the same reading as head ablation).

    Args:
        lm: the model the SAEs were made for.
        text: the text (a masked LM: with [MASK]; steering at the masks needs one).
        saes: {layer: the SAE of that layer's output}, every layer an edit names.
        edits: up to ``MAX_EDITS`` (64) ``FeatureEdit``: (layer, feature, "remove" or "steer", strength, where),
            layers and features from 0.
        pair: segment B, when a sentence-pair head is watched.
        target: the decision watched (default: the masked LM's predictions at every mask).
        top_k: predictions kept before and after, 1 to 100.

    Returns:
        A ``FeatureEditResult``: the edits, the tokens, and each mask's top-k before and after (with a
            ``POSITION:TOKEN`` target's probability), or the watched decision's probability before and after.
    """
    edits = check_edits(lm, saes, edits)
    places = _places(lm, text, pair)
    if any(e.mode == "steer" and e.at == "masks" for e in edits) and not bool(places["masks"].any()):
        raise BertScopeError("Steering at the masks needs a [MASK] in the text: put one in, or steer at every token.")
    tokens, masks, decision = decision_change(lm, text, feature_edit(lm, saes, edits, places),
                                              pair, target, top_k)
    return FeatureEditResult(tuple(edits), tokens, masks, decision)


def _places(lm: LoadedModel, text: str, pair: str | None) -> dict[str, torch.Tensor]:
    """{"masks": [1, token] the [MASK] tokens, "all": every token but the added specials}."""
    enc = lm.tokenizer(text, pair, truncation=True, max_length=lm.max_length, return_special_tokens_mask=True)
    ids = torch.tensor(enc["input_ids"])[None]
    added = torch.tensor(enc["special_tokens_mask"], dtype=torch.bool)[None]
    masks = ids == lm.tokenizer.mask_token_id if lm.tokenizer.mask_token_id is not None else torch.zeros_like(added)
    return {"masks": masks, "all": ~added | masks}
