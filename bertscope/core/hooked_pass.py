"""The one owner of a pass: the model's turn (its concurrency guard and attention kernel), the grad
mode, and the named hook points (``core.hook_points``) in and out. Every pass in ``bertscope`` runs
here; nothing else takes the guard, switches the kernel or registers a hook on the model.

    >>> from bertscope import load_model
    >>> lm = load_model("bundled")
    >>> out, cache = lm.run_with_cache("The bank of the river.", names=["blocks.3.hook_resid_post"])
    >>> cache["blocks.3.hook_resid_post"].shape                   # [batch, pos, d_model]
    torch.Size([1, 8, 384])
    >>> from bertscope.core.hook_points import zero_head
    >>> out = lm.run("The bank of the river.", hooks={"blocks.2.attn.hook_z": zero_head(5)})

As TransformerLens's ``run_with_hooks`` / ``run_with_cache`` (``HookedRootModule``): hooks live for
one pass (or a ``with lm.hooks({...}):`` block) and are removed on exit, also when the pass fails.
A turn is reentrant in its thread: a pass inside ``turn(lm)`` (a forward and its backward, several
passes that belong together) does not wait for itself.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

import torch

from bertscope.core.hook_points import HookFn, Hooks, blocks, calling_block, hook_names, hook_point, model_family
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import to_device
from bertscope.runtime.kernels import EAGER

_turns = threading.local()  # per thread: {id(model): the kernel its turn holds}
MAX_CHARS = 100_000  # beyond this even tokenising is wasteful: the model sees <= 512 tokens


def check_text(text: Any, what: str = "text") -> str:
    """``text`` when it has a word and at most MAX_CHARS characters, else one line saying which."""
    if not isinstance(text, str) or not text.strip():
        raise BertScopeError(f"The {what} is empty: type at least one word.")
    if len(text) > MAX_CHARS:
        raise BertScopeError(f"The {what} has {len(text):,} characters; the limit is {MAX_CHARS:,}.")
    return text


def _held() -> dict[int, str]:
    if not hasattr(_turns, "held"):
        _turns.held = {}
    return cast("dict[int, str]", _turns.held)


@contextlib.contextmanager
def turn(lm: Any, eager: bool = False) -> Iterator[None]:
    """This thread's turn on the shared model: its guard and one attention kernel (eager when
    attention weights are read). Reentrant: inside a turn, passes and nested turns go straight on.

    Args:
        lm: the model (a ``LoadedModel``).
        eager: hold the eager attention kernel, which returns attention weights (default: the model's fastest). A
            nested turn that asks for it inside a turn on the fast kernel is refused in one line.

    Returns:
        A context manager: the turn is held while inside it.

    Yields:
        None, once the guard is taken and the kernel set (at once inside a turn already held).
    """
    held = _held()
    key = id(lm.model)
    if key in held:
        if eager and held[key] != EAGER:
            raise BertScopeError("This pass reads attention weights inside a turn on the fast kernel: open the "
                                 "turn with eager=True.")
        yield
        return
    with lm.guard, lm.attention_kernel(eager):
        held[key] = EAGER if eager else lm.fast_attention
        try:
            yield
        finally:
            del held[key]


def _grad_mode(grad: bool | None) -> contextlib.AbstractContextManager[Any]:
    if grad is None:
        return contextlib.nullcontext()
    return torch.enable_grad() if grad else torch.inference_mode()


def model_inputs(lm: Any, enc: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of a tokenizer's encoding ``enc`` the model takes (``model_input_names``: not the special-tokens
    mask or the offsets a call asked for), on its device."""
    return {k: to_device(enc[k], lm.device) for k in lm.tokenizer.model_input_names if k in enc}


def feed_of(lm: Any, inputs: Any) -> dict[str, torch.Tensor]:
    """The model's inputs on its device: a text, a (text, pair) tuple, or a dict of tensors."""
    if isinstance(inputs, Mapping):
        return {k: to_device(v, lm.device) if v.device != lm.device else v for k, v in inputs.items()}
    text, pair = (inputs, None) if isinstance(inputs, str) else tuple(inputs)
    check_text(text)
    if pair is not None:
        check_text(pair, "pair")
    return model_inputs(lm, lm.tokenizer(text, pair, return_tensors="pt", truncation=True, max_length=lm.max_length))


def _hooks(lm: Any, hooks: Mapping[str, HookFn | Iterable[HookFn]] | None) -> Any:
    return Hooks(lm.model, hooks) if hooks else contextlib.nullcontext()


def run(lm: Any, inputs: Any, *, hooks: Mapping[str, HookFn | Iterable[HookFn]] | None = None,
        grad: bool | None = False, attentions: bool = False, hidden_states: bool = False,
        encoder_only: bool = False, **model_kwargs: Any) -> Any:
    """One pass of ``lm`` with ``hooks`` ({hook name: fn}); returns the Hugging Face output.

    ``grad``: False runs under inference mode, True with gradients, None in the caller's mode.
    ``encoder_only=True`` runs the encoder alone (its ``last_hidden_state``; no output head's cost).
    ``model_kwargs`` go to the model (e.g. ``inputs_embeds``).

    Args:
        lm: the model.
        inputs: a text, a list of texts, or a feed of tensors (``input_ids``, …).
        hooks: {hook name: fn or [fns]} live for this pass (``core.hook_points``' names).
        grad: False (inference mode), True (with gradients), None (the caller's mode).
        attentions: return the attention weights.
        hidden_states: return the hidden states.
        encoder_only: run the encoder alone.
        **model_kwargs: passed to the model.

    Returns:
        The Hugging Face output of the pass.
    """
    feed = feed_of(lm, inputs) if inputs is not None else {}
    active = _hooks(lm, hooks)
    reads_weights = isinstance(active, Hooks) and active.needs_weights
    eager = attentions or reads_weights
    # DeBERTa's attention returns its weights only when asked: ``attn.hook_pattern`` asks for them
    ask = attentions or (reads_weights and model_family(lm.model).weights_on_request)
    module = lm.model.base_model if encoder_only else lm.model
    with turn(lm, eager), _grad_mode(grad), active:
        return module(**feed, **model_kwargs, output_attentions=ask, output_hidden_states=hidden_states,
                      return_dict=True)


class ActivationCache(dict[str, torch.Tensor]):
    """{hook name: tensor} read in one pass, on the model's device (TransformerLens's ``ActivationCache``)."""

    def stack(self, suffix: str) -> torch.Tensor:
        """[layer, ...] ``blocks.{l}.<suffix>`` of every layer in the cache, stacked."""
        found = sorted((int(k.split(".")[1]), v) for k, v in self.items()
                       if k.startswith("blocks.") and k.split(".", 2)[2] == suffix)
        if not found:
            raise BertScopeError(f"The cache holds no blocks.L.{suffix}.")
        return torch.stack([v for _, v in found])


def caching_hooks(model: Any, names: Iterable[str] | Callable[[str], bool], store: ActivationCache
                  ) -> dict[str, HookFn]:
    """Hooks that keep each named activation (detached) in ``store``."""
    if callable(names):
        names = [n for n in hook_names(model) if names(n)]
    names = list(names)
    for name in names:
        hook_point(model, name)  # an unknown name is one line now, not after the pass

    def keep(x: torch.Tensor, hook: Any) -> None:
        store[hook.name] = x.detach()
        return None

    return {name: keep for name in names}


def merged(*hook_sets: Mapping[str, HookFn | Iterable[HookFn]] | None) -> dict[str, list[HookFn]]:
    """Several {name: fn or [fns]} as one, each name's functions in the order given."""
    out: dict[str, list[HookFn]] = {}
    for hooks in hook_sets:
        for name, fns in (hooks or {}).items():
            out.setdefault(name, []).extend([fns] if callable(fns) else list(fns))
    return out


def run_with_cache(lm: Any, inputs: Any, names: Iterable[str] | Callable[[str], bool], *,
                   hooks: Mapping[str, HookFn | Iterable[HookFn]] | None = None, **kwargs: Any
                   ) -> tuple[Any, ActivationCache]:
    """(the pass's output, the activations named in ``names`` — a list, or a filter on names).
    With ``hooks`` too, the cache holds what flowed on after them.

    Args:
        lm: the model.
        inputs: a text, a list of texts, or a feed of tensors.
        names: hook names to keep, or a filter on names.
        hooks: hooks that run in the same pass.
        **kwargs: as ``run``.

    Returns:
        (the pass's output, an ``ActivationCache``: {hook name: tensor}).
    """
    cache = ActivationCache()
    return run(lm, inputs, hooks=merged(hooks, caching_hooks(lm.model, names, cache)), **kwargs), cache


def run_block(lm: Any, layer: int, hidden: torch.Tensor, *,
              hooks: Mapping[str, HookFn | Iterable[HookFn]] | None = None, grad: bool | None = False) -> torch.Tensor:
    """Block ``layer`` alone on ``hidden`` ([batch, pos, d_model], no padding): its output, with the
    hook points of that block live (Value Zeroing runs one block on its captured input).

    Args:
        lm: the model.
        layer: the block, from 0.
        hidden: [batch, pos, d_model] the block's input.
        hooks: hooks live in this block.
        grad: as ``run``.

    Returns:
        [batch, pos, d_model] the block's output.
    """
    block = blocks(lm.model)[layer]
    active = _hooks(lm, hooks)
    with turn(lm), _grad_mode(grad), active, calling_block(layer):
        out = block(hidden, attention_mask=None)
    return cast(torch.Tensor, out[0] if isinstance(out, tuple) else out)


@contextlib.contextmanager
def hooks_on(lm: Any, hooks: Mapping[str, HookFn | Iterable[HookFn]]) -> Iterator[None]:
    """Every pass of this thread inside the block runs ``hooks`` (TransformerLens's ``model.hooks()``)."""
    with Hooks(lm.model, hooks):
        yield
