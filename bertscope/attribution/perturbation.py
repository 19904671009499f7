"""The peers' perturbation and noise attributions, computed by captum's own implementations (not
written again) on BertScope's decisions: a masked token, NSP/SOP, a probe's class, a task model's
class, tag or span.

- **Occlusion** (Zeiler & Fergus 2014): each word piece's embedding replaced by the baseline's, one
  token at a time; a token's score is the fall of ``f`` (captum ``Occlusion``, a window of one token).
- **LIME** (Ribeiro, Singh & Guestrin 2016): a weighted linear model of ``f`` over random subsets of
  the tokens kept (the others replaced by the baseline); the kernel and the ridge model are the
  ``lime`` package's text defaults (cosine distance of the kept-token vector × 100, width 25;
  ``Ridge(alpha=1)``), run through captum ``Lime``.
- **KernelSHAP** (Lundberg & Lee 2017): Shapley values of the tokens by the Shapley kernel's weighted
  regression, computed by the authors' ``shap`` package (``KernelExplainer``, no L1 selection): its
  regression is constrained so the values sum to ``f(x) − f(x')`` (efficiency; the gap is reported
  as IG's completeness is), and a sentence of up to 7 content tokens is enumerated, so exact. captum's
  ``KernelShap`` is not constrained: its sums missed ``f(x) − f(x')`` by up to 25 % (13-25 % in four of five
  runs of 200 to 4,000 coalitions on a 12-token sentence), so it is not the one used.
- **SmoothGrad** (Smilkov et al. 2017) and **VarGrad** (Adebayo et al. 2018): gradient × input
  averaged (SmoothGrad) or its variance taken (VarGrad) over Gaussian noise added to the embeddings,
  σ = 15 % of the embeddings' range (the paper's 10-20 %), through captum ``NoiseTunnel``. VarGrad's
  scores are variances: they rank tokens by how unstable their attribution is, never signed.

The baseline ``x'`` is integrated gradients' (``gradients.input_embeddings``): the padding token's
embedding at every content position, special and mask tokens kept. Per-token scores sum an
attribution over the embedding's dimensions (occlusion's window gives every dimension of a token the
same fall: one is read). Sampling methods are seeded (the same input, the same scores); the model
passes run in batches bounded by bytes, and a progress callback hears every pass (it may raise to stop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import torch

from bertscope.attribution.gradients import Attribution, Target, input_embeddings, score_function
from bertscope.core.batch_plan import output_bytes
from bertscope.core.hooked_pass import turn
from bertscope.core.inspection import Inspection
from bertscope.core.models import LoadedModel

SAMPLES = 200  # LIME's and KernelSHAP's coalitions (captum's defaults, 50 and 25, are too few for a sentence)
NOISE_SAMPLES = 20  # SmoothGrad's and VarGrad's noisy copies
NOISE_FRACTION = 0.15  # σ as a share of the embeddings' range (max − min)
KERNEL_WIDTH = 25.0  # the lime package's LimeTextExplainer
PASS_BYTES = 512 * 2**20  # activations of one batch of perturbed inputs


def _batch(lm: LoadedModel, ins: Inspection, target: Target, backward: bool) -> int:
    """Perturbed inputs in one pass, bounded by bytes (a backward keeps the forward's activations)."""
    row = output_bytes(lm, ins.n_tokens, False, True, target.kind == "token") * (3 if backward else 1)
    return max(1, PASS_BYTES // max(1, row))


def _token_groups(lm: LoadedModel, ins: Inspection, x: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
    """(feature mask [1, token, emb]: each content token its own group, the kept tokens — special and
    mask, equal to the baseline — one group 0; the group of each token [token])."""
    mask_id = lm.tokenizer.mask_token_id if lm.tokenizer.mask_token_id is not None else -1
    groups = np.zeros(ins.n_tokens, dtype=np.int64)
    content = np.flatnonzero(~ins.special_mask & (ins.input_ids != mask_id))
    groups[content] = np.arange(1, len(content) + 1)
    mask = torch.from_numpy(groups)[None, :, None].expand_as(x).to(x.device).contiguous()
    return mask, groups


def _counting(f: Callable, lm: LoadedModel, total: int, progress: Callable[[int, int], None] | None) -> Callable:
    """``f`` on the model's dtype, returned in float32, telling ``progress`` of every perturbed input."""
    done = [0]

    def forward(e: torch.Tensor) -> torch.Tensor:
        value = f(e.to(lm.dtype)).float()  # [batch]
        done[0] += e.shape[0]
        if progress:
            progress(min(done[0], total), total)
        return value
    return forward


def _ends(lm: LoadedModel, f: Callable, x: torch.Tensor, base: torch.Tensor) -> tuple[float, float]:
    with torch.inference_mode():
        ends = f(torch.cat([x, base]).to(lm.dtype)).float()  # [2]: f(x), f(x')
    return float(ends[0]), float(ends[1])


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Captum samples with torch's global generator: a forked one, seeded, leaves the caller's alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def occlusion(lm: LoadedModel, ins: Inspection, target: Target, progress: Callable[[int, int], None] | None = None
              ) -> Attribution:
    """f(x) − f(x with token i at the baseline), for every token (0 for special and mask tokens)."""
    from captum.attr import Occlusion

    f, target = score_function(lm, ins, target)
    x, base = input_embeddings(lm, ins)  # [1, token, emb] each
    forward = _counting(f, lm, ins.n_tokens + 1, progress)
    with turn(lm), torch.no_grad():
        a = Occlusion(forward).attribute(x, sliding_window_shapes=(1, x.shape[-1]), strides=(1, x.shape[-1]),
                                         baselines=base, perturbations_per_eval=_batch(lm, ins, target, False))
    fx, fb = _ends(lm, f, x, base)
    return Attribution(a[0, :, 0].detach().cpu().numpy().astype(np.float64), fx, fb, None, ins.n_tokens, target)


def _lime_kernel(original, perturbed, kept, **_) -> float:
    """The lime package's text kernel: cosine distance of the kept-token vector to all-kept, × 100, width 25."""
    z = kept.float().flatten()
    cosine = float(z.sum()) / (float(z.norm()) * float(np.sqrt(z.numel()))) if z.sum() > 0 else 0.0
    return float(np.sqrt(np.exp(-((1 - cosine) * 100) ** 2 / KERNEL_WIDTH ** 2)))


def lime(lm: LoadedModel, ins: Inspection, target: Target, samples: int = SAMPLES, seed: int = 0,
         progress: Callable[[int, int], None] | None = None) -> Attribution:
    """LIME's ridge coefficients, one per content token, over ``samples`` random coalitions."""
    from captum._utils.models.linear_model import SkLearnRidge
    from captum.attr import Lime

    f, target = score_function(lm, ins, target)
    x, base = input_embeddings(lm, ins)  # [1, token, emb] each
    mask, groups = _token_groups(lm, ins, x)
    explainer = Lime(_counting(f, lm, samples, progress), interpretable_model=SkLearnRidge(alpha=1.0),
                     similarity_func=_lime_kernel)
    with _seeded(seed), turn(lm), torch.no_grad():
        a = explainer.attribute(x, baselines=base, feature_mask=mask, n_samples=samples,
                                perturbations_per_eval=_batch(lm, ins, target, False))
    scores = a[0, :, 0].detach().cpu().numpy().astype(np.float64)  # one value per group, spread over its elements
    scores[groups == 0] = 0.0  # the kept tokens are the baseline's too: nothing of them was removed
    fx, fb = _ends(lm, f, x, base)
    return Attribution(scores, fx, fb, None, samples, target)


def kernel_shap(lm: LoadedModel, ins: Inspection, target: Target, samples: int = SAMPLES, seed: int = 0,
                progress: Callable[[int, int], None] | None = None) -> Attribution:
    """KernelSHAP's Shapley values, one per content token, over ``samples`` coalitions (shap's
    ``KernelExplainer`` on the kept-token vectors; all of them when there are fewer)."""
    import shap

    f, target = score_function(lm, ins, target)
    x, base = input_embeddings(lm, ins)  # [1, token, emb] each
    _, groups = _token_groups(lm, ins, x)
    content = torch.from_numpy(np.flatnonzero(groups)).to(x.device)  # [feature] the tokens explained
    m = len(content)
    fx, fb = _ends(lm, f, x, base)
    scores = np.zeros(ins.n_tokens)
    if m == 0:
        return Attribution(scores, fx, fb, 0.0, 0, target)
    batch = _batch(lm, ins, target, False)
    forward = _counting(f, lm, min(samples, 2 ** m), progress)

    def coalition_values(kept: np.ndarray) -> np.ndarray:  # [coalition, feature] 0/1 -> [coalition] f
        out = []
        with turn(lm), torch.inference_mode():
            for start in range(0, len(kept), batch):
                z = torch.as_tensor(kept[start:start + batch], dtype=x.dtype, device=x.device)  # [b, feature]
                e = base.expand(len(z), -1, -1).clone()  # [b, token, emb]
                e[:, content] = base[:, content] + z[..., None] * (x - base)[:, content]
                out.append(forward(e).cpu().numpy())
        return np.concatenate(out).astype(np.float64)

    state = np.random.get_state()
    np.random.seed(seed)
    try:
        explainer = shap.KernelExplainer(coalition_values, np.zeros((1, m)))
        phi = explainer.shap_values(np.ones((1, m)), nsamples=samples, l1_reg=False, silent=True)
    finally:
        np.random.set_state(state)
    scores[groups > 0] = np.asarray(phi, dtype=np.float64).reshape(-1)[:m]
    error = abs(float(scores.sum()) - (fx - fb)) / max(abs(fx - fb), 1e-6)
    return Attribution(scores, fx, fb, error, samples, target)


def noise_tunnel(lm: LoadedModel, ins: Inspection, target: Target, kind: str = "smoothgrad",
                 samples: int = NOISE_SAMPLES, seed: int = 0, progress: Callable[[int, int], None] | None = None
                 ) -> Attribution:
    """Gradient × input over ``samples`` noisy copies: their mean (``smoothgrad``) or variance (``vargrad``)."""
    from captum.attr import InputXGradient, NoiseTunnel

    f, target = score_function(lm, ins, target)
    x, base = input_embeddings(lm, ins)
    sigma = NOISE_FRACTION * float(x.max() - x.min())
    forward = _counting(f, lm, samples, progress)
    with _seeded(seed), turn(lm), torch.enable_grad():
        a = NoiseTunnel(InputXGradient(forward)).attribute(
            x, nt_type=kind, nt_samples=samples, stdevs=sigma, nt_samples_batch_size=_batch(lm, ins, target, True))
    scores = a[0].detach().float().sum(-1).cpu().numpy().astype(np.float64)  # [token]
    fx, fb = _ends(lm, f, x, base)
    return Attribution(scores, fx, fb, None, samples, target)
