"""Named hook points on every encoder family, bound to the Hugging Face model's own modules by name.

TransformerLens's names (``HookedEncoder``, ``hook_points.py``), one table for BERT, RoBERTa/XLM-R,
ELECTRA, CamemBERT, ERNIE, data2vec-text, ALBERT, DistilBERT and DeBERTa-v2/v3. Layers count from 0;
hidden state 0 is ``embed`` ("embeddings"), layer l's output is ``blocks.{l}.hook_resid_post``.

======================================  ==============================  ===============================
name                                    tensor                          where (BERT's module)
======================================  ==============================  ===============================
``embed``                               [batch, pos, d_model]           output of ``embeddings`` (hidden
                                                                        state 0; ELECTRA's projection,
                                                                        ALBERT's mapping-in included)
``blocks.{l}.hook_resid_pre``           [batch, pos, d_model]           input of block l
``blocks.{l}.attn.hook_q`` / ``_k`` /   [batch, pos, head, d_head]      output of ``attention.self.query``
``_v``                                                                  / ``key`` / ``value``
``blocks.{l}.attn.hook_pattern``        [batch, head, query, key]       the softmax weights (read only;
                                                                        the pass runs the eager kernel)
``blocks.{l}.attn.hook_z``              [batch, pos, head, d_head]      each head's context: the input of
                                                                        ``attention.output.dense`` (W_O)
``blocks.{l}.attn.hook_result``         [batch, pos, head, d_model]     each head's share of W_O's output
                                                                        (z_h W_O^h; the bias is not in it)
``blocks.{l}.hook_attn_out``            [batch, pos, d_model]           output of W_O (before the residual)
``blocks.{l}.hook_resid_mid``           [batch, pos, d_model]           output of the post-attention
                                                                        LayerNorm
``blocks.{l}.mlp.hook_pre``             [batch, pos, d_mlp]             output of ``intermediate.dense``
``blocks.{l}.mlp.hook_post``            [batch, pos, d_mlp]             after the activation: the input
                                                                        of ``output.dense``
``blocks.{l}.hook_mlp_out``             [batch, pos, d_model]           output of ``output.dense``
``blocks.{l}.hook_resid_post``          [batch, pos, d_model]           output of block l (hidden state
                                                                        l + 1)
``unembed.hook_in``                     [batch, pos, d_model]           input of the masked-LM head's
                                                                        vocabulary projection (models
                                                                        with that head)
======================================  ==============================  ===============================

A hook is ``fn(tensor, hook) -> tensor | None`` (``hook.name``, ``hook.layer``): returning a tensor
replaces the activation (same shape; ``unembed.hook_in`` may return fewer rows), None leaves it.
ALBERT calls its one shared layer once per layer: its points are the same modules for every l, and
the layer is the block call's index within the pass (reset when the encoder starts, or set by
``core.hooked_pass.run_block``). The model is shared by every session of a server: a hook acts only
in the thread that registered it. Hooks are registered by ``Hooks`` (a context manager) and removed
on exit; ``core.hooked_pass`` is the one place that uses it for a pass.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.families import FAMILIES, Family, family_of

HookFn = Callable[[torch.Tensor, "HookPoint"], "torch.Tensor | None"]

# per block, in the order a pass reaches them; each bound to a module of the family record
# (``runtime.families.Family``) by ``_binding``
BLOCK_SUFFIXES = ("hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_pattern", "attn.hook_z",
                  "attn.hook_result", "hook_attn_out", "hook_resid_mid", "mlp.hook_pre", "mlp.hook_post",
                  "hook_mlp_out", "hook_resid_post")
GATED_SUFFIX = "mlp.hook_pre_linear"  # gated feed-forward layers only (ModernBERT's GeGLU): the gate's half
EMBED = "embed"
UNEMBED_IN = "unembed.hook_in"
LN_FINAL = "ln_final.hook_normalized"  # pre-LayerNorm families: the last hidden state
READ_ONLY = frozenset({"weights"})
_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


def _binding(family: Family, suffix: str) -> tuple[str, str, int | None]:
    """(module path inside the block, how it is read, which part of a fused output) for ``suffix``."""
    if suffix in ("attn.hook_q", "attn.hook_k", "attn.hook_v"):
        which = suffix[-1]
        if family.qkv:
            return family.qkv, "output_fused", "qkv".index(which)
        return getattr(family, {"q": "query", "k": "key", "v": "value"}[which]), "output_heads", None
    if suffix == "hook_resid_mid":  # the residual stream between the attention and the feed-forward sub-block
        return (family.attn_norm, "output", None) if family.post_layernorm else (family.mlp_norm, "input", None)
    if suffix == "mlp.hook_pre":
        return (family.mlp_in, "output_half", 0) if family.gated_mlp else (family.mlp_in, "output", None)
    if suffix == GATED_SUFFIX and family.gated_mlp:
        return family.mlp_in, "output_half", 1
    table = {"hook_resid_pre": ("", "input"), "attn.hook_pattern": (family.attention, "weights"),
             "attn.hook_z": (family.out_proj, "input_heads"), "attn.hook_result": (family.out_proj, "result"),
             "hook_attn_out": (family.out_proj, "output"), "mlp.hook_post": (family.mlp_out, "input"),
             "hook_mlp_out": (family.mlp_out, "output"), "hook_resid_post": ("", "output")}
    path, how = table[suffix]
    return path, how, None


def block_suffixes(family: Family) -> tuple[str, ...]:
    """The block hook points a family has, in pass order."""
    if not family.gated_mlp:
        return BLOCK_SUFFIXES
    at = BLOCK_SUFFIXES.index("mlp.hook_pre") + 1
    return (*BLOCK_SUFFIXES[:at], GATED_SUFFIX, *BLOCK_SUFFIXES[at:])


@dataclass(frozen=True, eq=False)
class HookPoint:
    """One named activation: the module it is read from and how."""

    name: str
    layer: int | None  # None for embed / ln_final / unembed.hook_in
    module: Any  # torch.nn.Module
    how: str  # "input", "output", "input_heads", "output_heads", "output_fused", "output_half", "weights", "result"
    heads: int
    shared: bool = False  # the module serves every layer (ALBERT): the layer is the call's index
    part: int | None = None  # "output_fused": 0 query, 1 key, 2 value; "output_half": 0 first, 1 second
    # DeBERTa projects its relative-position embeddings with the same query and key modules, after the tokens:
    # the point acts on the first call within each call of this (attention) module only
    first_call_in: Any = None


def supported_families() -> tuple[str, ...]:
    """Every ``model_type`` with named hook points (the family records')."""
    return tuple(t for f in FAMILIES for t in f.model_types)


def model_family(model: Any) -> Family:
    """The family record of a loaded model, or one line saying which families have hook points."""
    found = family_of(model.config.model_type)
    if found.scores == "relative" and bool(getattr(model.config, "conv_kernel_size", 0)):
        raise BertScopeError("DeBERTa-v2 with a convolution after layer 0 is not covered by the hook points.")
    return found


def _child(module: Any, path: str) -> Any:
    return module.get_submodule(path) if path else module


def blocks(model: Any) -> list[Any]:
    """The module of each block, in order (ALBERT: its shared layer, repeated)."""
    family, base, cfg = model_family(model), model.base_model, model.config
    if family.shared_layers:
        if cfg.inner_group_num != 1:
            raise BertScopeError("ALBERT with several layers per group is not supported (released ALBERTs have one).")
        groups = base.encoder.albert_layer_groups
        per_group = cfg.num_hidden_layers // cfg.num_hidden_groups
        return [groups[i // per_group].albert_layers[0] for i in range(cfg.num_hidden_layers)]
    return list(_child(base, family.blocks))


def embedding_module(model: Any) -> Any:
    base = model.base_model
    for path in model_family(model).embed:
        found = getattr(base, path, None) if "." not in path else _child(base, path)
        if found is not None:
            return found
    raise BertScopeError(f"{model.config.model_type}: no embedding module found.")


def hook_names(model: Any) -> list[str]:
    """Every hook point of ``model``, in the order a pass reaches them.

    Args:
        model: the Hugging Face model (``lm.model``).

    Returns:
        The names (``embed``, ``blocks.L.…``, ``ln_final.hook_normalized``, ``unembed.hook_in``) this model has.
    """
    family = model_family(model)
    names = [EMBED]
    for layer in range(len(blocks(model))):
        names += [f"blocks.{layer}.{suffix}" for suffix in block_suffixes(family)]
    if family.final_norm:
        names.append(LN_FINAL)
    if _vocabulary_projection(model) is not None:
        names.append(UNEMBED_IN)
    return names


def state_hook(model: Any, state: int) -> str:
    """The hook point of hidden state ``state``: 0 is ``embed`` ("embeddings"), l + 1 is layer l's output
    (``blocks.{l}.hook_resid_post``), except that a pre-LayerNorm family's last state is the encoder's
    output after its final LayerNorm (``ln_final.hook_normalized``), as Hugging Face's hidden states have it."""
    layers = len(blocks(model))
    if not 0 <= state <= layers:
        raise BertScopeError(f"Hidden state {state} does not exist: 0 (embeddings) to {layers}.")
    if state == 0:
        return EMBED
    if state == layers and model_family(model).final_norm:
        return LN_FINAL
    return f"blocks.{state - 1}.hook_resid_post"


def _vocabulary_projection(model: Any) -> Any:
    get = getattr(model, "get_output_embeddings", None)
    decoder = get() if get is not None else None
    return decoder if isinstance(decoder, torch.nn.Linear) else None


def hook_point(model: Any, name: str) -> HookPoint:
    """The hook point called ``name`` on ``model``, or one line saying which names exist.

    Args:
        model: the Hugging Face model (``lm.model``).
        name: a hook point's name.

    Returns:
        The ``HookPoint``: the module it hooks, how (input or output), its layer.
    """
    heads = int(model.config.num_attention_heads)
    family = model_family(model)
    if name == EMBED:
        return HookPoint(name, None, embedding_module(model), "output", heads)
    if name == UNEMBED_IN:
        decoder = _vocabulary_projection(model)
        if decoder is None:
            raise BertScopeError(f"{UNEMBED_IN}: this model has no masked-LM vocabulary projection.")
        return HookPoint(name, None, decoder, "input", heads)
    if name == LN_FINAL:
        if not family.final_norm:
            raise BertScopeError(f"{LN_FINAL}: {family.name} is post-LayerNorm; its last hidden state is "
                                 f"blocks.{len(blocks(model)) - 1}.hook_resid_post.")
        return HookPoint(name, None, _child(model.base_model, family.final_norm), "output", heads)
    found = _NAME.match(name)
    suffixes = block_suffixes(family)
    if not found or found.group(2) not in suffixes:
        final = f", {LN_FINAL}" if family.final_norm else ""
        raise BertScopeError(f"Unknown hook point {name!r}: the names are embed, blocks.L.{{"
                             f"{', '.join(suffixes)}}}{final} and {UNEMBED_IN} (L from 0).")
    layer = int(found.group(1))
    path, how, part = _binding(family, found.group(2))
    every = blocks(model)
    if not 0 <= layer < len(every):
        raise BertScopeError(f"Hook point {name!r}: the model has layers 0-{len(every) - 1}.")
    block = every[layer]
    first_call_in = (_child(block, family.attention) if family.scores == "relative"
                     and found.group(2) in ("attn.hook_q", "attn.hook_k", "attn.hook_v") else None)
    return HookPoint(name, layer, _child(block, path), how, heads, shared=sum(b is block for b in every) > 1,
                     part=part, first_call_in=first_call_in)


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.view(*x.shape[:-1], heads, x.shape[-1] // heads)  # [..., head, d_head]


def _first_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
    return cast(torch.Tensor, args[0] if args else kwargs["hidden_states"])


def _with_first_input(args: tuple[Any, ...], kwargs: dict[str, Any], new: torch.Tensor
                      ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if args:
        return (new, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": new}


def _replaced(out: Any, new: torch.Tensor) -> Any:
    return (new, *out[1:]) if isinstance(out, tuple) else new


def _check(point: HookPoint, old: torch.Tensor, new: Any) -> torch.Tensor:
    if not isinstance(new, torch.Tensor):
        raise BertScopeError(f"The hook on {point.name} returned {type(new).__name__}: return a tensor or None.")
    if point.name != UNEMBED_IN and new.shape != old.shape:
        raise BertScopeError(f"The hook on {point.name} returned shape {tuple(new.shape)}; the activation has "
                             f"{tuple(old.shape)}.")
    return new


class _LayerCounter:
    """ALBERT: which layer the shared block is running (the call's index within the pass)."""

    forced = threading.local()  # ``run_block`` sets .layer while it calls one block

    def __init__(self) -> None:
        self.calls = 0
        self.layer = 0

    def on_encoder(self, module: Any, args: tuple[Any, ...]) -> None:
        self.calls = 0

    def on_block(self, module: Any, args: tuple[Any, ...]) -> None:
        forced = getattr(self.forced, "layer", None)
        self.layer = forced if forced is not None else self.calls
        self.calls += 1


@contextlib.contextmanager
def calling_block(layer: int) -> Iterator[None]:
    """While one block is called on its own, the shared-layer hooks (ALBERT) read it as ``layer``."""
    _LayerCounter.forced.layer = layer
    try:
        yield
    finally:
        _LayerCounter.forced.layer = None


class Hooks:
    """``with Hooks(model, {name: fn}): ...``: every pass inside runs the hooks (in this thread only).

    Several functions on one name run in the order given (``{name: [f, g]}``)."""

    def __init__(self, model: Any, hooks: Mapping[str, HookFn | Iterable[HookFn]]) -> None:
        self.model = model
        self.points: list[tuple[HookPoint, list[HookFn]]] = []
        for name, fns in hooks.items():
            fns = [fns] if callable(fns) else list(fns)
            if fns:
                self.points.append((hook_point(model, name), fns))
        self.owner = threading.get_ident()
        self.handles: list[Any] = []
        self.counter = _LayerCounter()

    @property
    def needs_weights(self) -> bool:
        return any(p.how == "weights" for p, _ in self.points)

    def _mine(self, point: HookPoint) -> bool:
        if threading.get_ident() != self.owner:
            return False
        return not point.shared or self.counter.layer == point.layer

    def __enter__(self) -> Hooks:
        self.owner = threading.get_ident()
        if any(p.shared for p, _ in self.points):
            self.handles.append(self.model.base_model.encoder.register_forward_pre_hook(self.counter.on_encoder))
            block = blocks(self.model)[0]
            self.handles.append(block.register_forward_pre_hook(self.counter.on_block))
        for point, fns in self.points:
            self.handles.extend(self._register(point, fns))
        return self

    def __exit__(self, *exc: Any) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def _apply(self, point: HookPoint, fns: list[HookFn], x: torch.Tensor) -> torch.Tensor | None:
        changed = None
        for fn in fns:
            new = fn(x if changed is None else changed, point)
            if new is not None:
                if point.how in READ_ONLY:
                    raise BertScopeError(f"{point.name} is read only: edit attn.hook_z or attn.hook_v to change "
                                         "what the heads move.")
                changed = _check(point, x, new)
        return changed

    def _register(self, point: HookPoint, fns: list[HookFn]) -> list[Any]:
        handles = []
        if point.first_call_in is not None:  # the tokens' projection, not the positions' after it
            fresh = [False]

            def arm(*_: Any) -> None:  # this thread's call of the attention module (another's passes by)
                if threading.get_ident() == self.owner:
                    fresh[0] = True
            handles.append(point.first_call_in.register_forward_pre_hook(arm))
            fns = [self._first_call(fresh, fns)]
        return [*handles, self._register_module(point, fns)]

    def _first_call(self, fresh: list[bool], fns: list[HookFn]) -> HookFn:
        def first(x: torch.Tensor, point: HookPoint) -> torch.Tensor | None:
            if not fresh[0]:
                return None
            fresh[0] = False
            return self._apply(point, fns, x)  # each function's return checked, as on any point
        return first

    def _register_module(self, point: HookPoint, fns: list[HookFn]) -> Any:
        how, module, heads = point.how, point.module, point.heads
        if how == "input" and point.layer is not None and point.name.endswith("hook_resid_pre"):
            def pre_kw(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                if not self._mine(point):
                    return None
                new = self._apply(point, fns, _first_input(args, kwargs))
                return None if new is None else _with_first_input(args, kwargs, new)
            return module.register_forward_pre_hook(pre_kw, with_kwargs=True)
        if how in ("input", "input_heads"):
            def pre(mod: Any, args: tuple[Any, ...]) -> Any:
                if not self._mine(point):
                    return None
                x = args[0]
                view = _split_heads(x, heads) if how == "input_heads" else x  # [b, pos, head, d_head]
                new = self._apply(point, fns, view)
                return None if new is None else (new.reshape(*new.shape[:-2], -1) if how == "input_heads" else new,
                                                 *args[1:])
            return module.register_forward_pre_hook(pre)

        def post(mod: Any, args: tuple[Any, ...], out: Any) -> Any:
            if not self._mine(point):
                return None
            if how == "weights":
                weights = out[1] if isinstance(out, tuple) and len(out) > 1 else None
                if weights is None:
                    raise BertScopeError(f"{point.name}: this pass ran a kernel that returns no attention weights.")
                self._apply(point, fns, weights)
                return None
            if how == "result":
                z = _split_heads(args[0], heads)  # [b, pos, head, d_head]
                w = module.weight  # [d_model, head * d_head]
                result = torch.einsum("bphd,mhd->bphm", z, _split_heads(w, heads))  # [b, pos, head, d_model]
                new = self._apply(point, fns, result)
                if new is None:
                    return None
                return new.sum(dim=2) + (module.bias if module.bias is not None else 0)
            x = out[0] if isinstance(out, tuple) else out
            if how == "output_fused":  # [b, pos, 3 * d_model] = query | key | value, each [b, pos, head, d_head]
                assert point.part is not None  # _binding gives every fused output its part
                parts = x.view(*x.shape[:-1], 3, heads, x.shape[-1] // (3 * heads))
                new = self._apply(point, fns, parts[..., point.part, :, :])
                if new is None:
                    return None
                parts = parts.clone()
                parts[..., point.part, :, :] = new
                return _replaced(out, parts.reshape(x.shape))
            if how == "output_half":  # a gated layer's [b, pos, 2 * d_mlp]: activation input | gate
                assert point.part is not None  # _binding gives every half output its part
                halves = list(x.chunk(2, dim=-1))
                new = self._apply(point, fns, halves[point.part])
                if new is None:
                    return None
                halves[point.part] = new
                return _replaced(out, torch.cat(halves, dim=-1))
            view = _split_heads(x, heads) if how == "output_heads" else x
            new = self._apply(point, fns, view)
            if new is None:
                return None
            return _replaced(out, new.reshape(x.shape) if how == "output_heads" else new)
        return module.register_forward_hook(post)


def every_layer(suffix: str, fn: Callable[[int, torch.Tensor], torch.Tensor | None], layers: int
                ) -> dict[str, HookFn]:
    """``{blocks.l.<suffix>: fn(l, tensor)}`` for every layer: one function that edits by layer.

    Args:
        suffix: the hook point's name after ``blocks.L.`` (``attn.hook_z``, ``hook_resid_post``, …).
        fn: called with (layer, tensor); returns the new tensor, or None to keep it.
        layers: how many layers the model has.

    Returns:
        {hook name: hook function}, one a layer, for ``run(..., hooks=...)``.
    """
    if suffix not in BLOCK_SUFFIXES:
        raise BertScopeError(f"Unknown block hook {suffix!r}: use one of {', '.join(BLOCK_SUFFIXES)}.")
    # a block hook point always has its layer
    return {f"blocks.{layer}.{suffix}": (lambda x, hook: fn(cast(int, hook.layer), x)) for layer in range(layers)}


def every_state(model: Any, fn: Callable[[int, torch.Tensor], torch.Tensor | None]) -> dict[str, HookFn]:
    """``fn(state, hidden)`` on every hidden state (``state_hook``: 0 = ``embed``, l + 1 = layer l's output).

    Args:
        model: the Hugging Face model (``lm.model``).
        fn: called with (state, hidden); returns the new hidden state, or None to keep it.

    Returns:
        {hook name: hook function}, one a hidden state.
    """

    def at(state: int) -> HookFn:
        return lambda x, hook: fn(state, x)

    return {state_hook(model, state): at(state) for state in range(len(blocks(model)) + 1)}


def zero_head(head: int) -> HookFn:
    """A hook for ``attn.hook_z`` (or q/k/v) that zeroes one head: ``{"blocks.8.attn.hook_z": zero_head(10)}``.

    Args:
        head: the head, from 0.

    Returns:
        A hook function for ``blocks.L.attn.hook_z`` (or ``hook_q`` / ``hook_k`` / ``hook_v``).
    """

    def zero(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:  # [batch, pos, head, d_head]
        if not 0 <= head < x.shape[-2]:
            raise BertScopeError(f"Head {head} does not exist: heads 0-{x.shape[-2] - 1}.")
        x = x.clone()
        x[..., head, :] = 0
        return x

    return zero
