"""Layer-wise predictions: the model's MLM head applied to every layer's hidden state.

The "logit lens" (nostalgebraist 2020) for encoders: read each layer's hidden state at a mask
position through the trained MLM head. Only the last layer was trained to feed that head, so
earlier layers' readings show when the answer becomes linearly available to it, not what
those layers "predict".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.mlm.fill_mask import FillMaskResult, Prediction, top_predictions
from bertscope.runtime.families import family_of, has_record


@dataclass(frozen=True)
class LayerReading:
    layer: int  # hidden state: 0 = the embeddings, l = block l - 1's output (core.layers)
    top: list[Prediction]
    final_rank: int  # rank (1 = top) of the last layer's best token at this layer


def mlm_head(lm: LoadedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """The encoder's output [..., H] -> vocabulary logits [..., V]: the modules the family record names
    (``Family.mlm_head``), applied in turn."""
    found = has_record(lm.model_type) and family_of(lm.model_type).mlm_head
    try:
        modules = [lm.model.get_submodule(path) for path in found or ()]
    except AttributeError:
        modules = []
    if not modules:
        raise BertScopeError(f"Layer-wise predictions are not supported for {type(lm.model).__name__}.")

    def head(hidden: torch.Tensor) -> torch.Tensor:
        for module in modules:
            hidden = module(hidden)
        return hidden

    return head


def layerwise_predictions(lm: LoadedModel, result: FillMaskResult, mask_index: int = 0,
                          top_k: int = 5) -> list[LayerReading]:
    """Top tokens per layer at one mask, and where the final answer ranks at each layer.

    Args:
        lm: the model ``result`` was read with.
        result: a ``fill_mask`` result (its pass keeps every hidden state).
        mask_index: which mask, from 0 in text order.
        top_k: tokens kept at each hidden state.

    Returns:
        One ``LayerReading`` a hidden state: ``layer`` (0 = the embeddings, l = layer l - 1's output), its top-k
            tokens by the masked-LM head, and the rank (1 = top) there of the last layer's best token.
    """
    if not 0 <= mask_index < len(result.mask_positions):
        raise BertScopeError(f"Mask {mask_index + 1} does not exist: the text has "
                             f"{len(result.mask_positions)} mask(s).")
    position = result.mask_positions[mask_index]
    hidden = torch.from_numpy(result.inspection.hidden_states[:, position]).to(lm.device, lm.dtype)  # [layer+1, H]
    head = mlm_head(lm)
    with torch.inference_mode():
        family = family_of(lm.model_type)
        if family.final_norm:  # pre-LayerNorm: the residual stream reaches the head through the final norm,
            norm = lm.model.base_model.get_submodule(family.final_norm)  # as TransformerLens's apply_ln does
            hidden = torch.cat([norm(hidden[:-1]), hidden[-1:]])  # (the last state has had it already)
        logits = head(hidden).float().cpu().numpy()  # [layer+1, V]
    # the head read at the last layer must reproduce the model's own logits
    if not np.allclose(logits[-1], result.inspection.logits_at(position), atol=1e-3, rtol=1e-3):
        raise BertScopeError(f"{type(lm.model).__name__}'s MLM head could not be isolated.")
    final = int(np.argmax(logits[-1]))
    readings = []
    for layer, row in enumerate(logits):
        rank = int((row > row[final]).sum()) + 1
        readings.append(LayerReading(layer, top_predictions(row, top_k, lm.tokenizer), rank))
    return readings
