"""The features that fire on each word piece of a text: one pass through the hook point the SAE
reads, every token kept ([CLS] and [SEP] too, as ``attention --json`` lists them)."""

from __future__ import annotations

from pathlib import Path

import torch

from bertscope.core.hooked_pass import check_text, model_inputs
from bertscope.core.models import LoadedModel
from bertscope.core.tokens import readable_tokens
from bertscope.features.activations import check_layer, resid_post
from bertscope.features.sae import TopKSAE


class _Reached(Exception):
    """Raised by the hook once the layer is read: the blocks above it need not run."""


def layer_outputs(lm: LoadedModel, feed: dict, layers) -> dict[int, torch.Tensor]:
    """{layer: [batch, token, d_model] its output}, the pass stopped at the highest of ``layers``
    (TransformerLens's ``stop_at_layer``): the blocks above it are never run."""
    wanted = sorted(set(int(layer) for layer in layers))
    kept: dict[int, torch.Tensor] = {}

    def reader(layer: int):
        def read(x: torch.Tensor, hook) -> None:
            kept[layer] = x.detach()
            if layer == wanted[-1]:
                raise _Reached
        return read

    try:
        lm.run(feed, hooks={resid_post(layer): reader(layer) for layer in wanted}, encoder_only=True)
    except _Reached:
        pass
    return kept


def layer_output(lm: LoadedModel, feed: dict, layer: int) -> torch.Tensor:
    """[batch, token, d_model] layer ``layer``'s output, the pass stopped there."""
    return layer_outputs(lm, feed, [layer])[layer]


@torch.no_grad()
def active_features(lm: LoadedModel, sae: TopKSAE, text: str, layer: int, folder: str | Path | None = None) -> dict:
    """``{"sae": {path, hook, d_in, d_sae, k}, "tokens": [{token, features: [{feature, activation}]}]}``,
    each token's firing features strongest first.

    Args:
        lm: the model the SAE was made for.
        sae: the SAE of layer ``layer``'s output (``blocks.{layer}.hook_resid_post``).
        text: the text, cut at the model's maximum length.
        layer: the layer, from 0 (the embeddings are not a layer here).
        folder: where the SAE was read from, reported as ``path`` (None: null).

    Returns:
        The dict above: the SAE's hook, widths and k (null for an SAE that is not TopK); one entry per token,
            [CLS] and [SEP] included, each with the features that fire on it (index from 0, activation to 6 decimals).
    """
    layer = check_layer(lm, layer)
    name = resid_post(layer)
    sae.check_for(lm, name)
    enc = lm.tokenizer(check_text(text), return_tensors="pt", truncation=True, max_length=lm.max_length)
    ids = enc["input_ids"][0].tolist()
    special = lm.tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True)
    tokens = readable_tokens(lm.tokenizer, ids, enc.word_ids(0), [bool(s) for s in special])
    feed = model_inputs(lm, enc)
    latents = sae.encode(layer_output(lm, feed, layer)[0].float())  # [token, d_sae]
    out = []
    for t, row in enumerate(latents):
        on = torch.nonzero(row > 0).flatten()
        order = on[row[on].argsort(descending=True)]
        out.append({"token": tokens[t], "features": [{"feature": int(f), "activation": round(float(row[f]), 6)}
                                                     for f in order.tolist()]})
    return {"sae": {"path": str(folder) if folder is not None else None, "hook": name, "d_in": sae.d_in,
                    "d_sae": sae.d_sae, "k": sae.k if sae.architecture == "topk" else None},
            "tokens": out}
