"""transformers, as every other module needs it: quiet loads, a config and a fast tokenizer read
with one clear error, and the most tokens a model takes (the families are ``runtime.families``).

Nothing here picks a model or reads weights (``core.models`` does); nothing here ever enables
``trust_remote_code``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from bertscope.errors import BertScopeError
from bertscope.runtime.families import encoder_types, position_offset

_Switch = Callable[[], None]  # transformers' logging switches, which it leaves unannotated


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load reports and progress bars for the duration of a load."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    cast(_Switch, hf_logging.set_verbosity_error)()
    cast(_Switch, hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            cast(_Switch, hf_logging.enable_progress_bar)()


def load_for_training(auto: Any, source: str, local_only: bool, **options: Any) -> Any:
    """``auto.from_pretrained`` for a training run: float32, never remote code, and SDPA attention where the
    class has it (eager where it does not: DeBERTa-v2's disentangled attention)."""
    import torch

    settings = dict(local_files_only=local_only, trust_remote_code=False, dtype=torch.float32, **options)
    with quiet_transformers():
        try:
            return auto.from_pretrained(source, attn_implementation="sdpa", **settings)
        except ValueError as err:
            if "scaled_dot_product_attention" not in str(err):
                raise
            return auto.from_pretrained(source, attn_implementation="eager", **settings)


def explain_load_error(name: str, local_only: bool, err: Exception) -> BertScopeError:
    """One line a user can act on, for whatever transformers raised while loading ``name``."""
    text = str(err)
    if "trust_remote_code" in text:
        return BertScopeError(
            f"{name} needs its own code (trust_remote_code), which BertScope never runs: "
            "choose a standard encoder."
        )
    if local_only and not Path(name).is_dir():
        return BertScopeError(
            f"{name} is not in the local Hugging Face cache and the hub is unreachable, so whether it exists "
            f"cannot be checked: check the id's spelling (organisation/name), download it where there is network "
            f"(`hf download {name}`), or choose a model that ships with BertScope (bundled-mlm).",
        )
    if "model.safetensors" in text:  # use_safetensors=True found only a pickled checkpoint, or none
        return BertScopeError(
            f"{name} has no safetensors weights (model.safetensors): BertScope never opens pickled weights "
            "(pytorch_model.bin, *.pt), which can run code when read; save the model with `save_pretrained` "
            "(safetensors is transformers' default) and load that folder."
        )
    first_line = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return BertScopeError(f"Could not load {name}: {first_line}")


def load_hf_config(name: str, source: str, local_only: bool) -> Any:
    """``source``'s config; refuses remote code and anything that is not a BERT-family encoder."""
    from transformers import AutoConfig

    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(
                source, local_files_only=local_only, trust_remote_code=False
            )
    except (OSError, ValueError, KeyError) as err:
        raise explain_load_error(name, local_only, err) from err
    if getattr(config, "auto_map", None):
        raise BertScopeError(
            f"{name} needs its own code (trust_remote_code), which BertScope never runs: "
            "choose a standard encoder."
        )
    if config.model_type not in encoder_types():
        kind = "an encoder-decoder" if getattr(config, "is_encoder_decoder", False) else "not"
        raise BertScopeError(
            f"{name} is a {config.model_type} model, {kind} a BERT-family encoder: "
            "choose e.g. bert-base-uncased, roberta-base or bundled."
        )
    return config


def load_hf_tokenizer(name: str, source: str, local_only: bool) -> Any:
    """``source``'s fast tokenizer (word ids and character offsets need one)."""
    from transformers import AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(
                source, local_files_only=local_only, trust_remote_code=False
            )
    except (OSError, ValueError, KeyError) as err:
        raise explain_load_error(name, local_only, err) from err
    if not getattr(tokenizer, "is_fast", False):
        raise BertScopeError(
            f"{name} has no fast tokenizer, so words cannot be mapped to pieces: "
            "save a tokenizer.json with the model."
        )
    return tokenizer


def max_input_length(config: Any, tokenizer: Any) -> int:
    """Most tokens the model takes in one input, special tokens included."""
    limits = []
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        limits.append(positions - position_offset(config.model_type))
    declared = getattr(tokenizer, "model_max_length", None)
    if declared and declared < 1_000_000:  # unset lengths are reported as 1e30
        limits.append(int(declared))
    return min(limits) if limits else 512
