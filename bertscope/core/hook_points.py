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
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch

from bertscope.errors import BertScopeError

HookFn = Callable[[torch.Tensor, "HookPoint"], "torch.Tensor | None"]

# per block: (hook name, which module, how it is read). Modules are named by ``Family`` fields.
BLOCK_POINTS = (
    ("hook_resid_pre", "block", "input"),
    ("attn.hook_q", "query", "output_heads"),
    ("attn.hook_k", "key", "output_heads"),
    ("attn.hook_v", "value", "output_heads"),
    ("attn.hook_pattern", "attention", "weights"),
    ("attn.hook_z", "out_proj", "input_heads"),
    ("attn.hook_result", "out_proj", "result"),
    ("hook_attn_out", "out_proj", "output"),
    ("hook_resid_mid", "attn_norm", "output"),
    ("mlp.hook_pre", "mlp_in", "output"),
    ("mlp.hook_post", "mlp_out", "input"),
    ("hook_mlp_out", "mlp_out", "output"),
    ("hook_resid_post", "block", "output"),
)
BLOCK_SUFFIXES = tuple(suffix for suffix, _, _ in BLOCK_POINTS)
EMBED = "embed"
UNEMBED_IN = "unembed.hook_in"
READ_ONLY = frozenset({"weights"})
_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


@dataclass(frozen=True)
class Family:
    """Where each piece of a block sits, as module paths inside the block (dots; "" = the block)."""

    blocks: str  # the ModuleList of blocks inside the base model
    embed: tuple[str, ...]  # the first of these that exists produces hidden state 0
    query: str
    key: str
    value: str
    attention: str  # returns (context or output, weights)
    out_proj: str  # W_O: its input is the heads' contexts side by side
    attn_norm: str  # LayerNorm over attention output + residual
    mlp_in: str
    mlp_out: str


BERT_FAMILY = Family("encoder.layer", ("embeddings_project", "embeddings"), "attention.self.query",
                     "attention.self.key", "attention.self.value", "attention.self", "attention.output.dense",
                     "attention.output.LayerNorm", "intermediate.dense", "output.dense")
FAMILIES: dict[str, Family] = {
    **{kind: BERT_FAMILY for kind in ("bert", "roberta", "xlm-roberta", "electra", "camembert", "ernie",
                                      "data2vec-text")},
    # one shared layer group, called once per layer (``albert_blocks``)
    "albert": Family("", ("encoder.embedding_hidden_mapping_in",), "attention.query", "attention.key",
                     "attention.value", "attention", "attention.dense", "attention.LayerNorm", "ffn", "ffn_output"),
    "distilbert": Family("transformer.layer", ("embeddings",), "attention.q_lin", "attention.k_lin",
                         "attention.v_lin", "attention", "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2"),
    "deberta-v2": Family("encoder.layer", ("embeddings",), "attention.self.query_proj", "attention.self.key_proj",
                         "attention.self.value_proj", "attention.self", "attention.output.dense",
                         "attention.output.LayerNorm", "intermediate.dense", "output.dense"),
}


@dataclass(frozen=True, eq=False)
class HookPoint:
    """One named activation: the module it is read from and how."""

    name: str
    layer: int | None  # None for embed / unembed.hook_in
    module: Any  # torch.nn.Module
    how: str  # "input", "output", "input_heads", "output_heads", "weights", "result"
    heads: int
    shared: bool = False  # the module serves every layer (ALBERT): the layer is the call's index


def supported_families() -> tuple[str, ...]:
    return tuple(FAMILIES)


def _family(model: Any) -> Family:
    kind = model.config.model_type
    if kind not in FAMILIES:
        raise BertScopeError(f"Named hook points cover {', '.join(FAMILIES)}; {kind} is not one of them.")
    if kind == "deberta-v2" and getattr(model.config, "conv_kernel_size", 0):
        raise BertScopeError("DeBERTa-v2 with a convolution after layer 0 is not covered by the hook points.")
    return FAMILIES[kind]


def _child(module: Any, path: str) -> Any:
    return module.get_submodule(path) if path else module


