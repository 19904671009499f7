"""A BatchTopK crosscoder: one sparse dictionary read from and written to two models' activations at one layer
(Lindsey et al. 2024, "Sparse Crosscoders for Cross-Layer Features and Model Diffing"), in its BatchTopK form
(Minder, Dumas et al. 2025, "Overcoming Sparsity Artifacts in Crosscoders to Interpret Chat-Tuning"; their
reference, science-of-finetuning/dictionary_learning ``BatchTopKCrossCoder``, followed here).

Model 0 is the base, model 1 the fine-tuned one, both read at the same hook point on the same text.

- Encoder: ``z = ReLU(Σ_m x_m W_enc[m] + b_enc)``: both models' activations summed before one ReLU, one bias.
- A latent's weight is the sum of its decoder norms, ``s_j = Σ_m ‖W_dec[m, j]‖``. Training keeps the k·B largest
  ``z · s`` over the whole batch (BatchTopK) and decodes the raw ``z`` there; at inference a latent fires where
  ``z · s`` passes one threshold θ: the smallest kept ``z · s`` of a batch, averaged over batches (the reference
  follows it with a running mean over ~100k steps; ``crosscoder_trainer.calibrate_threshold`` computes it from
  the final weights).
- Decoder: ``x̂_m = f W_dec[m] + b_dec[m]``. Its rows are never normalised: each latent's norm in each model is
  the signal (a latent with no norm in the base is fine-tuned-only).

Saved as ``cfg.json`` and ``crosscoder.safetensors`` (``save_crosscoder``): SAELens's layout where it has one
(``architecture``, ``d_in``, ``d_sae``, ``k``, ``metadata.model_name``/``hook_name``), the two models' names in
``metadata.models``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertscope.errors import BertScopeError

ARCHITECTURE = "batchtopk_crosscoder"
CFG_FILE = "cfg.json"
WEIGHTS_FILE = "crosscoder.safetensors"
SIDES = ("base", "fine-tuned")


@dataclass
class CrosscoderInfo:
    """What a crosscoder reads: the two models (base, fine-tuned) at one hook point, and how it was trained."""

    models: tuple[str, str]
    hook_name: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def positions(self) -> str:
        """Where it reads: "pieces" (every word piece but the special tokens) or "cls" (each text's first token)."""
        return str(self.extra.get("positions", "pieces"))

    @property
    def layer(self) -> int | None:
        parts = self.hook_name.split(".")
        return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


class BatchTopKCrosscoder(nn.Module):
    """Two models' activations [batch, 2, d_in] -> latents [batch, d_sae] -> both models' reconstructions."""

    threshold: torch.Tensor  # a registered buffer: [] θ on z · s

    def __init__(self, d_in: int, d_sae: int, k: int, info: CrosscoderInfo | None = None, seed: int = 0,
                 init_scale: float = 1.0) -> None:
        super().__init__()
        if not 0 < k < d_sae:
            raise BertScopeError(f"k must be between 1 and {d_sae - 1} (the latents, {d_sae}, less one); got {k}.")
        self.d_in, self.d_sae, self.k = d_in, d_sae, k
        self.info = info or CrosscoderInfo(("", ""), "")
        generator = torch.Generator().manual_seed(seed)
        # the reference's init: one uniform draw [d_in, d_sae] for both models (its scale does not matter: each
        # latent's column is set to ``init_scale``), the decoder its transpose: both models start identical
        w = torch.rand(d_in, d_sae, generator=generator) * 2 - 1
        w = w / w.norm(dim=0, keepdim=True) * init_scale
        self.W_enc = nn.Parameter(torch.stack([w, w.clone()]))  # [2, d_in, d_sae]
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.W_dec = nn.Parameter(self.W_enc.detach().transpose(1, 2).contiguous())  # [2, d_sae, d_in]
        self.b_dec = nn.Parameter(torch.zeros(2, d_in))
        self.register_buffer("threshold", torch.tensor(-1.0))  # θ on z · s; below 0: not set yet

    # -- the pass ------------------------------------------------------------------------------------
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """[batch, 2, d_in] -> z [batch, d_sae]: ReLU of both models' encodings summed."""
        return torch.relu(torch.einsum("bmd,mdf->bf", x.to(self.W_enc.dtype), self.W_enc) + self.b_enc)

    def latent_weights(self) -> torch.Tensor:
        """s [d_sae]: each latent's decoder norms summed over the two models."""
        return self.W_dec.norm(dim=-1).sum(0)

    def encode(self, x: torch.Tensor, use_threshold: bool = True) -> torch.Tensor:
        """[batch, 2, d_in] -> f [batch, d_sae]. Threshold: z where z · s > θ (each row on its own; what analysis
        and the pages read). Without: the k·batch largest z · s of the whole batch (training's BatchTopK)."""
        z = self.pre_activations(x)
        scaled = z * self.latent_weights()
        if use_threshold:
            if float(self.threshold) < 0:
                raise BertScopeError("This crosscoder has no inference threshold yet (it is set while training).")
            return z * (scaled > self.threshold)
        flat = scaled.flatten()
        top = flat.topk(min(self.k * len(z), flat.numel()), sorted=False).indices
        return torch.zeros_like(flat).scatter_(0, top, z.flatten()[top]).view_as(z)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """f [batch, d_sae] -> [batch, 2, d_in]."""
        return torch.einsum("bf,mfd->bmd", f.to(self.W_dec.dtype), self.W_dec) + self.b_dec

    def forward(self, x: torch.Tensor, use_threshold: bool = True) -> torch.Tensor:
        return self.decode(self.encode(x, use_threshold))

    def decoder_norms(self) -> torch.Tensor:
        """[2, d_sae]: each latent's decoder norm in the base (0) and the fine-tuned model (1)."""
        return self.W_dec.detach().norm(dim=-1)


def crosscoder_config(cc: BatchTopKCrosscoder) -> dict[str, Any]:
    return {"architecture": ARCHITECTURE, "d_in": cc.d_in, "d_sae": cc.d_sae, "k": cc.k, "dtype": "float32",
            "n_models": 2, "sides": list(SIDES),
            "metadata": {"model_name": cc.info.models[1], "models": list(cc.info.models),
                         "hook_name": cc.info.hook_name, "bertscope": cc.info.extra}}


def save_crosscoder(cc: BatchTopKCrosscoder, folder: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """``cfg.json`` and ``crosscoder.safetensors`` (W_enc [2, d_in, d_sae], b_enc, W_dec [2, d_sae, d_in], b_dec
    [2, d_in], threshold) into ``folder``, each written whole then renamed into place.

    Args:
        cc: the crosscoder.
        folder: where it goes (made when missing).
        dtype: the weights' type on disk (``torch.float16`` halves the size); the threshold stays float32.

    Returns:
        ``folder``.
    """
    from bertscope.features.sae import write_dictionary

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    params: dict[str, torch.Tensor] = {"W_enc": cc.W_enc, "b_enc": cc.b_enc, "W_dec": cc.W_dec, "b_dec": cc.b_dec}
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in params.items()}
    tensors["threshold"] = cc.threshold.detach().cpu().float().reshape(1)
    cfg = crosscoder_config(cc)
    cfg["dtype"] = str(dtype).removeprefix("torch.")
    write_dictionary(folder, tensors, cfg, WEIGHTS_FILE)
    return folder


def load_crosscoder(folder: str | Path, device: str | torch.device = "cpu") -> BatchTopKCrosscoder:
    """A crosscoder from ``folder`` (float32 on ``device``); one line for a folder that is not one.

    Args:
        folder: a folder with ``cfg.json`` and ``crosscoder.safetensors`` (``save_crosscoder``), one layer's.
        device: where its weights go.

    Returns:
        The ``BatchTopKCrosscoder``, its ``info`` read from the metadata: the two models (base, fine-tuned), the hook
            point it reads and how it was trained.
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / CFG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        raise BertScopeError(f"{folder} is not a crosscoder folder: it needs {CFG_FILE} and {WEIGHTS_FILE}.")
    try:
        cfg = json.loads((folder / CFG_FILE).read_text())
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except Exception as err:  # OSError, JSON's ValueError, safetensors' own SafetensorError
        raise BertScopeError(f"Could not read the crosscoder in {folder}: {err}".splitlines()[0]) from err
    if not isinstance(cfg, dict) or cfg.get("architecture") != ARCHITECTURE:
        raise BertScopeError(f"{folder} holds a {cfg.get('architecture') if isinstance(cfg, dict) else None!r}, not a "
                             f"{ARCHITECTURE}.")
    try:
        d_in, d_sae, k = int(cfg["d_in"]), int(cfg["d_sae"]), int(cfg["k"])
        shapes = {"W_enc": (2, d_in, d_sae), "b_enc": (d_sae,), "W_dec": (2, d_sae, d_in), "b_dec": (2, d_in),
                  "threshold": (1,)}
        for name, shape in shapes.items():
            if tuple(tensors[name].shape) != shape:
                raise BertScopeError(f"{WEIGHTS_FILE}'s {name} is {tuple(tensors[name].shape)}, not {shape} as "
                                     f"{CFG_FILE} says.")
    except KeyError as err:
        raise BertScopeError(f"The crosscoder in {folder} lacks {err.args[0]}.") from err
    except (TypeError, ValueError) as err:
        raise BertScopeError(f"{folder}/{CFG_FILE} has a size that is not a number: {err}".splitlines()[0]) from err
    meta = cfg.get("metadata") or {}
    if not isinstance(meta, dict):
        raise BertScopeError(f"{folder}/{CFG_FILE}'s metadata is not an object.")
    models = [str(m) for m in (meta.get("models") or [])][:2]
    models += [""] * (2 - len(models))
    info = CrosscoderInfo((models[0], models[1]), meta.get("hook_name") or "", dict(meta.get("bertscope") or {}))
    cc = BatchTopKCrosscoder(d_in, d_sae, k, info)
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(cc, name).copy_(tensors[name].float())
        cc.threshold.copy_(tensors["threshold"].float().reshape(()))
    return cc.to(device)
