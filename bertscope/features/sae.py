"""A TopK sparse autoencoder (Gao et al. 2024, "Scaling and evaluating sparse autoencoders", §2.3),
saved and loaded in SAELens's on-disk format.

    pre  = (x - b_dec) @ W_enc + b_enc          # [token, d_sae]; b_dec is also the pre-encoder bias
    z    = the k largest of pre, through a ReLU; every other latent 0
    x̂    = z @ W_dec + b_dec                    # [token, d_in]; W_dec's rows (latents) at unit norm

Checked against openai/sparse_autoencoder (``model.py``: ``Autoencoder`` with ``pre_bias`` and
``TopK``) and SAELens (``sae_lens/saes/topk_sae.py``: ``TopK``, ``TopKSAE.encode``/``decode``;
``sae.py``: ``process_sae_in`` subtracts ``b_dec`` when ``apply_b_dec_to_input``). The sparse decode
sums the k chosen rows of W_dec (``embedding_bag``, as EleutherAI's sparsify does), which equals the
dense product (tested).

On disk (SAELens's ``cfg.json`` + ``sae_weights.safetensors``: W_enc [d_in, d_sae], b_enc [d_sae],
W_dec [d_sae, d_in], b_dec [d_in]); ``metadata`` carries ``model_name`` and ``hook_name`` (the same
hook names as BertScope's), and BertScope's own facts under ``bertscope``. SAELens-format SAEs of
the ``standard`` (ReLU) and ``jumprelu`` architectures load too.
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

CFG_FILE = "cfg.json"  # SAELens's SAE_CFG_FILENAME
WEIGHTS_FILE = "sae_weights.safetensors"  # SAELens's SAE_WEIGHTS_FILENAME
ARCHITECTURES = ("topk", "standard", "jumprelu")
SAELENS_FORMAT = "6.0.0"  # the SAELens release whose cfg.json layout (a metadata block) these files follow


def same_model(made_for: str, name: str) -> bool:
    """Whether a dictionary made for ``made_for`` reads the model loaded as ``name``: the same name, or two spellings
    of one folder (``./runs/base`` and ``/home/me/runs/base``)."""
    if made_for == name:
        return True
    try:
        a, b = Path(made_for).expanduser(), Path(name).expanduser()
        return a.is_dir() and b.is_dir() and a.resolve() == b.resolve()
    except (OSError, RuntimeError, ValueError):  # a name from another machine's file: no folder here
        return False


@dataclass
class SaeInfo:
    """What an SAE was made for: the model and the hook point it reads, and how it was trained."""

    model_name: str
    hook_name: str  # blocks.{l}.hook_resid_post: layer l's output
    extra: dict[str, Any] = field(default_factory=dict)  # BertScope's own facts (tokens, corpus, seed, figures)

    @property
    def layer(self) -> int | None:
        parts = self.hook_name.split(".")
        return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None


class TopKSAE(nn.Module):
    """TopK (``architecture="topk"``); ``standard`` (ReLU on every latent) and ``jumprelu`` (a
    threshold per latent) are read from SAELens files and run the same way."""

    def __init__(self, d_in: int, d_sae: int, k: int, architecture: str = "topk", info: SaeInfo | None = None,
                 seed: int = 0) -> None:
        super().__init__()
        if architecture not in ARCHITECTURES:
            raise BertScopeError(f"Unknown SAE architecture {architecture!r}: BertScope reads {', '.join(ARCHITECTURES)}.")
        if architecture == "topk" and not 0 < k < d_sae:
            raise BertScopeError(f"k must be between 1 and {d_sae - 1} (the latents, {d_sae}, less one); got {k}.")
        self.d_in, self.d_sae, self.k, self.architecture = d_in, d_sae, k, architecture
        self.info = info or SaeInfo("", "")
        generator = torch.Generator().manual_seed(seed)
        w_dec = torch.randn(d_sae, d_in, generator=generator)
        w_dec /= w_dec.norm(dim=1, keepdim=True)  # each latent's direction at unit norm
        self.W_dec = nn.Parameter(w_dec)  # [d_sae, d_in]
        self.W_enc = nn.Parameter(w_dec.t().contiguous())  # [d_in, d_sae]: the transpose at the start (Gao et al. §2.3)
        self.b_enc = nn.Parameter(torch.zeros(d_sae))
        self.b_dec = nn.Parameter(torch.zeros(d_in))
        self.register_buffer("threshold", torch.zeros(d_sae))  # jumprelu only

    # -- the pass ------------------------------------------------------------------------------
    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_in] -> [..., d_sae] before the sparsity."""
        return (x.to(self.W_enc.dtype) - self.b_dec) @ self.W_enc + self.b_enc

    def encode_topk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(values [..., k], indices [..., k]) of the active latents: the k largest pre-activations
        through a ReLU (a value may be 0: a latent chosen but not firing)."""
        if self.architecture != "topk":
            raise BertScopeError("encode_topk is for TopK SAEs; use encode.")
        top = self.pre_activations(x).topk(self.k, dim=-1, sorted=False)
        return F.relu(top.values), top.indices

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., d_in] -> dense latents [..., d_sae] (zeros where a latent does not fire)."""
        pre = self.pre_activations(x)
        if self.architecture == "topk":
            top = pre.topk(self.k, dim=-1, sorted=False)
            return torch.zeros_like(pre).scatter_(-1, top.indices, F.relu(top.values))
        if self.architecture == "jumprelu":
            return F.relu(pre) * (pre > self.threshold)
        return F.relu(pre)

    def firings(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The latents that fire on each row of ``x`` ([n, d_in]) as triplets: (row [m], latent [m],
        activation [m]), never the dense [n, d_sae] matrix for a TopK SAE."""
        if self.architecture == "topk":
            values, indices = self.encode_topk(x)  # [n, k] each
            rows = torch.arange(len(x), device=x.device).repeat_interleave(self.k)
            values, indices = values.flatten(), indices.flatten()
            on = values > 0
            return rows[on], indices[on], values[on]
        z = self.encode(x)
        rows, latents = z.nonzero(as_tuple=True)
        return rows, latents, z[rows, latents]

    def decode_topk(self, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The sum of the chosen latents' decoder rows, weighted ([n, k] each -> [n, d_in])."""
        return F.embedding_bag(indices, self.W_dec, per_sample_weights=values.to(self.W_dec.dtype),
                               mode="sum") + self.b_dec

    def reconstruct_topk(self, x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """The reconstruction given the active latents (the trainer's one call for an SAE and a transcoder)."""
        return self.decode_topk(values, indices)

    def parameter_names(self) -> list[str]:
        return ["W_enc", "b_enc", "W_dec", "b_dec"]

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Dense latents [..., d_sae] -> [..., d_in]."""
        return latents.to(self.W_dec.dtype) @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The reconstruction of ``x`` ([..., d_in]), in ``x``'s dtype."""
        if self.architecture == "topk":
            shape = x.shape
            values, indices = self.encode_topk(x.reshape(-1, shape[-1]))
            return self.decode_topk(values, indices).reshape(shape).to(x.dtype)
        return self.decode(self.encode(x)).to(x.dtype)

    # -- training helpers (Gao et al. §2.3, and openai/sparse_autoencoder's train loop) ---------
    @torch.no_grad()
    def normalise_decoder(self) -> None:
        self.W_dec /= self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)

    @torch.no_grad()
    def remove_parallel_gradient(self) -> None:
        """Drop the part of each decoder row's gradient along the row: the step then turns the
        direction instead of growing it (the norm is reset after the step anyway)."""
        if self.W_dec.grad is None:
            return
        rows = self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        self.W_dec.grad -= (self.W_dec.grad * rows).sum(dim=1, keepdim=True) * rows

    # -- checks --------------------------------------------------------------------------------
    def check_for(self, lm: Any, hook_name: str | None = None) -> None:
        """One line when this SAE does not fit ``lm`` (its width, or the model it was made for)."""
        made_for = self.info.model_name
        if made_for and not same_model(made_for, lm.name):
            raise BertScopeError(f"This SAE was made for {made_for}, not {lm.name}: load it with that model.")
        if self.d_in != lm.hidden_size:
            raise BertScopeError(f"The SAE reads vectors of {self.d_in} numbers; {lm.name}'s layers are "
                                 f"{lm.hidden_size} wide.")
        if hook_name is not None and self.info.hook_name and self.info.hook_name != hook_name:
            raise BertScopeError(f"This SAE reads {self.info.hook_name}, not {hook_name}.")

    def check_feature(self, feature: int) -> int:
        if not 0 <= int(feature) < self.d_sae:
            raise BertScopeError(f"Feature {feature} does not exist: this SAE has features 0 to {self.d_sae - 1}.")
        return int(feature)


def sae_config(sae: TopKSAE) -> dict[str, Any]:
    """SAELens's ``cfg.json`` for this SAE (``TopKSAEConfig.to_dict()``'s fields)."""
    cfg: dict[str, Any] = {
        "architecture": sae.architecture, "d_in": sae.d_in, "d_sae": sae.d_sae, "dtype": "float32",
        "device": "cpu", "apply_b_dec_to_input": True, "normalize_activations": "none",
        "reshape_activations": "none",
        # sae_lens_version: the format this file follows (SAELens reads a file without it as pre-6.0 and
        # rebuilds the metadata from top-level keys, losing model_name and hook_name); no SAELens wrote it
        "metadata": {"sae_lens_version": SAELENS_FORMAT, "sae_lens_training_version": None,
                     "model_name": sae.info.model_name, "hook_name": sae.info.hook_name, "hook_head_index": None,
                     "model_class_name": "HookedEncoder", "prepend_bos": True, "context_size": None,
                     "dataset_path": sae.info.extra.get("corpus"), "bertscope": sae.info.extra},
    }
    if sae.architecture == "topk":
        cfg["k"] = sae.k
    return cfg


def save_sae(sae: TopKSAE, folder: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write ``cfg.json`` and ``sae_weights.safetensors`` into ``folder`` (each file written whole,
    then renamed into place; fp16 halves the size).

    Args:
        sae: the SAE.
        folder: where it goes.
        dtype: float32, or float16 (half the size).

    Returns:
        The folder.
    """
    folder = Path(folder)
    tensors = {"W_enc": sae.W_enc, "b_enc": sae.b_enc, "W_dec": sae.W_dec, "b_dec": sae.b_dec}
    if sae.architecture == "jumprelu":
        tensors["threshold"] = sae.threshold
    tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in tensors.items()}
    cfg = sae_config(sae)
    cfg["dtype"] = str(dtype).removeprefix("torch.")
    write_dictionary(folder, tensors, cfg)
    return folder


def write_dictionary(folder: Path, tensors: dict[str, torch.Tensor], cfg: dict, weights_file: str = WEIGHTS_FILE) -> None:
    """A dictionary's folder (an SAE's, a crosscoder's, a transcoder's) in SAELens's layout: the weights, then
    ``cfg.json`` (what a reader looks for first), each written whole and renamed into place."""
    from safetensors.torch import save_file

    write_file(folder / weights_file, lambda tmp: save_file(tensors, str(tmp)))
    write_text(folder / CFG_FILE, json.dumps(cfg, indent=1))


def load_sae(folder: str | Path, device: str | torch.device = "cpu") -> TopKSAE:
    """An SAE from a SAELens-format folder (float32 on ``device``); one line for a folder that is not one.

    Args:
        folder: ``cfg.json`` and ``sae_weights.safetensors`` (SAELens's format).
        device: where the weights go.

    Returns:
        A ``TopKSAE``.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / CFG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        raise BertScopeError(f"{folder} is not an SAE folder: it needs {CFG_FILE} and {WEIGHTS_FILE} (SAELens's format).")
    try:
        cfg = json.loads((folder / CFG_FILE).read_text())
        tensors = load_file(str(folder / WEIGHTS_FILE))
    except (OSError, ValueError, SafetensorError) as err:  # a truncated file: safetensors' own error
        raise BertScopeError(f"Could not read the SAE in {folder}: {err}".splitlines()[0]) from err
    architecture = cfg.get("architecture", "standard")
    if cfg.get("normalize_activations", "none") != "none":
        raise BertScopeError(f"This SAE normalises its inputs ({cfg['normalize_activations']}): BertScope reads SAEs "
                             "without input normalisation.")
    try:
        d_in, d_sae = int(cfg["d_in"]), int(cfg["d_sae"])
        shapes = {"W_enc": (d_in, d_sae), "b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        for name, shape in shapes.items():
            if tuple(tensors[name].shape) != shape:
                raise BertScopeError(f"{WEIGHTS_FILE}'s {name} is {tuple(tensors[name].shape)}, not {shape} as "
                                     f"{CFG_FILE} says.")
    except KeyError as err:
        raise BertScopeError(f"The SAE in {folder} lacks {err.args[0]}.") from err
    info = _info(cfg)
    sae = TopKSAE(d_in, d_sae, int(cfg.get("k", 0)) if architecture == "topk" else 0, architecture, info)
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(sae, name).copy_(tensors[name].float())
        if architecture == "jumprelu":
            sae.threshold.copy_(tensors["threshold"].float())
    return sae.to(device)


def _info(cfg: dict) -> SaeInfo:
    meta = cfg.get("metadata") or {}
    return SaeInfo(meta.get("model_name") or cfg.get("model_name") or "",
                   meta.get("hook_name") or cfg.get("hook_name") or "", dict(meta.get("bertscope") or {}))


def load_sae_info(folder: str | Path) -> SaeInfo:
    """What the SAE in ``folder`` was made for, from its ``cfg.json`` alone (no weights read)."""
    path = Path(folder) / CFG_FILE
    try:
        return _info(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        raise BertScopeError(f"Could not read {path}: {err}".splitlines()[0]) from err
    except (AttributeError, TypeError) as err:  # a cfg.json that is a list, or whose metadata is not an object
        raise BertScopeError(f"{path} is not a dictionary's cfg.json (an object with d_in, d_sae, metadata).") from err