def blocks(model: Any) -> list[Any]:
    """The module of each block, in order (ALBERT: its shared layer, repeated)."""
    family, base, cfg = _family(model), model.base_model, model.config
    if cfg.model_type == "albert":
        if cfg.inner_group_num != 1:
            raise BertScopeError("ALBERT with several layers per group is not supported (released ALBERTs have one).")
        groups = base.encoder.albert_layer_groups
        per_group = cfg.num_hidden_layers // cfg.num_hidden_groups
        return [groups[i // per_group].albert_layers[0] for i in range(cfg.num_hidden_layers)]
    return list(_child(base, family.blocks))


def embedding_module(model: Any) -> Any:
    base = model.base_model
    for path in _family(model).embed:
        found = getattr(base, path, None) if "." not in path else _child(base, path)
        if found is not None:
            return found
    raise BertScopeError(f"{model.config.model_type}: no embedding module found.")


def hook_names(model: Any) -> list[str]:
    """Every hook point of ``model``, in the order a pass reaches them."""
    names = [EMBED]
    for layer in range(len(blocks(model))):
        names += [f"blocks.{layer}.{suffix}" for suffix in BLOCK_SUFFIXES]
    if _vocabulary_projection(model) is not None:
        names.append(UNEMBED_IN)
    return names


def _vocabulary_projection(model: Any) -> Any:
    get = getattr(model, "get_output_embeddings", None)
    decoder = get() if get is not None else None
    return decoder if isinstance(decoder, torch.nn.Linear) else None


def hook_point(model: Any, name: str) -> HookPoint:
    """The hook point called ``name`` on ``model``, or one line saying which names exist."""
    heads = int(model.config.num_attention_heads)
    if name == EMBED:
        return HookPoint(name, None, embedding_module(model), "output", heads)
    if name == UNEMBED_IN:
        decoder = _vocabulary_projection(model)
        if decoder is None:
            raise BertScopeError(f"{UNEMBED_IN}: this model has no masked-LM vocabulary projection.")
        return HookPoint(name, None, decoder, "input", heads)
    found = _NAME.match(name)
    table = dict((suffix, (piece, how)) for suffix, piece, how in BLOCK_POINTS)
    if not found or found.group(2) not in table:
        raise BertScopeError(f"Unknown hook point {name!r}: the names are embed, blocks.L.{{"
                             f"{', '.join(BLOCK_SUFFIXES)}}} and {UNEMBED_IN} (L from 0).")
    layer, (piece, how) = int(found.group(1)), table[found.group(2)]
    every = blocks(model)
    if not 0 <= layer < len(every):
        raise BertScopeError(f"Hook point {name!r}: the model has layers 0-{len(every) - 1}.")
    block = every[layer]
    module = block if piece == "block" else _child(block, getattr(_family(model), piece))
    return HookPoint(name, layer, module, how, heads, shared=sum(b is block for b in every) > 1)


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.view(*x.shape[:-1], heads, x.shape[-1] // heads)  # [..., head, d_head]


def _first_input(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _with_first_input(args: tuple, kwargs: dict, new: torch.Tensor) -> tuple[tuple, dict]:
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

    def on_encoder(self, module: Any, args: tuple) -> None:
        self.calls = 0

    def on_block(self, module: Any, args: tuple) -> None:
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

    def __enter__(self) -> "Hooks":
        self.owner = threading.get_ident()
        if any(p.shared for p, _ in self.points):
            self.handles.append(self.model.base_model.encoder.register_forward_pre_hook(self.counter.on_encoder))
            block = blocks(self.model)[0]
            self.handles.append(block.register_forward_pre_hook(self.counter.on_block))
        for point, fns in self.points:
            self.handles.append(self._register(point, fns))
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

    def _register(self, point: HookPoint, fns: list[HookFn]) -> Any:
        how, module, heads = point.how, point.module, point.heads
        if how == "input" and point.layer is not None and point.name.endswith("hook_resid_pre"):
            def pre_kw(mod: Any, args: tuple, kwargs: dict) -> Any:
                if not self._mine(point):
                    return None
                new = self._apply(point, fns, _first_input(args, kwargs))
                return None if new is None else _with_first_input(args, kwargs, new)
            return module.register_forward_pre_hook(pre_kw, with_kwargs=True)
        if how in ("input", "input_heads"):
            def pre(mod: Any, args: tuple) -> Any:
                if not self._mine(point):
                    return None
                x = args[0]
                view = _split_heads(x, heads) if how == "input_heads" else x  # [b, pos, head, d_head]
                new = self._apply(point, fns, view)
                return None if new is None else (new.reshape(*new.shape[:-2], -1) if how == "input_heads" else new,
                                                 *args[1:])
            return module.register_forward_pre_hook(pre)

        def post(mod: Any, args: tuple, out: Any) -> Any:
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
            view = _split_heads(x, heads) if how == "output_heads" else x
            new = self._apply(point, fns, view)
            if new is None:
                return None
            return _replaced(out, new.reshape(x.shape) if how == "output_heads" else new)
        return module.register_forward_hook(post)


def every_layer(suffix: str, fn: Callable[[int, torch.Tensor], "torch.Tensor | None"], layers: int
                ) -> dict[str, HookFn]:
    """``{blocks.l.<suffix>: fn(l, tensor)}`` for every layer: one function that edits by layer."""
    if suffix not in BLOCK_SUFFIXES:
        raise BertScopeError(f"Unknown block hook {suffix!r}: use one of {', '.join(BLOCK_SUFFIXES)}.")
    return {f"blocks.{layer}.{suffix}": (lambda x, hook: fn(hook.layer, x)) for layer in range(layers)}


def every_state(fn: Callable[[int, torch.Tensor], "torch.Tensor | None"], layers: int) -> dict[str, HookFn]:
    """``fn(state, hidden)`` on every hidden state: 0 = ``embed``, l + 1 = layer l's output."""
    hooks: dict[str, HookFn] = {EMBED: lambda x, hook: fn(0, x)}
    hooks.update({f"blocks.{layer}.hook_resid_post": (lambda x, hook: fn(hook.layer + 1, x))
                  for layer in range(layers)})
    return hooks


def zero_head(head: int) -> HookFn:
    """A hook for ``attn.hook_z`` (or q/k/v) that zeroes one head: ``{"blocks.8.attn.hook_z": zero_head(10)}``."""

    def zero(x: torch.Tensor, hook: HookPoint) -> torch.Tensor:  # [batch, pos, head, d_head]
        if not 0 <= head < x.shape[-2]:
            raise BertScopeError(f"Head {head} does not exist: heads 0-{x.shape[-2] - 1}.")
        x = x.clone()
        x[..., head, :] = 0
        return x

    return zero
