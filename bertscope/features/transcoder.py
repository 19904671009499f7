"""A transcoder: a sparse dictionary that replaces one feed-forward block, reading the block's input and writing
its output (Dunefsky, Chlenski & Nanda 2024, "Transcoders find interpretable LLM feature circuits"; Ameisen et al.
2025, "Circuit tracing"), with the TopK sparsity of ``features.sae`` and, for a **skip transcoder**, a linear path
beside the sparse one (Paulo, Shabalin & Belrose 2025, "Transcoders beat sparse autoencoders for interpretability").

    pre = x @ W_enc + b_enc                     # x: [token, d_in], the feed-forward's input (hook_resid_mid)
    z   = the k largest of pre, through a ReLU  # [token, d_sae]; every other feature 0
    ŷ   = z @ W_dec + b_dec (+ x @ W_skipᵀ)     # [token, d_out]: its output (hook_mlp_out), before the residual

In BERT (post-LayerNorm) the feed-forward reads ``blocks.{l}.hook_resid_mid`` (the attention sub-layer's
LayerNorm output) and writes ``blocks.{l}.hook_mlp_out`` (``output.dense``), which is added to its input and
normalised by the block's second LayerNorm: the transcoder stands where the feed-forward stood, the LayerNorm after
it untouched. Unlike an SAE there is no ``b_dec`` subtracted from the input (input and output are different spaces,
as SAELens's ``TranscoderConfig`` insists).

On disk, circuit-tracer's format (``circuit_tracer/transcoder/single_layer_transcoder.py``, 0.4.1): one
``layer_{l}.safetensors`` per layer with W_enc [d_sae, d_in] (feature-major, the transpose of SAELens's), W_dec
[d_sae, d_out], b_enc [d_sae], b_dec [d_out], W_skip [d_out, d_in] for a skip transcoder, and ``k`` (a 0-d tensor:
TopK), beside a ``config.yaml`` naming the model and the input and output hook points as its transcoder sets do.
circuit-tracer's format, not SAELens's: SAELens 6 has ``transcoder`` (ReLU), ``skip_transcoder`` and
``jumprelu_transcoder`` but no TopK transcoder. One difference, said: circuit-tracer's TopK keeps the k largest
pre-activations as they are, BertScope's (as Gao et al.'s and SAELens's TopK SAEs) puts them through a ReLU; how
often a chosen pre-activation is below zero is measured per layer (``negative_share`` in ``quality.json``: under
0.2 % for plain transcoders, 0.3-5 % for the shipped skip transcoders, up to 28 % for skip transcoders trained with
a quarter of their steps).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_file, write_text

INPUT_POINT, OUTPUT_POINT = "hook_resid_mid", "hook_mlp_out"  # blocks.{l}.<point>
CONFIG_FILE = "config.yaml"


def layer_file(folder: str | Path, layer: int) -> Path:
    return Path(folder) / f"layer_{layer}.safetensors"


@dataclass
class TranscoderInfo:
    """What a transcoder replaces: the model and the layer, and how it was trained."""

    model_name: str
    layer: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def input_hook(self) -> str:
        return f"blocks.{self.layer}.{INPUT_POINT}"

    @property
    def output_hook(self) -> str:
        return f"blocks.{self.layer}.{OUTPUT_POINT}"


class Transcoder(nn.Module):
    """A TopK transcoder, with a skip path when ``skip`` (W_skip starts at zero, as SAELens's ``SkipTranscoder``)."""

    def __init__(self, d_in: int, d_out: int, d_sae: int, k: int, skip: bool = False,
                 info: TranscoderInfo | None = None, seed: int = 0) -> None:
        super().__init__()
        if not 0 < k < d_sae:
            raise BertScopeError(f"k must be between 1 and {d_sae - 1} (the features, {d_sae}, less one); got {k}.")
        self.d_in, self.d_out, self.d_sae, self.k, self.skip = d_in, d_out, d_sae, k, skip
        self.info = info or TranscoderInfo("", 0)
        generator = torch.Generator().manual_seed(seed)
        w_dec = torch.randn(d_sae, d_out, generator=generator)
        w_dec /= w_dec.norm(dim=1, keepdim=True)  # each feature's output direction at unit norm
        w_enc = torch.randn(d_in, d_sae, generator=generator)
        self.W_dec = nn.Parameter(w_dec)  # [d_sae, d_out]
        self.W_enc = nn.Parameter(w_enc / w_enc.norm(dim=0, keepdim=True))  # [d_in, d_sae]: unit-norm columns
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_out))
        self.W_skip = nn.Parameter(torch.zeros(d_out, d_in)) if skip else None  # [d_out, d_in]

    # -- the pass ------------------------------------------------------------------------------
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_in] -> [..., d_sae] before the sparsity."""
        return x.to(self.W_enc.dtype) @ self.W_enc + self.b_enc

    def encode_topk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values [n, k], indices [n, k]) of the active features of ``x`` [n, d_in]."""
        top = self.pre_activations(x).topk(self.k, dim=-1, sorted=False)
        return F.relu(top.values), top.indices

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_in] -> dense activations [..., d_sae]."""
        pre = self.pre_activations(x)
        top = pre.topk(self.k, dim=-1, sorted=False)
        return torch.zeros_like(pre).scatter_(-1, top.indices, F.relu(top.values))

    def skip_path(self, x: torch.Tensor) -> torch.Tensor:
        """x @ W_skipᵀ ([..., d_out]), or 0 without a skip path."""
        if self.W_skip is None:
            return torch.zeros((*x.shape[:-1], self.d_out), dtype=self.W_dec.dtype, device=x.device)
        return x.to(self.W_skip.dtype) @ self.W_skip.T

    def decode_topk(self, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The sparse path's output: the chosen features' decoder rows, weighted, plus b_dec ([n, k] -> [n, d_out])."""
        return F.embedding_bag(indices, self.W_dec, per_sample_weights=values.to(self.W_dec.dtype),
                               mode="sum") + self.b_dec

    def reconstruct_topk(self, x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """What the transcoder writes for ``x`` [n, d_in] given its active features: sparse path plus skip."""
        return self.decode_topk(values, indices) + self.skip_path(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The feed-forward's output as the transcoder writes it, for ``x`` [..., d_in], in ``x``'s dtype."""
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        values, indices = self.encode_topk(flat)
        return self.reconstruct_topk(flat, values, indices).reshape(*shape[:-1], self.d_out).to(x.dtype)

    # -- training helpers (as ``TopKSAE``'s) ---------------------------------------------------
    @torch.no_grad()
    def normalise_decoder(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12))

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        if self.W_dec.grad is None:
            return
        rows = self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        self.W_dec.grad -= (self.W_dec.grad * rows).sum(dim=1, keepdim=True) * rows

    def parameter_names(self) -> list[str]:
        return ["W_enc", "b_enc", "W_dec", "b_dec", *(["W_skip"] if self.skip else [])]

    def check_for(self, lm: Any) -> None:
        """One line when this transcoder does not fit ``lm``."""
        from bertscope.features.sae import same_model

        made_for = self.info.model_name
        if made_for and not same_model(made_for, lm.name):
            raise BertScopeError(f"This transcoder was made for {made_for}, not {lm.name}: load it with that model.")
        if self.d_in != lm.hidden_size or self.d_out != lm.hidden_size:
            raise BertScopeError(f"The transcoder reads {self.d_in} and writes {self.d_out} numbers; {lm.name}'s "
                                 f"layers are {lm.hidden_size} wide.")
        if not 0 <= self.info.layer < lm.num_layers:
            raise BertScopeError(f"The transcoder replaces layer {self.info.layer}; {lm.name} has layers 0 to "
                                 f"{lm.num_layers - 1}.")


def save_transcoder(tc: Transcoder, folder: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """``layer_{l}.safetensors`` (circuit-tracer's keys and orientation) and the set's ``config.yaml`` in
    ``folder``; BertScope's facts in the file's metadata.

    Args:
        tc: the transcoder (its ``info.layer`` names the file).
        folder: the set's folder (one file a layer).
        dtype: float32, or float16 (half the size).

    Returns:
        The layer's file.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    tensors = {"W_enc": tc.W_enc.T, "W_dec": tc.W_dec, "b_enc": tc.b_enc, "b_dec": tc.b_dec}
    if tc.W_skip is not None:
        tensors["W_skip"] = tc.W_skip
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in tensors.items()}
    tensors["k"] = torch.tensor(tc.k)
    metadata = {"bertscope": json.dumps({"model_name": tc.info.model_name, "layer": tc.info.layer,
                                         "skip": tc.skip, **tc.info.extra})}
    path = layer_file(folder, tc.info.layer)
    write_file(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
    write_text(folder / CONFIG_FILE, "\n".join([
        "model_kind: transcoder_set", f"model_name: {tc.info.model_name}", f"feature_input_hook: {INPUT_POINT}",
        f"feature_output_hook: {OUTPUT_POINT}", "activation: topk", f"k: {tc.k}", f"skip_connection: {str(tc.skip).lower()}",
        "# written by BertScope: one layer_{l}.safetensors per layer, circuit-tracer's keys (W_enc [d_sae, d_in])", ""]))
    return path


def load_transcoder(folder: str | Path, layer: int, device: str | torch.device = "cpu") -> Transcoder:
    """Layer ``layer``'s transcoder from a set's folder; one line for what is not one.

    Args:
        folder: a set's folder (circuit-tracer's layout: ``layer_{l}.safetensors``).
        layer: the layer, from 0.
        device: where its float32 weights go.

    Returns:
        The ``Transcoder``.
    """
    from safetensors import SafetensorError, safe_open

    path = layer_file(folder, layer)
    if not path.is_file():
        raise BertScopeError(f"{folder} holds no transcoder for layer {layer} ({path.name}): train them with "
                             "`bertscope train-transcoders MODEL --out FOLDER`.")
    try:
        with safe_open(str(path), "pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open has no iterator
            facts = json.loads((f.metadata() or {}).get("bertscope", "{}"))
    except (OSError, ValueError, SafetensorError) as err:
        raise BertScopeError(f"Could not read {path}: {err}".splitlines()[0]) from err
    try:
        d_sae, d_in = tensors["W_enc"].shape
        d_out = tensors["b_dec"].shape[0]
        k = int(tensors["k"]) if "k" in tensors else 0
    except (KeyError, ValueError) as err:
        raise BertScopeError(f"{path} is not a transcoder (W_enc, W_dec, b_enc, b_dec, k).") from err
    if not k:
        raise BertScopeError(f"{path} is not a TopK transcoder (no k): BertScope reads TopK transcoders.")
    skip = "W_skip" in tensors
    info = TranscoderInfo(facts.pop("model_name", ""), int(facts.pop("layer", layer)), facts)
    facts.pop("skip", None)
    tc = Transcoder(int(d_in), int(d_out), int(d_sae), k, skip, info)
    with torch.no_grad():
        tc.W_enc.copy_(tensors["W_enc"].T.float())
        tc.W_dec.copy_(tensors["W_dec"].float())
        tc.b_enc.copy_(tensors["b_enc"].float())
        tc.b_dec.copy_(tensors["b_dec"].float())
        if tc.W_skip is not None:
            tc.W_skip.copy_(tensors["W_skip"].float())
    return tc.to(device)
