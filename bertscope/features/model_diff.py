"""What fine-tuning added, latent by latent: a crosscoder's decoder norms in the base and the fine-tuned model,
and Latent Scaling to tell latents the fine-tuning really added from artifacts of the sparsity (Minder, Dumas
et al. 2025; reference: science-of-finetuning/sparsity-artifacts-crosscoders, ``tools/latent_scaler/
closed_form.py``, ``scripts/compute_scalers.py``, ``notebooks/art.py``).

- **Relative decoder norm** (the paper's Δnorm): ``½ ((n_ft − n_base) / max(n_ft, n_base) + 1)``: 0 for a latent
  only the base writes, 1 for one only the fine-tuned model writes. Classes as the paper draws them:
  base-only < 0.1, fine-tuned-only ≥ 0.9, shared 0.4-0.6, the rest "other"; latents that never fire apart.
- **Latent Scaling**: for each latent j and model m, the least-squares scale of the fine-tuned decoder direction
  ``d_j`` that best explains a target: ``β = d_jᵀ Σ_i f_ij y_i / (‖d_j‖² Σ_i f_ij²)``, with codes in threshold
  mode. Targets: the error of the reconstruction without latent j (``x_m − x̂_m + f_j d_j^m``) and the full
  reconstruction ``x̂_m``. ``ν^ε = β^ε_base / β^ε_ft`` near 1 says the base needs the latent as much (its base
  decoder shrank: complete shrinkage); a high ``ν^r`` says other latents rebuild it in the base (decoupling).
  A fine-tuned-only latent is *real* when Δnorm ≥ 0.9, |ν^ε| < 0.2 and |ν^r| < 0.5 (the paper's thresholds, on
  |ν| as its threshold sweeps take them).
- **Quality**: the fraction of variance explained on each side, L0 and dead latents on held-out text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet
from bertscope.features.crosscoder import BatchTopKCrosscoder
from bertscope.features.crosscoder_trainer import paired

CLASSES = ("base-only", "shared", "fine-tuned-only", "other", "never fires")
BASE_ONLY, FT_ONLY, SHARED = 0.1, 0.9, (0.4, 0.6)
REAL_ERROR, REAL_RECONSTRUCTION = 0.2, 0.5  # ν^ε and ν^r below these: a real fine-tuned-only latent


def relative_norms(cc: BatchTopKCrosscoder) -> np.ndarray:
    """[d_sae] Δnorm: 0 base-only, ½ equal, 1 fine-tuned-only."""
    n = cc.decoder_norms().cpu().numpy()  # [2, d_sae]
    return 0.5 * ((n[1] - n[0]) / np.maximum(np.maximum(n[0], n[1]), 1e-12) + 1)


def classify(delta: np.ndarray, fires: np.ndarray) -> np.ndarray:
    """[d_sae] class index into CLASSES from Δnorm and how often each latent fires."""
    out = np.full(len(delta), CLASSES.index("other"))
    out[delta < BASE_ONLY] = CLASSES.index("base-only")
    out[delta >= FT_ONLY] = CLASSES.index("fine-tuned-only")
    out[(delta >= SHARED[0]) & (delta < SHARED[1])] = CLASSES.index("shared")
    out[fires == 0] = CLASSES.index("never fires")
    return out


@dataclass(frozen=True)
class ModelDiff:
    """Every latent of a crosscoder: its norms, class, scales, and how well it rebuilds each side."""

    norms: np.ndarray  # [2, d_sae] decoder norm in the base (0) and the fine-tuned model (1)
    delta: np.ndarray  # [d_sae] relative norm, 0 base-only .. 1 fine-tuned-only
    cosine: np.ndarray  # [d_sae] cosine of the two decoder vectors
    fires: np.ndarray  # [d_sae] tokens where the latent fires (threshold mode) in the evaluation text
    classes: np.ndarray  # [d_sae] index into CLASSES
    beta_error: np.ndarray  # [2, d_sae] β of the error target, base and fine-tuned (NaN: never fires)
    beta_reconstruction: np.ndarray  # [2, d_sae]
    fve: tuple[float, float]  # fraction of variance explained, base and fine-tuned
    l0: float  # latents firing a token, on average
    tokens: int

    @property
    def nu_error(self) -> np.ndarray:
        return self.beta_error[0] / self.beta_error[1]

    @property
    def nu_reconstruction(self) -> np.ndarray:
        return self.beta_reconstruction[0] / self.beta_reconstruction[1]

    @property
    def real_fine_tuned_only(self) -> np.ndarray:
        """[d_sae] bool: fine-tuned-only by norm, and neither shrinkage nor decoupling explains it."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return (self.delta >= FT_ONLY) & (self.fires > 0) & (np.abs(self.nu_error) < REAL_ERROR) & \
                (np.abs(self.nu_reconstruction) < REAL_RECONSTRUCTION)

    def counts(self) -> dict[str, int]:
        found = {name: int((self.classes == i).sum()) for i, name in enumerate(CLASSES)}
        found["fine-tuned-only, real"] = int(self.real_fine_tuned_only.sum())
        return found


