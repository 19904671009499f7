"""What each attention block moves between tokens, measured on the loaded model's own tensors:
norm-based attention and ALTI.

- **Norm-based attention** (Kobayashi, Kuribayashi, Yokoi & Inui 2020, "Attention is not only a
  weight", EMNLP; eq. 5-6): head h moves ``α_ij^h f_h(x_j)`` from token j to token i, with
  ``f_h(x) = (x W_V^h + b_V^h) W_O^h``; its size ``‖α f(x)‖`` can disagree with ``α``. Per head
  that is ``α_ij^h · ‖f_h(x_j)‖``; per layer ``‖Σ_h α_ij^h f_h(x_j)‖``.
- **ALTI** (Ferrando, Gállego & Costa-jussà 2022, "Measuring the Mixing of Contextual
  Information in the Transformer", EMNLP; section 3): the block's output
  ``y_i = LN(Σ_j Σ_h α_ij^h f_h(x_j) + b_O + x_i)`` is a sum of one vector per input token,
  ``T_i(x_j) = γ ⊙ centre(Σ_h α_ij^h f_h(x_j) + δ_ij x_j) / σ_i`` (plus terms of no token:
  biases and β), because LayerNorm is linear once its ``σ_i`` is fixed. Token j's share is
  ``max(0, ‖y_i‖₁ − ‖y_i − T_i(x_j)‖₁)``, normalised per row; layers compose by matrix
  product (the feed-forward block mixes nothing), as in the paper's rollout-style aggregation.

The pieces are read at the named hook points (block input, values, W_O's output, the
post-attention LayerNorm's output), one eager pass; nothing of the model is re-implemented. Reductions
run on the model's device in float32; the norms come from a [head, head] Gram matrix per key,
and ALTI's L1 distances from a block of queries at a time (the [query, key, dim] tensor of
BERT-large at 512 tokens is 1 GiB a layer); only [layer, query, key] comes back.
Supported: post-LayerNorm encoders whose blocks are BERT's (BERT, RoBERTa, XLM-R, ELECTRA,
CamemBERT, ERNIE), ALBERT's (shared layers: the same modules called once per layer) or
DistilBERT's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.block_modules import BlockParts, block_parts
from bertscope.core.forward import inspect
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel
from bertscope.core.passes import inspection_feed
from bertscope.errors import BertScopeError

CHUNK_BYTES = 64 * 2**20  # one [query block, key, dim] float32 slab


@dataclass(frozen=True, eq=False)
class BlockMeasures:
    """Norm-based attention and ALTI of one input, every layer."""

    inspection: Inspection  # the pass they were read from (tokens, raw attentions)
    head_value_norms: np.ndarray  # [layer, head, key] ‖f_h(x_j)‖
    norms: np.ndarray  # [layer, query, key] ‖Σ_h α_ij^h f_h(x_j)‖ (not normalised)
    alti: np.ndarray | None  # [layer, query, key] ALTI contributions of one layer; rows sum to 1
    # (None when computed with with_alti=False: the norms alone need no [query, key, dim] slab)
    alti_error: float  # max |Σ_j T_i(x_j) + terms of no token − y_i| over all layers, a self-check

    def head_norms(self, layer: int) -> np.ndarray:
        """[head, query, key] α_ij^h ‖f_h(x_j)‖ of ``layer`` (0-based)."""
        return self.inspection.attentions[layer] * self.head_value_norms[layer][:, None, :]

    def alti_aggregated(self) -> np.ndarray:
        """[layer, query, key]: contributions of the input tokens to each token after layer l,
        composed through the layers (rows sum to 1)."""
        if self.alti is None:
            raise BertScopeError("These measures were computed without ALTI.")
        return compose(self.alti)


def compose(per_layer: np.ndarray) -> np.ndarray:
    """[layer, q, k] -> [layer, q, k]: M_1, M_2 M_1, ... (the product runs in float64)."""
    out = np.empty_like(per_layer, dtype=np.float64)
    acc = np.eye(per_layer.shape[-1])
    for layer, m in enumerate(per_layer):
        acc = m.astype(np.float64) @ acc
        out[layer] = acc
    return out.astype(np.float32)


def _capture_pass(lm: LoadedModel, text: str, pair: str | None, template: Inspection | None
                  ) -> tuple[Inspection, list[tuple[torch.Tensor, ...]], list, list[BlockParts]]:
    """One eager pass; per layer (block input, values [1, token, head x d_head], LayerNorm input,
    LayerNorm output), read at the hook points; the LayerNorm's input is W_O's output plus the
    residual, added in the same order as the model adds them."""
    parts = block_parts(lm)
    if template is None:
        template = inspect(lm, text, pair, with_logits=False, with_attentions=False, with_hidden_states=False)
    feed = inspection_feed(lm, template)  # [1, token] each
    suffixes = ("hook_resid_pre", "attn.hook_v", "hook_attn_out", "hook_resid_mid")
    names = [f"blocks.{layer}.{s}" for layer in range(lm.num_layers) for s in suffixes]
    out, cache = lm.run_with_cache(feed, names, encoder_only=True, attentions=True)
    pieces = []
    for layer in range(lm.num_layers):
        x, v, attn_out, ln_out = (cache[f"blocks.{layer}.{s}"] for s in suffixes)
        pieces.append((x, v.reshape(*v.shape[:-2], -1), attn_out + x, ln_out))
    return template, pieces, list(out.attentions), parts


def _layer_measures(x: torch.Tensor, values: torch.Tensor, alpha: torch.Tensor, part: BlockParts,
                    ln_in: torch.Tensor, ln_out: torch.Tensor, n_heads: int, with_alti: bool = True
                    ) -> tuple[torch.Tensor, ...]:
    """One layer on the device, float32. x, values, ln_in, ln_out: [token, dim]; alpha: [head, q, k].
    Returns (‖f_h(x_j)‖ [head, key], norms [q, k], ALTI [q, k] or None, self-check error [])."""
    tokens, dim = x.shape
    d_head = values.shape[-1] // n_heads
    w_o = part.output.weight.float()  # [dim, head * d_head] (out, in)
    v = values.reshape(tokens, n_heads, d_head).transpose(0, 1)  # [head, key, d_head]
    f = torch.einsum("hkc,ehc->hke", v, w_o.reshape(dim, n_heads, d_head))  # [head, key, dim] f_h(x_j)
    value_norms = f.norm(dim=-1)  # [head, key]
    # ‖Σ_h α_h f_h‖² = Σ_{h,g} α_h α_g <f_h, f_g>: a [head, head] Gram matrix per key, no [q, k, dim] tensor
    gram = torch.einsum("hke,gke->khg", f, f)  # [key, head, head]
    a = alpha.permute(2, 1, 0)  # [key, query, head]
    norms = (torch.bmm(a, gram) * a).sum(-1).clamp_min(0).sqrt().T  # [q, k]
    gamma = part.norm.weight.float()  # [dim]
    sigma = torch.sqrt(ln_in.var(dim=-1, unbiased=False) + part.norm.eps)  # [query]
    scale = gamma[None, :] / sigma[:, None]  # [query, dim]: LayerNorm is linear once σ_i is fixed
    # terms of no token: centred b_O through LN, plus β: y_i = Σ_j T_i(x_j) + bias_i
    b_o = part.output.bias.float() if part.output.bias is not None else torch.zeros(dim, device=x.device)
    beta = part.norm.bias.float() if part.norm.bias is not None else torch.zeros(dim, device=x.device)
    bias = scale * (b_o - b_o.mean())[None, :] + beta  # [query, dim]
    y = ln_out  # [query, dim]
    # mean over dim of u_ij = Σ_h α f_h(x_j) + δ_ij x_j, from per-key means (cheap): [q, k]
    means = torch.einsum("hqk,hk->qk", alpha, f.mean(dim=-1)) + torch.diag(x.mean(dim=-1))
    # self-check of the decomposition: Σ_j T_i(x_j) + bias_i against the LayerNorm's own output
    total = torch.einsum("hqk,hke->qe", alpha, f) + x  # [q, dim] Σ_j u_ij
    error = (scale * (total - means.sum(dim=1, keepdim=True)) + bias - y).abs().max()
    if not with_alti:
        return value_norms, norms, None, error
    y_l1 = y.abs().sum(dim=-1)  # [query]
    contrib = torch.empty(tokens, tokens, device=x.device)  # [q, k]
    block = max(1, CHUNK_BYTES // max(1, tokens * dim * 4))
    f_by_key = f.transpose(0, 1)  # [key, head, dim]
    for start in range(0, tokens, block):
        q = slice(start, min(tokens, start + block))
        t = torch.bmm(a[:, q], f_by_key).transpose(0, 1)  # [q block, key, dim] Σ_h α f (one batched matmul)
        rows = torch.arange(q.start, q.stop, device=x.device)
        t[rows - q.start, rows] += x[rows]  # the residual: δ_ij x_j
        # T_i(x_j) − y_i, in place (the slab is the only [q, k, dim] tensor alive)
        t.sub_(means[q, :, None]).mul_(scale[q, None, :]).sub_(y[q, None, :])
        distance = t.abs_().sum(dim=-1)  # [q block, key] ‖y_i − T_i(x_j)‖₁
        contrib[q] = torch.clamp(y_l1[q, None] - distance, min=0)
        del t
    contrib = contrib / contrib.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return value_norms, norms, contrib, error


def block_measures(lm: LoadedModel, text: str | None, pair: str | None = None,
                   template: Inspection | None = None, with_alti: bool = True) -> BlockMeasures:
    """Norm-based attention and ALTI for ``text`` (and segment B ``pair``) on ``lm``; or for the
    ids of ``template`` (an input edited by ids, e.g. words masked) when given."""
    template, pieces, attentions, parts = _capture_pass(lm, text, pair, template)
    n_heads = lm.num_heads
    head_norms, norms, alti, errors = [], [], [], []
    with torch.inference_mode():
        for layer, ((x, values, ln_in, ln_out), alpha) in enumerate(zip(pieces, attentions)):
            measures = _layer_measures(x[0].float(), values[0].float(), alpha[0].float(), parts[layer],
                                       ln_in[0].float(), ln_out[0].float(), n_heads, with_alti)
            for store, value in zip((head_norms, norms, alti, errors), measures):
                store.append(value)
        stacked = [torch.stack(s).cpu().numpy() if s[0] is not None else None for s in (head_norms, norms, alti)]
        error = float(torch.stack(errors).max().cpu())
    attention = torch.stack(attentions)[:, 0].float().cpu().numpy()  # [layer, head, q, k]
    inspection = _with_attentions(template, attention)
    return BlockMeasures(inspection, stacked[0], stacked[1], stacked[2], error)


def _with_attentions(template: Inspection, attentions: np.ndarray) -> Inspection:
    from dataclasses import replace

    return replace(template, attentions=attentions)
