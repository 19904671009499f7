"""How good an SAE is, the way SAEBench reports it (Karvonen et al. 2025), on held-out text.

- Fraction of variance explained: 1 - Σ|x - x̂|² / Σ|x - mean|² over held-out word pieces.
- L0: latents firing per token (mean); dead: latents that never fire on the held-out tokens; dense:
  latents firing on more than 10% of them.
- The masked-LM loss with the reconstruction spliced in: BERT's 15% positions of held-out sentences
  (the seeded 80/10/10 corruption every BertScope measurement uses), the layer's output replaced at
  every position but [CLS], [SEP] and padding by the SAE's reconstruction, against the intact model
  and against the layer's output replaced by its mean (the mean of the training tokens):
  recovered = (L_mean - L_sae) / (L_mean - L_intact). ``recovered_context`` keeps the chosen
  positions intact and splices only their context: the SAE trains on clean text, so a [MASK]
  token's vector is new to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.core.models import LoadedModel
from bertscope.core.passes import wide
from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet, resid_post, row_mean
from bertscope.features.sae import TopKSAE
from bertscope.interventions.importance import chosen_logits, masked_batches

if TYPE_CHECKING:
    from bertscope.corpora.mixture import Mixture

DENSE = 0.1  # a latent firing on more than this share of tokens is dense


@dataclass(frozen=True)
class SaeQuality:
    layer: int
    tokens: int
    fve: float
    l0: float
    dead_share: float
    dense_share: float
    loss_intact: float
    loss_sae: float
    loss_sae_context: float
    loss_mean: float
    positions: int

    @property
    def recovered(self) -> float:
        return (self.loss_mean - self.loss_sae) / max(self.loss_mean - self.loss_intact, 1e-12)

    @property
    def recovered_context(self) -> float:
        return (self.loss_mean - self.loss_sae_context) / max(self.loss_mean - self.loss_intact, 1e-12)

    def to_json(self) -> dict:
        return {**asdict(self), "recovered": self.recovered, "recovered_context": self.recovered_context,
                "hook_name": resid_post(self.layer), "dense_threshold": DENSE}


@torch.no_grad()
def reconstruction_figures(sae: TopKSAE, acts: ActivationSet, batch: int = 4096) -> tuple[float, float, float, float]:
    """(FVE, L0, dead share, dense share) over ``acts``, a batch at a time on the SAE's device."""
    device = sae.W_enc.device
    fires = torch.zeros(sae.d_sae, dtype=torch.long, device=device)
    error = total = active = 0.0
    mean = torch.from_numpy(row_mean(acts.rows)).to(device)  # [d_in]
    for start in range(0, acts.tokens, batch):
        x = torch.from_numpy(np.asarray(acts.rows[start:start + batch], np.float32)).to(device)  # [batch, d_in]
        latents = sae.encode(x)  # [batch, d_sae]
        on = latents > 0
        fires += on.sum(0)
        active += float(on.sum())
        error += float((x - sae.decode(latents)).double().pow(2).sum())
        total += float((x.double() - mean).pow(2).sum())
    share = fires.double() / acts.tokens
    return 1 - error / total, active / acts.tokens, float((fires == 0).double().mean()), float((share > DENSE).double().mean())


def spliced_losses(lm: LoadedModel, sae: TopKSAE, layer: int, texts: Sequence[str], mean: torch.Tensor,
                   batch_size: int = 16, seed: int = 0) -> tuple[float, float, float, float, int]:
    """(intact, SAE spliced everywhere, SAE spliced in the context only, mean-ablated) masked-LM loss
    (mean over chosen positions), and how many positions."""
    name = resid_post(layer)
    specials = torch.tensor([i for i in (lm.tokenizer.cls_token_id, lm.tokenizer.sep_token_id,
                                         lm.tokenizer.pad_token_id) if i is not None], device=lm.device)
    sums, positions = np.zeros(4), 0
    for _, feed, chosen, gold in masked_batches(lm, texts, batch_size, seed):
        keep = feed["attention_mask"].bool() & ~torch.isin(feed["input_ids"], specials)  # [batch, token]

        def replace(by, where):
            def hook(x, _):  # [batch, token, d_model]
                return torch.where(where[..., None], by(x).to(x.dtype), x)
            return {name: hook}

        runs = (None, replace(sae, keep), replace(sae, keep & ~chosen),
                replace(lambda x: mean.to(x.device, x.dtype).expand_as(x), keep))
        for i, hooks in enumerate(runs):
            logits = chosen_logits(lm, feed, chosen, hooks)  # [chosen, vocab]
            sums[i] += float(F.cross_entropy(wide(logits), gold, reduction="sum"))
        positions += int(chosen.sum())
    losses = sums / max(positions, 1)
    return float(losses[0]), float(losses[1]), float(losses[2]), float(losses[3]), positions


