"""Interventions on the loaded model's own modules, with forward hooks (nothing re-implemented).

- ``HeadEdit``: a pre-hook on each block's attention output projection (``W_O``), whose input is the
  heads' contexts side by side, ``[batch, token, head x d_head]``: an edit sees each layer's
  ``[batch, token, head, d_head]`` and may return a new one. Gating, zeroing or replacing a head's
  slice there is exactly what Hugging Face's old ``head_mask`` did to ``A_h V_h`` (transformers 5
  has no ``head_mask``).
- ``StateEdit``: a forward hook on whatever produces each hidden state (the embeddings, each
  block): an edit sees hidden state s, ``[batch, token, dim]``, and may return a new one.

The model is shared by every session of a server: a hook acts only in the thread that entered
the context (as the ALTI hooks do). ALBERT calls one shared layer L times: calls are counted, so
"layer l" is the l-th call of a pass. Families: BERT, RoBERTa/XLM-R, ELECTRA, ALBERT, DistilBERT
(``core.block_modules``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from bertscope.core.block_modules import block_parts, state_producers
from bertscope.core.models import LoadedModel

HeadEditFn = Callable[[int, torch.Tensor], "torch.Tensor | None"]  # (layer, [b, t, head, d]) -> new or None
StateEditFn = Callable[[int, torch.Tensor], "torch.Tensor | None"]  # (hidden state, [b, t, dim]) -> new or None


class _Hooks:
    """Registered on enter, removed on exit; acts in the entering thread only; counts calls."""

    def __init__(self, n_calls_per_pass: int) -> None:
        self.per_pass = n_calls_per_pass
        self.calls = 0
        self.owner = threading.get_ident()
        self.handles: list[Any] = []

    def mine(self) -> bool:
        return threading.get_ident() == self.owner

    def next_index(self) -> int:
        index = self.calls % self.per_pass
        self.calls += 1
        return index

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


class HeadEdit(_Hooks):
    """``with HeadEdit(lm, edit): ...`` runs passes with ``edit(layer, context)`` applied."""

    def __init__(self, lm: LoadedModel, edit: HeadEditFn) -> None:
        super().__init__(lm.num_layers)
        self.lm, self.edit = lm, edit
        self.heads = lm.num_heads

    def __enter__(self) -> "HeadEdit":
        self.owner = threading.get_ident()
        self.calls = 0
        for module in {id(p.output): p.output for p in block_parts(self.lm)}.values():
            self.handles.append(module.register_forward_pre_hook(self._hook))
        return self

    def _hook(self, module: Any, args: tuple) -> tuple | None:
        if not self.mine():
            return None
        layer = self.next_index()
        x = args[0]  # [batch, token, head x d_head]
        context = x.reshape(*x.shape[:-1], self.heads, x.shape[-1] // self.heads)  # [batch, token, head, d_head]
        new = self.edit(layer, context)
        if new is None:
            return None
        return (new.reshape(x.shape), *args[1:])


class StateEdit(_Hooks):
    """``with StateEdit(lm, edit): ...`` runs passes with ``edit(state, hidden)`` applied to hidden
    state ``state`` (0 = the embeddings, l + 1 = layer l's output)."""

    def __init__(self, lm: LoadedModel, edit: StateEditFn) -> None:
        super().__init__(lm.num_layers + 1)
        self.lm, self.edit = lm, edit

    def __enter__(self) -> "StateEdit":
        self.owner = threading.get_ident()
        self.calls = 0
        modules = state_producers(self.lm)
        first = {}
        for index, module in enumerate(modules):  # one hook per distinct module; ALBERT's is shared
            first.setdefault(id(module), (module, index))
        for module, _ in first.values():
            self.handles.append(module.register_forward_hook(self._hook))
        return self

    def _hook(self, module: Any, args: tuple, output: Any) -> Any:
        if not self.mine():
            return None
        state = self.next_index()
        hidden = output[0] if isinstance(output, tuple) else output  # [batch, token, dim]
        new = self.edit(state, hidden)
        if new is None:
            return None
        return (new, *output[1:]) if isinstance(output, tuple) else new
