"""A model's config without its weights: the presets' configs ship with BertScope
(``bertscope/configs/``, so parameter counts and random full-size models work offline); any
other name is read from its folder, the local Hugging Face cache or the hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertscope.runtime.hf import load_hf_config
from bertscope.sources.multilingual_e5 import config_without_weights
from bertscope.sources.presets import BUNDLED_MULTILINGUAL
from bertscope.sources.resolve import resolve_source

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def shipped_config_path(name: str) -> Path:
    return CONFIG_DIR / (name.replace("/", "__") + ".json")


def model_config(name: str) -> Any:
    """A preset's shipped config, else the config of a hub id / folder / bundled model (no weights)."""
    from transformers import AutoConfig

    shipped = shipped_config_path(name.strip()) if name and name.strip() else None
    if shipped is not None and shipped.is_file():  # presets count offline
        data = json.loads(shipped.read_text())
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)
    if name and name.strip() == BUNDLED_MULTILINGUAL:  # from the file header: no conversion needed
        return config_without_weights()
    source, local_only = resolve_source(name)
    return load_hf_config(name, source, local_only)