def sae_quality(lm: LoadedModel, sae: TopKSAE, held_out: ActivationSet, texts: Sequence[str],
                mean: np.ndarray, seed: int = 0) -> SaeQuality:
    """Every figure above for the SAE of layer ``held_out.layer``; ``mean`` [d_model]: the training
    tokens' mean output, the mean-ablation reference.

    Args:
        lm: a model with a masked-LM head, the one the SAE was made for.
        sae: the SAE of layer ``held_out.layer``'s output.
        held_out: that layer's outputs on held-out text (``layer_activations``): FVE, L0, dead and dense shares.
        texts: held-out sentences the masked-LM losses are read on (usually ``held_out.texts``).
        mean: [d_model] the training tokens' mean output, spliced in for the mean-ablated loss.
        seed: which positions BERT's corruption chooses.

    Returns:
        A ``SaeQuality``: the layer, tokens, FVE, L0, dead and dense shares, the masked-LM loss intact, with the
            reconstruction spliced in everywhere and in the context only, mean-ablated, and the positions scored;
            ``recovered`` and ``recovered_context`` follow from them.
    """
    sae.check_for(lm, resid_post(held_out.layer))
    fve, l0, dead, dense = reconstruction_figures(sae, held_out)
    intact, spliced, context, ablated, positions = spliced_losses(
        lm, sae, held_out.layer, texts, torch.from_numpy(np.asarray(mean, np.float32)), seed=seed)
    return SaeQuality(held_out.layer, held_out.tokens, fve, l0, dead, dense, intact, spliced, context, ablated,
                      positions)


def domain_qualities(lm: LoadedModel, sae: TopKSAE, held_out: ActivationSet, held: Mixture, mean: np.ndarray,
                     seed: int = 0, progress: Callable[[int, int], None] | None = None) -> dict[str, SaeQuality]:
    """``sae_quality`` on each source's held-out texts alone (``held``: the mixture's held-out side;
    ``held_out``: its activations, ``layer_activations`` of ``held.texts``, each source's rows taken from them),
    the FVE against that source's own variance: an SAE that knows only 1961 prose shows it here.
    ``progress(done, total)`` counts sentences scored.

    Args:
        lm: a model with a masked-LM head, the one the SAE was made for.
        sae: the SAE of layer ``held_out.layer``'s output.
        held_out: the layer's outputs on every text of ``held``, none cut off by a token cap.
        held: the mixture's held-out side (``mixed_texts(..., held_out=True)``): texts and their sources.
        mean: [d_model] the training tokens' mean output (mean ablation).
        seed: which positions BERT's corruption chooses.
        progress: called with (done, total) sentences.

    Returns:
        {source: ``SaeQuality``}, one entry per corpus of the mixture.
    """
    if held_out.texts != tuple(held.texts):
        raise BertScopeError("The held-out activations were read from other texts than the mixture's held-out side.")
    if len(np.unique(held_out.where[:, 0])) != len(held.texts):
        raise BertScopeError("The held-out activations stop before the last held-out text (read under a token cap): "
                             "read them with max_tokens=10**9.")
    out, done = {}, 0
    for source in held.counts():
        part = held_out.of_sentences([i for i, s in enumerate(held.sources) if s == source])
        out[source] = sae_quality(lm, sae, part, part.texts, mean, seed=seed)
        done += len(part.texts)
        if progress:
            progress(done, len(held.texts))
    return out
