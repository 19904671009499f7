"""BertScope's hook points beside TransformerLens 4's bridge on a post-LayerNorm encoder: which names read
the same Hugging Face tensor, and which share a name but not a meaning.

Measured on ``BertForMaskedLM`` (bundled-mlm and a random BERT-base) by the peers lane
(``peers/test_transformer_lens.py``); the docs' table (``docs/peers.md``) is this record.

    >>> SAME["blocks.{l}.hook_resid_post"]
    'blocks.{l}.hook_resid_post'
    >>> DIFFERENT["blocks.{l}.hook_resid_mid"][0]
    'output of attention.output.LayerNorm (the input of the feed-forward)'
"""

from __future__ import annotations

# BertScope's name -> the bridge's name for the same tensor ({l}: the layer)
SAME: dict[str, str] = {
    "embed": "hook_embed",  # the embeddings' output, after their LayerNorm (also the bridge's embed_ln.hook_out)
    **{f"blocks.{{l}}.{s}": f"blocks.{{l}}.{s}" for s in (
        "hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_pattern", "attn.hook_z",
        "mlp.hook_pre", "mlp.hook_post", "hook_mlp_out", "hook_resid_post")},
    "blocks.{l}.hook_attn_out": "blocks.{l}.attn.o.hook_out",
    "blocks.{l}.hook_resid_mid": "blocks.{l}.ln1.hook_out",
    "unembed.hook_in": "unembed.hook_in",
}

# a name both define with different tensors: name -> (BertScope's tensor, the bridge's tensor)
DIFFERENT: dict[str, tuple[str, str]] = {
    "blocks.{l}.hook_attn_out": (
        "output of attention.output.dense (W_O), before the residual and the LayerNorm",
        "output of attention (after attention.output.LayerNorm: BertScope's hook_resid_mid)"),
    "blocks.{l}.hook_resid_mid": (
        "output of attention.output.LayerNorm (the input of the feed-forward)",
        "input of output.LayerNorm: the feed-forward's output plus the residual (BertScope's hook_mlp_out + "
        "hook_resid_mid)"),
}

# read by one side only (the bridge's wrapper hooks, hook_in/hook_out of every module, are not listed)
ONLY_BERTSCOPE = ("blocks.{l}.attn.hook_result",)
# (ln_final is BERT's masked-LM head's LayerNorm there; BertScope's ln_final.hook_normalized is a pre-LayerNorm
# family's final norm, ModernBERT's: one name, two modules)
ONLY_BRIDGE = ("blocks.{l}.attn.hook_attn_scores", "hook_pos_embed", "ln_final.hook_normalized",
               "blocks.{l}.ln1.hook_scale", "blocks.{l}.ln2.hook_scale")


def at(name: str, layer: int) -> str:
    return name.replace("{l}", str(layer))
