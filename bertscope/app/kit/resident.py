"""The models this process holds, shared read-only by every session: at most ``max_models()``
(``BERTSCOPE_MAX_MODELS``: 2 on a hosted demo, 4 otherwise), a running training job's own copy counted among
them, the least recently used dropped first. Two sessions asking for the same model load it once."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import streamlit as st

from bertscope.app.kit.limits import demo
from bertscope.core.models import LoadedModel


def max_models() -> int:
    """BERTSCOPE_MAX_MODELS (read at use), at least 1."""
    raw = os.environ.get("BERTSCOPE_MAX_MODELS", "").strip()
    return max(1, int(raw)) if raw.isdigit() else (2 if demo() else 4)


class Hold:
    """A training run's place among the resident models, until ``release`` (idempotent)."""

    def __init__(self, models: ResidentModels) -> None:
        self._models, self._held = models, True

    def release(self) -> None:
        with self._models.lock:
            if self._held:
                self._held = False
                self._models.held -= 1


class ResidentModels:
    """Loaded models by key, least recently used first; ``held`` places taken by training runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.models: OrderedDict[Hashable, LoadedModel] = OrderedDict()
        self.loading: dict[Hashable, threading.Lock] = {}
        self.held = 0

    def get(self, key: Hashable) -> LoadedModel | None:
        """The model if it is resident (now the most recently used), else None."""
        with self.lock:
            if key in self.models:
                self.models.move_to_end(key)
                return self.models[key]
            return None

    def _fit(self, room: int) -> None:
        """Drop the least recently used until ``room`` more fit beside the held places (one model always stays:
        the pages need one)."""
        while self.models and len(self.models) + self.held + room > max(max_models(), self.held + 1):
            self.models.popitem(last=False)

    def load(self, key: Hashable, loader: Callable[[], LoadedModel]) -> LoadedModel:
        """The model of ``key``: resident, or loaded now by ``loader`` (once, whoever else asks meanwhile)."""
        with self.lock:
            gate = self.loading.setdefault(key, threading.Lock())
        with gate:
            try:
                found = self.get(key)
                if found is not None:
                    return found
                lm = loader()
                with self.lock:
                    self._fit(1)
                    self.models[key] = lm
                return lm
            finally:
                with self.lock:
                    self.loading.pop(key, None)

    def hold(self) -> Hold:
        """A place for a training run's own copy of a model, taken from the resident ones."""
        with self.lock:
            self.held += 1
            self._fit(0)
        return Hold(self)

    def __len__(self) -> int:
        with self.lock:
            return len(self.models) + self.held


@st.cache_resource(show_spinner=False)
def resident_models() -> ResidentModels:
    """The one set of this process (shared by every session)."""
    return ResidentModels()
