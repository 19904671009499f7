"""Where a model's tuned lens is: the translators shipped with BertScope (``SHIPPED``, the only list), one a
user trained into the user cache (``bertscope train-tuned-lens MODEL`` writes there by default), or a folder."""

from __future__ import annotations

import re
from pathlib import Path

from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.lenses.tuned import TunedLens, load_lens

DATA = Path(__file__).resolve().parents[1] / "data"
SHIPPED = {"bundled-mlm": DATA / "bundled_mlm_lens", "bundled-sentiment": DATA / "bundled_sentiment_lens"}


def trained_folder(model_name: str) -> Path:
    """Where ``train-tuned-lens`` puts a model's lens unless told (the user cache, one folder a model)."""
    from bertscope.runtime.user_cache import user_cache_dir

    return user_cache_dir() / "lenses" / re.sub(r"[^A-Za-z0-9._-]+", "_", model_name).strip("._")


def find_lens(lm: LoadedModel, folder: str | Path | None = None) -> TunedLens:
    """``folder``'s lens, else the one shipped for ``lm``, else the one trained into the user cache; else one line
    naming the command that trains it."""
    if folder is not None:
        return load_lens(folder, lm)
    for candidate in (SHIPPED.get(lm.name), trained_folder(lm.name)):
        if candidate is not None and (candidate / "lens.json").is_file():
            return load_lens(candidate, lm)
    shipped = ", ".join(SHIPPED)
    raise BertScopeError(f"No tuned lens for {lm.name} (shipped for {shipped}): train one with "
                         f"`bertscope train-tuned-lens {lm.name}` (a few minutes on a CPU).")


def has_lens(lm: LoadedModel) -> bool:
    return any(c is not None and (c / "lens.json").is_file() for c in (SHIPPED.get(lm.name), trained_folder(lm.name)))