@torch.no_grad()
def diff_models(cc: BatchTopKCrosscoder, base: ActivationSet, tuned: ActivationSet, max_tokens: int = 200_000,
               batch_tokens: int = 4096) -> ModelDiff:
    """Norms, classes, Latent Scaling and quality of ``cc`` on the two caches (held-out text, rows aligned).

    Args:
        cc: the crosscoder (its threshold set: codes are read in threshold mode).
        base: the base model's activations at the crosscoder's hook point.
        tuned: the fine-tuned model's, on the same word pieces, row for row.
        max_tokens: rows read, at most, from the start of the caches.
        batch_tokens: rows a batch.

    Returns:
        A ``ModelDiff``: [2, d_sae] decoder norms (base, fine-tuned); [d_sae] relative norm, cosine of the two decoder
            rows, firing count and class (``CLASSES``); [2, d_sae] β of the error and the reconstruction targets (NaN
            where a latent never fires); each side's FVE; L0; the tokens read.
    """
    paired(base, tuned)
    if base.rows.shape[1] != cc.d_in:
        raise BertScopeError(f"The activations are {base.rows.shape[1]} wide; the crosscoder reads {cc.d_in}.")
    device = cc.W_dec.device
    d_ft = cc.W_dec[1]  # [d_sae, d_in]: the direction Latent Scaling fits, for both models (the reference's)
    dot = (cc.W_dec * d_ft).sum(-1)  # [2, d_sae]: d_j^m · d_j
    norm_d = d_ft.pow(2).sum(-1)  # [d_sae]
    f_sq = torch.zeros(cc.d_sae, dtype=torch.float64, device=device)
    fires = torch.zeros(cc.d_sae, dtype=torch.long, device=device)
    e_num = torch.zeros(2, cc.d_sae, dtype=torch.float64, device=device)  # Σ f_j (d_j · e), per model
    r_num = torch.zeros(2, cc.d_sae, dtype=torch.float64, device=device)  # Σ f_j (d_j · x̂), per model
    sq_err = torch.zeros(2, dtype=torch.float64, device=device)
    sums = torch.zeros(2, cc.d_in, dtype=torch.float64, device=device)
    sq = torch.zeros(2, dtype=torch.float64, device=device)
    active, seen = 0.0, 0
    n = min(base.tokens, max_tokens)
    for start in range(0, n, batch_tokens):
        stop = min(n, start + batch_tokens)
        x = torch.from_numpy(np.stack([np.asarray(base.rows[start:stop], np.float32),
                                       np.asarray(tuned.rows[start:stop], np.float32)], axis=1)).to(device)
        f = cc.encode(x, use_threshold=True)  # [b, d_sae]
        recon = cc.decode(f)  # [b, 2, d_in]
        error = x - recon
        for m in range(2):
            e_num[m] += ((f.T @ error[:, m]) * d_ft).sum(-1).double()  # d_j · Σ f_ij e_i
            r_num[m] += ((f.T @ recon[:, m]) * d_ft).sum(-1).double()
        f_sq += f.pow(2).sum(0).double()
        fires += (f > 0).sum(0)
        sq_err += error.pow(2).sum((0, 2)).double()
        sums += x.sum(0).double()
        sq += x.pow(2).sum((0, 2)).double()
        active += float((f > 0).sum())
        seen += len(x)
    if not seen:
        raise BertScopeError("No tokens to evaluate the crosscoder on.")
    variance = sq - sums.pow(2).sum(-1) / seen  # Σ ‖x − mean‖² per model
    fve = 1 - sq_err / variance
    denominator = (norm_d.double() * f_sq)[None]  # [1, d_sae]
    # the error target adds latent j's own part back: d_j · Σ f_ij (e_i + f_ij d_j^m); 0 / 0 (never fires) is NaN
    beta_error = ((e_num + f_sq[None] * dot.double()) / denominator).cpu().numpy()
    beta_reconstruction = (r_num / denominator).cpu().numpy()
    fires_np = fires.cpu().numpy()
    beta_error[:, fires_np == 0] = np.nan
    beta_reconstruction[:, fires_np == 0] = np.nan
    norms = cc.decoder_norms().cpu().numpy()
    cosine = torch.nn.functional.cosine_similarity(cc.W_dec[0], cc.W_dec[1], dim=-1).cpu().numpy()
    delta = relative_norms(cc)
    return ModelDiff(norms, delta, cosine, fires_np, classify(delta, fires_np), beta_error, beta_reconstruction,
                     (float(fve[0]), float(fve[1])), active / seen, seen)
