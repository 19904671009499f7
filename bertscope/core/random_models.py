"""Randomly initialised models of real sizes, for benchmarks and full-size tests.

    >>> import tempfile
    >>> from bertscope import load_model
    >>> folder = save_random_model("distilbert-base-uncased", tempfile.mkdtemp())
    >>> lm = load_model(folder)
    >>> lm.architecture, round(lm.parameter_count() / 1e6), sorted(lm.outputs)   # 66 M weights and the MLM head
    ('DistilBertForMaskedLM', 67, ['mlm'])

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

import torch

from bertscope.errors import BertScopeError
from bertscope.sources.configs import model_config as load_config
from bertscope.sources.minilm import bundled_tokenizer_dir

HEADS = ("pretraining", "mlm", "none")


def _tokenizer(vocab_size: int):
    from transformers import BertTokenizerFast

    folder = bundled_tokenizer_dir()
    if folder is not None:
        tokenizer = BertTokenizerFast.from_pretrained(folder)
        if len(tokenizer) <= vocab_size:
            return tokenizer
    chars = sorted(set(string.ascii_lowercase + string.digits + string.punctuation))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars)]
    vocab += [f"[unused{i}]" for i in range(vocab_size - len(vocab))]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vocab.txt"
        path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
        return BertTokenizerFast(vocab_file=str(path), do_lower_case=True)


def save_random_model(config_name: str, folder: str | Path, heads: str = "pretraining", seed: int = 0) -> str:
    """Write a random BERT-family model of ``config_name``'s shapes to ``folder``; returns it.

    ``heads``: "pretraining" (MLM + NSP where the family has NSP), "mlm" or "none".
    """
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining

    if heads not in HEADS:
        raise BertScopeError(f"Unknown heads {heads!r}: use one of {', '.join(HEADS)}.")
    config = load_config(config_name)
    config.architectures = None
    auto = {"pretraining": AutoModelForPreTraining, "mlm": AutoModelForMaskedLM, "none": AutoModel}[heads]
    torch.manual_seed(seed)
    model = auto.from_config(config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    _tokenizer(config.vocab_size).save_pretrained(folder)
    return str(folder)
