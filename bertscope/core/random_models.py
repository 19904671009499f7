"""Randomly initialised models of real sizes, for benchmarks and full-size tests.

    >>> import tempfile
    >>> from bertscope import load_model
    >>> folder = save_random_model("distilbert-base-uncased", tempfile.mkdtemp())
    >>> lm = load_model(folder)
    >>> lm.architecture, round(lm.parameter_count() / 1e6), sorted(lm.outputs)   # 66 M weights and the MLM head
    ('DistilBertForMaskedLM', 67, ['mlm'])
    >>> tiny = load_model(save_random_model("answerdotai/ModernBERT-base", tempfile.mkdtemp(), size="tiny"))
    >>> tiny.architecture, tiny.num_layers, tiny.hidden_size
    ('ModernBertForMaskedLM', 3, 32)

A forward pass costs the same whatever the weights' values, so a random model built from a
shipped config (``bertscope/configs/``) measures time, memory and bytes sent at BERT's real
operating point without any download. The tokenizer is the bundled model's
bert-base-uncased vocabulary when that package is installed, else a generated WordPiece
vocabulary (characters and their ``##`` continuations, padded to the config's size): text
then splits into more pieces, which only matters for the length of a given text.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.families import pair_head
from bertscope.runtime.hf import quiet_transformers
from bertscope.sources.configs import model_config as load_config
from bertscope.sources.minilm import bundled_tokenizer_dir

HEADS = ("pretraining", "mlm", "none")
SIZES = ("real", "tiny")
# a tiny model of any family: what the family tests run (the vocabulary is the tokenizer's)
TINY = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 3, "intermediate_size": 48,
        "embedding_size": 16, "max_position_embeddings": 64, "local_attention": 8}


def _tokenizer(vocab_size: int | None) -> Any:
    """The bundled bert-base-uncased WordPiece tokenizer when the config's vocabulary holds it (or any
    vocabulary does: ``vocab_size`` None), else a generated one of exactly ``vocab_size`` pieces."""
    from transformers import BertTokenizer
    from transformers.models.bert.tokenization_bert import BertTokenizerFast  # not among transformers' typed exports

    bundled = bundled_tokenizer_dir()
    if bundled is not None:
        tokenizer = BertTokenizerFast.from_pretrained(bundled)
        if vocab_size is None or len(tokenizer) <= vocab_size:
            return tokenizer
    vocab_size = vocab_size or 1000
    chars = sorted(set(string.ascii_lowercase + string.digits + string.punctuation))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars)]
    vocab += [f"[unused{i}]" for i in range(vocab_size - len(vocab))]
    return BertTokenizer(vocab={piece: i for i, piece in enumerate(vocab)}, do_lower_case=True)


def tiny_config(config: Any) -> Any:
    """``config`` at ``TINY`` size (in place, and returned), whatever the family calls its dimensions."""
    for key, value in TINY.items():
        mapped = getattr(config, "attribute_map", {}).get(key, key)
        if hasattr(config, mapped) or key in ("hidden_size", "num_attention_heads", "num_hidden_layers"):
            setattr(config, key, value)
    if getattr(config, "model_type", "") == "distilbert":
        config.hidden_dim = TINY["intermediate_size"]
    if getattr(config, "pooler_hidden_size", None):  # DeBERTa's pooler reads its own width
        config.pooler_hidden_size = TINY["hidden_size"]
    if hasattr(config, "layer_types") and getattr(config, "layer_types", None):  # ModernBERT: global every 3rd
        every = getattr(config, "global_attn_every_n_layers", 3) or 3
        config.layer_types = ["full_attention" if i % every == 0 else "sliding_attention"
                              for i in range(config.num_hidden_layers)]
    return config


def save_random_model(config_name: str, folder: str | Path, heads: str = "pretraining", seed: int = 0,
                      size: str = "real") -> str:
    """Write a random BERT-family model of ``config_name``'s shapes to ``folder``; returns it.

    ``heads``: "pretraining" (MLM + the family's sentence-pair layer where it has one), "mlm" or
    "none". ``size="tiny"``: 3 layers, 4 heads, 32 wide (the family tests' models)."""
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining

    if heads not in HEADS:
        raise BertScopeError(f"Unknown heads {heads!r}: use one of {', '.join(HEADS)}.")
    if size not in SIZES:
        raise BertScopeError(f"Unknown size {size!r}: use one of {', '.join(SIZES)}.")
    config = load_config(config_name)
    config.architectures = None
    if size == "tiny":
        tiny_config(config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(None if size == "tiny" else config.vocab_size)
    if size == "tiny":
        config.vocab_size = len(tokenizer)
    for token in ("pad", "bos", "eos", "cls", "sep"):  # the config's special ids are the tokenizer's
        key = f"{token}_token_id"
        if getattr(config, key, None) is not None:
            found = getattr(tokenizer, key, None)
            setattr(config, key, found if found is not None else tokenizer.cls_token_id if token == "bos" else
                    tokenizer.sep_token_id)
    if heads == "pretraining" and pair_head(config.model_type) is None:
        heads = "mlm"  # the family's pretraining class is its masked-LM class
    # Any: the Auto classes' from_config is unannotated
    auto: Any = {"pretraining": AutoModelForPreTraining, "mlm": AutoModelForMaskedLM, "none": AutoModel}[heads]
    torch.manual_seed(seed)
    model = auto.from_config(config)
    with quiet_transformers():
        model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
