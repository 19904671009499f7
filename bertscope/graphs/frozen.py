"""The linearised replacement model of one prompt: BERT with its attention patterns, LayerNorm scales and head
nonlinearities frozen from the real run, each feed-forward replaced by its transcoder's write (features and error
held as given) plus the transcoder's skip path, so that everything from the nodes to every node's input is affine.

What is frozen, and why the identities hold:

- attention: each head's softmax pattern [head, query, key] from the real run; values stay live (x W_V + b_V), so
  a write at position k reaches position q through the pattern and W_O (circuit-tracer detaches ``hook_pattern``);
- LayerNorm (BERT's two a block, post-residual, and the head's): the centring stays live, the scale 1/σ is the
  real run's (circuit-tracer detaches ``hook_scale``): (y − mean(y)) / σ_real · γ + β;
- the feed-forward: the transcoder's features and the error node are sources (their writes given), the skip path
  W_skip stays live (circuit-tracer's ``skip + (acts − skip).detach()``);
- the head's own nonlinearity (the masked-LM transform's GELU, the pooler's tanh) as its ratio to its input at the
  real run, f(u) = u · (f(u)/u)_real: exact at the real input, linear in it.

With the real embeddings and the real writes the pass gives the real logits to float precision (tested in
float64): the error nodes take up what the transcoders miss. The adjoint (``backward``) is written out: a row
vector at any node input is carried down through the transposed maps without a forward pass (the map is linear),
which is half the cost of autograd and needs no activations.

Shapes: P positions, d the width, H heads of d_h; B rows of targets handled at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bertscope.core.block_modules import block_parts, reads_blocks
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.features.transcoder import Transcoder


def _center(x: torch.Tensor) -> torch.Tensor:
    return x - x.mean(-1, keepdim=True)


@dataclass
class LayerParts:
    W_V: torch.Tensor  # [d, d] (out, in) as nn.Linear
    b_V: torch.Tensor
    W_O: torch.Tensor
    b_O: torch.Tensor
    g1: torch.Tensor  # LayerNorm after attention: γ, β [d]
    b1: torch.Tensor
    g2: torch.Tensor  # LayerNorm after the feed-forward
    b2: torch.Tensor
    pattern: torch.Tensor  # [H, P, P] frozen
    sigma1: torch.Tensor  # [P, 1] frozen
    sigma2: torch.Tensor  # [P, 1]
    W_skip: torch.Tensor | None  # [d, d] (out, in), the transcoder's skip path


@dataclass
class Head:
    """The decision read at one position, linearised: value = (r · n) + c with n the frozen-LayerNorm /
    frozen-ratio image of the final hidden state there."""

    kind: str  # "token" (masked LM) or "class" (sequence classifier)
    position: int
    W1: torch.Tensor  # [d, d]: the transform's dense (mlm) or the pooler's (class)
    b1: torch.Tensor
    ratio: torch.Tensor  # [d]: f(u)/u at the real run
    gamma: torch.Tensor | None  # the transform's LayerNorm (mlm), None for the pooler
    beta: torch.Tensor | None
    sigma: torch.Tensor | None  # [1]
    readout: torch.Tensor  # [d]: W[target] − W[contrast] (or − the mean row)
    offset: float  # b[target] − b[contrast] (or − the mean bias); a linear head: what makes the real value
    normal: torch.Tensor | None = None  # [d]: a linear head's normalised transform output, whose scale responds


@dataclass
class FrozenModel:
    """A prompt's frozen linear replacement pass (``freeze``)."""

    layers: list[LayerParts]
    head: Head
    heads: int
    n_pos: int
    d: int
    dtype: torch.dtype

    # -- the forward pass --------------------------------------------------------------------------
    def forward(self, embed: torch.Tensor, writes: list[torch.Tensor], upto: int | None = None,
                feed_forward: Callable[[int, torch.Tensor], torch.Tensor] | None = None
                ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """(every layer's feed-forward input ``mid`` [B, P, d], the head's value [B] or None when ``upto`` stops
        before the end) for embeddings ``embed`` [B, P, d] and each layer's write ``writes[l]`` [B, P, d] (its
        features, b_dec and error: everything but the skip path). ``feed_forward(layer, mid)`` [B, P, d], when given,
        stands for the skip path (the model's own feed-forward, to see where the graph's linear response parts from
        the model's: ``writes`` then hold what is added to it)."""
        x, mids = embed, []
        last = len(self.layers) if upto is None else upto
        for layer in self.layers[:last]:
            b, p, d = x.shape
            v = (x @ layer.W_V.T + layer.b_V).view(b, p, self.heads, d // self.heads)  # [B, P, H, d_h]
            z = torch.einsum("hqk,bkhd->bqhd", layer.pattern, v).reshape(b, p, d)
            y = x + z @ layer.W_O.T + layer.b_O
            mid = _center(y) / layer.sigma1 * layer.g1 + layer.b1
            mids.append(mid)
            if feed_forward is not None:
                out = writes[len(mids) - 1] + feed_forward(len(mids) - 1, mid)
            else:
                out = writes[len(mids) - 1] + (mid @ layer.W_skip.T if layer.W_skip is not None else 0)
            x = _center(mid + out) / layer.sigma2 * layer.g2 + layer.b2
        if upto is not None:
            return mids, None
        return mids, self.head_value(x[:, self.head.position])

    def head_value(self, h: torch.Tensor) -> torch.Tensor:
        """[B] the decision's value from the final hidden state at its position ([B, d])."""
        hd = self.head
        n = (h @ hd.W1.T + hd.b1) * hd.ratio
        if hd.gamma is not None and hd.sigma is not None and hd.beta is not None:  # the masked-LM transform's norm
            n = _center(n) / hd.sigma
            if hd.normal is not None:  # its scale's first-order response: less the part along its output
                n = n - (n @ hd.normal)[..., None] * hd.normal / len(hd.normal)
            n = n * hd.gamma + hd.beta
        return n @ hd.readout + hd.offset

    # -- the adjoint -------------------------------------------------------------------------------
    def backward(self, seeds: dict[int, torch.Tensor], head_seed: torch.Tensor | None
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(∂/∂embed [B, P, d], [∂/∂writes[l] [B, P, d] for each layer]) of Σ_l ⟨seeds[l], mid_l⟩ + head_seed · value,
        row by row: ``seeds[l]`` [B, P, d] at layer l's feed-forward input, ``head_seed`` [B] on the decision."""
        B = next(iter(seeds.values())).shape[0] if seeds else len(head_seed)  # type: ignore[arg-type]
        g = torch.zeros(B, self.n_pos, self.d, dtype=self.dtype, device=self.layers[0].W_V.device)
        if head_seed is not None:
            hd = self.head
            gn = head_seed[:, None] * hd.readout  # [B, d]
            if hd.gamma is not None and hd.sigma is not None:
                gn = gn * hd.gamma
                if hd.normal is not None:
                    gn = gn - (gn @ hd.normal)[:, None] * hd.normal / len(hd.normal)
                gn = _center(gn / hd.sigma)
            g[:, hd.position] = (gn * hd.ratio) @ hd.W1
        top = max(seeds) + 1 if head_seed is None else len(self.layers)
        zero = g.new_zeros(()).expand_as(g)  # [B, P, d] with no storage of its own
        grads_w: list[torch.Tensor] = [zero] * len(self.layers)  # a layer the rows never reach: zero
        for index in range(top - 1, -1, -1):
            layer = self.layers[index]
            if head_seed is None and index == top - 1:  # nothing above: the write's gradient is zero
                gmid = seeds[index]
                rows, pos = torch.nonzero(gmid.abs().amax(-1) > 0, as_tuple=True)  # [M] each
                if len(rows) <= 2 * B:  # a position or two a row (a feature's seed): the sparse path
                    g = self._attention_back_sparse(layer, gmid, rows, pos)
                    continue
            else:
                gy2 = _center(g * (layer.g2 / layer.sigma2))  # [B, P, d] at mid + out
                grads_w[index] = gy2
                if layer.W_skip is not None:  # gy2 (I + W_skip): the residual and the skip path in one product
                    gmid = (gy2.reshape(-1, self.d) @ (layer.W_skip + torch.eye(self.d, dtype=g.dtype, device=g.device))).view_as(g)
                else:
                    gmid = gy2
                if index in seeds:
                    gmid = gmid + seeds[index]
            g = self._attention_back(layer, _center(gmid * (layer.g1 / layer.sigma1)))
        return g, grads_w

    def _attention_back(self, layer: LayerParts, gy: torch.Tensor) -> torch.Tensor:
        """[B, P, d] the gradient at layer's input x from ``gy`` [B, P, d] at x + attn: gy plus its path back
        through W_O, the frozen pattern and W_V, laid out so that no product needs a copy: (W_O^T gy^T) is [H, d_h,
        B, P], the pattern contracts its last axis per head, and the result is read transposed by the W_V product."""
        b, p, d = gy.shape
        flat = gy.reshape(b * p, d)
        gz_t = (layer.W_O.T @ flat.T).view(self.heads, -1, p)  # [H, d_h·B, P(queries)]
        gv_t = torch.bmm(gz_t, layer.pattern)  # [H, d_h·B, P(keys)]: Σ_q gz[b, q, h] pattern[h, q, k]
        return torch.addmm(flat, gv_t.view(d, b * p).T, layer.W_V).view(b, p, d)

    def _attention_back_sparse(self, layer: LayerParts, gmid: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor
                               ) -> torch.Tensor:
        """[B, P, d] the gradient at layer's input x from ``gmid`` [B, P, d] at its feed-forward input alone (nothing
        above it), nonzero only at (``rows``, ``pos``) [M] (a feature row's seed is one position): through the
        attention with one [M, d] product through W_O instead of [B, P, d], the same sums."""
        b, p, d = gmid.shape
        d_h = d // self.heads
        gy_at = _center(gmid[rows, pos] * layer.g1 / layer.sigma1[pos])  # [M, d] at x + attn
        gz = (gy_at @ layer.W_O).view(-1, 1, self.heads, d_h)  # [M, 1, H, d_h]
        weights = layer.pattern[:, pos, :].permute(1, 2, 0)[..., None]  # [M, P(keys), H, 1]
        gv = torch.zeros(b, p, self.heads, d_h, dtype=gmid.dtype, device=gmid.device)
        gv.index_add_(0, rows, weights * gz)  # [B, P, H, d_h]: Σ_q pattern[h, q, k] gz[b, q, h]
        out = (gv.view(b * p, d) @ layer.W_V).view(b, p, d)
        out[rows, pos] += gy_at
        return out


def ratio(fn: Any, u: torch.Tensor) -> torch.Tensor:
    """f(u)/u, with f'(0) where u is ~0 (numerically): a nonlinearity held as its ratio at the real run."""
    small = u.abs() < 1e-6
    safe = torch.where(small, torch.ones_like(u), u)
    at_zero = torch.func.grad(lambda t: fn(t).sum())(torch.zeros_like(u))
    return torch.where(small, at_zero, fn(safe) / safe)


def norm_scale(y: torch.Tensor, eps: float) -> torch.Tensor:
    """A LayerNorm's σ over the last dimension of its input ``y`` [..., d] -> [..., 1]: what the graph holds."""
    return (y.var(-1, unbiased=False, keepdim=True) + eps).sqrt()


def check_graph_model(lm: LoadedModel) -> None:
    if not reads_blocks(lm) or lm.model_type not in ("bert",):
        raise BertScopeError(f"Attribution graphs read BERT's post-LayerNorm blocks (bundled-mlm, bundled-sentiment, "
                             f"bert-base-*); {lm.name} is {lm.model_type}.")


def freeze(lm: LoadedModel, cache: dict[str, torch.Tensor], transcoders: dict[int, Transcoder], head: Head,
           dtype: torch.dtype = torch.float32) -> FrozenModel:
    """The frozen pass from a real run's ``cache`` (batch of one: blocks.{l}.attn.hook_pattern, hook_resid_pre,
    hook_attn_out, hook_resid_mid, hook_mlp_out) and the transcoders' skip paths."""
    check_graph_model(lm)
    parts = block_parts(lm)
    layers = []

    def t(x: torch.Tensor) -> torch.Tensor:  # the graph is built on the CPU, in ``dtype``
        return x.detach().to("cpu", dtype)

    for index, part in enumerate(parts):
        pre, attn = cache[f"blocks.{index}.hook_resid_pre"][0], cache[f"blocks.{index}.hook_attn_out"][0]
        mid, mlp = cache[f"blocks.{index}.hook_resid_mid"][0], cache[f"blocks.{index}.hook_mlp_out"][0]
        norm1 = part.norm
        norm2 = lm.model.bert.encoder.layer[index].output.LayerNorm
        y1, y2 = t(pre) + t(attn), t(mid) + t(mlp)
        sigma1, sigma2 = norm_scale(y1, norm1.eps), norm_scale(y2, norm2.eps)  # [P, 1]
        tc = transcoders.get(index)
        layers.append(LayerParts(t(part.value.weight), t(part.value.bias), t(part.output.weight), t(part.output.bias),
                                 t(norm1.weight), t(norm1.bias), t(norm2.weight), t(norm2.bias),
                                 t(cache[f"blocks.{index}.attn.hook_pattern"][0]), sigma1, sigma2,
                                 None if tc is None or tc.W_skip is None else t(tc.W_skip)))
    n_pos = layers[0].pattern.shape[-1]
    return FrozenModel(layers, head, lm.model.config.num_attention_heads, n_pos, lm.hidden_size, dtype)


HEADS = {  # how the graph reads the head (masked-LM transform or classifier), in a few words: the only list of them
    "frozen": "held",  # its GELU (tanh) and LayerNorm scale at the real run's: every sum exact (circuit-tracer's)
    "linear": "to first order",  # its slope and the scale's response at the real run: sizes as the model's
}


def _slope(fn: Any, u: torch.Tensor) -> torch.Tensor:
    """f'(u), elementwise."""
    return torch.func.vmap(torch.func.grad(fn))(u.reshape(-1)).reshape(u.shape)


def _at_real_value(head: Head, h: torch.Tensor, real: float) -> Head:
    """``head`` with its offset moved so that the real final hidden state ``h`` [d] gives the ``real`` value (a
    linear head: the first-order map's constant)."""
    value = FrozenModel([], head, 1, 1, len(h), h.dtype).head_value(h[None])
    head.offset += real - float(value[0])
    return head


def check_head(head: str) -> str:
    if head not in HEADS:
        raise BertScopeError(f"head is one of {', '.join(HEADS)}, not {head!r}.")
    return head


def mlm_head(lm: LoadedModel, final: torch.Tensor, position: int, target: int, contrast: int | None,
             dtype: torch.dtype, head: str = "frozen") -> Head:
    """The masked-LM head at ``position``, its value logit[target] − logit[contrast] (or − the mean logit), at the
    real final hidden state ``final`` [P, d]: ``head="frozen"`` holds the transform's GELU as its ratio to its input
    and its LayerNorm's scale (linear, exact at the real state: the graph's sums hold with no constant);
    ``"linear"``: the head to first order there (the GELU's slope, the scale's response), so a write moves the
    value as it moves the real head's, a constant making up the rest."""
    module = lm.model.cls.predictions
    dense, norm, decoder = module.transform.dense, module.transform.LayerNorm, module.decoder
    act = module.transform.transform_act_fn
    with torch.no_grad():
        h = final[position].to("cpu", dtype)
        w1, b1 = dense.weight.detach().to("cpu", dtype), dense.bias.detach().to("cpu", dtype)
        u = h @ w1.T + b1
        held = ratio(act, u.float()).to(dtype)
        g = u * held  # the GELU's output at the real state
        factor = held if check_head(head) == "frozen" else _slope(act, u.float()).to(dtype)
        sigma = norm_scale(g, norm.eps)  # [1]
        weight = decoder.weight.detach().to("cpu", dtype)  # [V, d]
        bias = (decoder.bias if decoder.bias is not None else module.bias).detach().to("cpu", dtype)
        base_w = weight[contrast] if contrast is not None else weight.mean(0)
        base_b = bias[contrast] if contrast is not None else bias.mean()
        gamma, beta = norm.weight.detach().to("cpu", dtype), norm.bias.detach().to("cpu", dtype)
        out = Head("token", position, w1, b1, factor, gamma, beta, sigma.reshape(1), weight[target] - base_w,
                   float(bias[target] - base_b), None if head == "frozen" else _center(g) / sigma)
        if head == "frozen":
            return out
        real = float((_center(g) / sigma * gamma + beta) @ out.readout) + out.offset
        return _at_real_value(out, h, real)


def class_head(lm: LoadedModel, final: torch.Tensor, target: int, contrast: int | None, dtype: torch.dtype,
               head: str = "frozen") -> Head:
    """A BERT sequence classifier's decision at [CLS]: the pooler (dense, tanh frozen as a ratio, or at its slope
    for ``head="linear"``), then the classifier; value logit[target] − logit[contrast] (or − the mean logit)."""
    pooler, classifier = lm.model.bert.pooler.dense, lm.model.classifier
    with torch.no_grad():
        h = final[0].to("cpu", dtype)
        w1, b1 = pooler.weight.detach().to("cpu", dtype), pooler.bias.detach().to("cpu", dtype)
        u = h @ w1.T + b1
        factor = (ratio if check_head(head) == "frozen" else _slope)(torch.tanh, u.float()).to(dtype)
        weight, bias = classifier.weight.detach().to("cpu", dtype), classifier.bias.detach().to("cpu", dtype)
        if len(weight) == 1:  # one output (a score): its logit, no contrast
            readout, offset = weight[0], float(bias[0])
        else:
            readout = weight[target] - (weight[contrast] if contrast is not None else weight.mean(0))
            offset = float(bias[target] - (bias[contrast] if contrast is not None else bias.mean()))
        out = Head("class", 0, w1, b1, factor, None, None, None, readout, offset)
        if head == "frozen":
            return out
        return _at_real_value(out, h, float(torch.tanh(u) @ readout) + offset)
