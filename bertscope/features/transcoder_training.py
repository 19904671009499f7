"""Transcoders trained and measured: each layer's feed-forward input → output over a corpus kept on disk (the SAE
trainer's loop: streamed blocks, a byte budget, checkpoints and resume; ``features.trainer.train_dictionary``), and
the figures the issue asks of them, on held-out text.

- Per layer: the fraction of the feed-forward output's variance explained (FVE), L0, dead features (never fire on
  the held-out tokens), dense ones (fire on more than 10 %), and the share of chosen pre-activations below zero
  (where BertScope's ReLU-after-TopK and circuit-tracer's plain TopK differ).
- The **replacement model**: every layer's feed-forward replaced by its transcoder at once (at every word piece;
  [CLS], [SEP] and padding keep their real feed-forward, as the transcoders never saw them), read at BERT's 15 %
  positions of held-out sentences (the seeded 80/10/10 corruption every BertScope measurement uses): top-1
  agreement with the real model, KL(real ‖ replacement) and both masked-LM losses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bertscope.core.models import LoadedModel
from bertscope.core.passes import batches, wide
from bertscope.core.task_head import SEQUENCE
from bertscope.errors import BertScopeError
from bertscope.features.activations import ActivationSet, row_mean
from bertscope.features.trainer import SaeTrainConfig, SaeTrainState, train_dictionary
from bertscope.features.transcoder import Transcoder, TranscoderInfo, load_transcoder, save_transcoder

DENSE = 0.1


@dataclass(frozen=True)
class TranscoderQuality:
    layer: int
    tokens: int
    fve: float
    l0: float
    dead_share: float
    dense_share: float
    negative_share: float  # chosen pre-activations below zero (cut by the ReLU)

    def to_json(self) -> dict:
        return asdict(self)


def _pair(inputs: ActivationSet, outputs: ActivationSet) -> None:
    if inputs.tokens != outputs.tokens or not np.array_equal(inputs.where, outputs.where):
        raise BertScopeError("The feed-forward's input and output were read from different tokens: read both in one "
                             "pass (features.activations.points_activations).")


def train_transcoder(inputs: ActivationSet, outputs: ActivationSet, cfg: SaeTrainConfig, out: str | Path,
                     info: TranscoderInfo, skip: bool = False, device: str = "cpu", resume: bool = True,
                     progress: Callable[[int, int, dict], None] | None = None,
                     stop: Callable[[], bool] | None = None) -> tuple[Transcoder, SaeTrainState]:
    """A transcoder of layer ``info.layer`` trained on its feed-forward's ``inputs`` → ``outputs`` (the same tokens)
    into the set's folder ``out`` (``layer_{l}.safetensors``; the checkpoint in ``out/checkpoint_{l}``).

    Args:
        inputs: ``blocks.{l}.hook_resid_mid`` over the training text.
        outputs: ``blocks.{l}.hook_mlp_out`` over the same tokens.
        cfg: width (expansion), k, epochs, batch and rates (the SAE trainer's settings).
        out: the transcoder set's folder.
        info: the model and layer it replaces.
        skip: train a skip transcoder (a linear path beside the sparse one).
        device: where it trains.
        resume: go on from a checkpoint made with the same settings.
        progress: called with (step, total steps, info).
        stop: asked between steps.

    Returns:
        (the ``Transcoder``, its training state).
    """
    _pair(inputs, outputs)
    out = Path(out)
    d_in, d_out = inputs.rows.shape[1], outputs.rows.shape[1]
    cfg.check(d_in, inputs.tokens)
    torch.manual_seed(cfg.seed)
    tc = Transcoder(d_in, d_out, cfg.expansion * d_in, cfg.k, skip, info, seed=cfg.seed)
    identity = {"model": info.model_name, "layer": info.layer, "skip": skip, "d_in": d_in, "tokens": inputs.tokens,
                "activations": [inputs.folder.name, outputs.folder.name]}

    def save(model: Transcoder, folder: Path) -> None:
        save_transcoder(model, folder)

    def load(folder: Path, where) -> Transcoder:
        return load_transcoder(folder, info.layer, where)

    if cfg.chosen_weight != 1 and inputs.chosen is None:
        raise BertScopeError("The chosen rows weigh more only in text read as pretraining read it (--masked): these "
                             "activations were read as written.")
    tc, state = train_dictionary(tc, inputs.rows, outputs.rows, cfg, out / f"checkpoint_{info.layer}", identity,
                                 save, load, device, resume, progress, stop, inputs.chosen)
    if stop is not None and state.epoch < cfg.epochs:
        return tc, state
    tc.info.extra.update({"trained_tokens": inputs.tokens, "epochs": cfg.epochs, "k": cfg.k,
                          "expansion": cfg.expansion, "seed": cfg.seed, "history": state.history,
                          **cfg.departures()})
    save_transcoder(tc, out)
    return tc, state


@torch.no_grad()
def transcoder_figures(tc: Transcoder, inputs: ActivationSet, outputs: ActivationSet,
                       batch: int = 4096) -> TranscoderQuality:
    """FVE of the output, L0, dead / dense shares and the negative share over held-out tokens."""
    _pair(inputs, outputs)
    device = tc.W_enc.device
    fires = torch.zeros(tc.d_sae, dtype=torch.long, device=device)
    error = total = active = negative = 0.0
    mean = torch.from_numpy(row_mean(outputs.rows)).to(device)  # [d_out]
    for start in range(0, inputs.tokens, batch):
        x = torch.from_numpy(np.asarray(inputs.rows[start:start + batch], np.float32)).to(device)  # [batch, d_in]
        y = torch.from_numpy(np.asarray(outputs.rows[start:start + batch], np.float32)).to(device)  # [batch, d_out]
        top = tc.pre_activations(x).topk(tc.k, dim=-1, sorted=False)
        values = F.relu(top.values)
        negative += float((top.values < 0).sum())
        on = values > 0
        fires.index_add_(0, top.indices[on], torch.ones(int(on.sum()), dtype=torch.long, device=device))
        active += float(on.sum())
        error += float((y - tc.reconstruct_topk(x, values, top.indices)).double().pow(2).sum())
        total += float((y.double() - mean).pow(2).sum())
    share = fires.double() / max(inputs.tokens, 1)
    return TranscoderQuality(tc.info.layer, inputs.tokens, 1 - error / max(total, 1e-30), active / max(inputs.tokens, 1),
                             float((fires == 0).double().mean()), float((share > DENSE).double().mean()),
                             negative / max(inputs.tokens * tc.k, 1))


def _scales(error_scale: float | Mapping[int, float], layers) -> dict[int, float]:
    """{layer: its error's scale} for ``layers``: one scale for all, or one a layer (1 for a layer not named)."""
    scales = ({layer: float(error_scale.get(layer, 1.0)) for layer in layers} if isinstance(error_scale, Mapping)
              else dict.fromkeys(layers, float(error_scale)))
    bad = [s for s in scales.values() if not 0 <= s <= 1]
    if bad:
        raise BertScopeError(f"The error's scale is between 0 and 1; got {bad[0]}.")
    return scales


def replacement_hooks(lm: LoadedModel, transcoders: Mapping[int, Transcoder], keep: torch.Tensor | None = None,
                      error_scale: float | Mapping[int, float] = 1.0) -> dict:
    """Hooks that replace each layer's feed-forward output by its transcoder's (reading the layer's
    ``hook_resid_mid`` in the same pass); ``keep`` [batch, token] bool: where to replace (elsewhere the real
    output stays). ``error_scale`` s < 1 writes y + s (ŷ - y) instead of ŷ: each transcoder's error, as it stands
    in this pass, shrunk by s (a measurement of how far the transcoders are from a bar, not a replacement model);
    {layer: s} shrinks those layers' alone."""
    scales = _scales(error_scale, transcoders)
    seen: dict[int, torch.Tensor] = {}
    hooks = {}
    for layer, tc in transcoders.items():
        tc.check_for(lm)

        def read(x, _, layer=layer):  # [batch, token, d_model]
            seen[layer] = x

        def write(y, _, layer=layer, tc=tc, scale=scales[layer]):  # y: [batch, token, d_model], the real
            made = tc(seen.pop(layer)).to(y.dtype)                  # feed-forward on this pass's input
            if scale != 1:
                made = y + scale * (made - y)
            return made if keep is None else torch.where(keep[..., None], made, y)

        hooks[tc.info.input_hook] = read
        hooks[tc.info.output_hook] = write
    return hooks


def replaced_positions(lm: LoadedModel, feed: dict) -> torch.Tensor:
    """[batch, token] bool: where the replacement model replaces the feed-forward (every word piece; not [CLS],
    [SEP] or padding, which the transcoders never saw)."""
    specials = torch.tensor([i for i in (lm.tokenizer.cls_token_id, lm.tokenizer.sep_token_id,
                                         lm.tokenizer.pad_token_id) if i is not None], device=lm.device)
    return feed["attention_mask"].bool() & ~torch.isin(feed["input_ids"], specials)


@torch.no_grad()
def replacement_quality(lm: LoadedModel, transcoders: Mapping[int, Transcoder], texts: Sequence[str],
                        batch_size: int = 16, seed: int = 0,
                        progress: Callable[[int, int], None] | None = None,
                        layers: Sequence[int] | None = None,
                        error_scale: float | Mapping[int, float] = 1.0) -> dict:
    """Every feed-forward replaced by its transcoder at once (at every word piece; [CLS], [SEP] and padding keep
    their real feed-forward), scored against the real model: a masked LM at BERT's 15 % positions of ``texts``, a
    sequence classifier on its decision for each text. With ``layers``, only those are replaced (the others keep
    their real feed-forward): what each layer's transcoder alone costs.

    Args:
        lm: a masked LM or a sequence classifier.
        transcoders: {layer: transcoder} for every layer (for ``layers``, when given).
        texts: held-out texts.
        batch_size: texts a pass.
        seed: which positions are masked (a masked LM).
        progress: called with (done, total) batches.
        layers: the layers replaced, from 0 (None: every layer, the replacement model).
        error_scale: each transcoder's error shrunk by this factor (``replacement_hooks``): how much better the
            transcoders would have to be for a bar (1: the replacement model itself); {layer: factor} for some.

    Returns:
        A masked LM: {"positions", "top1_agreement": with the real model, "kl": mean KL(real ‖ replacement) in
        nats, "loss_real", "loss_replacement": both masked-LM losses}. A classifier: {"examples", "top1_agreement":
        the same class as the real model, "kl": mean KL(real ‖ replacement) over the classes}.
    """
    kind = check_replaceable(lm, transcoders, layers)
    _scales(error_scale, transcoders)
    replaced = dict(transcoders) if layers is None else {layer: transcoders[layer] for layer in layers}

    def hooks(feed: dict) -> dict:
        return replacement_hooks(lm, replaced, replaced_positions(lm, feed), error_scale)

    if kind == "masked":
        return masked_quality(lm, hooks, texts, batch_size, seed, progress)
    return _class_quality(lm, hooks, texts, batch_size, progress)


def check_replaceable(lm: LoadedModel, transcoders: Mapping[int, Transcoder],
                      layers: Sequence[int] | None = None) -> str:
    """How the replacement model of ``lm`` is scored, "masked" (masked tokens) or "class" (a single-label
    classifier's class), or one line saying why it cannot be: a layer without its transcoder, a multi-label
    classifier, a model with neither head. Asked before any pass.

    Args:
        lm: the model.
        transcoders: {layer: transcoder}.
        layers: the layers to be replaced (None: every layer).

    Returns:
        "masked" or "class".
    """
    if layers is not None:
        if not layers or any(not 0 <= layer < lm.num_layers for layer in layers):
            raise BertScopeError(f"Replace 1 or more of {lm.name}'s layers, 0 to {lm.num_layers - 1}.")
        missing = sorted(set(layers) - set(transcoders))
        if missing:
            raise BertScopeError(f"No transcoder for layer {', '.join(map(str, missing))} in the set.")
    elif sorted(transcoders) != list(range(lm.num_layers)):
        missing = sorted(set(range(lm.num_layers)) - set(transcoders))
        raise BertScopeError(f"The replacement model needs a transcoder for every layer; missing: "
                             f"{', '.join(map(str, missing))}.")
    if "mlm" in lm.outputs:
        return "masked"
    if lm.task is not None and lm.task.kind == SEQUENCE:
        if lm.task.scoring != "softmax":
            raise BertScopeError(f"{lm.name} scores its labels by {lm.task.scoring}, not one class a text: the "
                                 "replacement model is scored on a single-label classifier's class.")
        return "class"
    raise BertScopeError(f"{lm.name} has neither a masked-LM head nor a sequence classifier's: the replacement model "
                         "is scored on masked tokens or on a class (try bundled-mlm or bundled-sentiment).")


def masked_quality(lm: LoadedModel, hooks: Callable[[dict], dict], texts: Sequence[str], batch_size: int = 16,
                   seed: int = 0, progress: Callable[[int, int], None] | None = None) -> dict:
    """A masked LM with ``hooks(feed)`` (a batch's hooks) against itself at BERT's seeded 15 % positions of
    ``texts``: {"positions", "top1_agreement", "kl", "loss_real", "loss_replacement"} (``replacement_quality``)."""
    from bertscope.interventions.importance import chosen_logits, masked_batches

    agree = kl = loss_real = loss_replaced = 0.0
    positions = done = 0
    for rows, feed, chosen, gold in masked_batches(lm, texts, batch_size, seed):
        real = wide(chosen_logits(lm, feed, chosen, None)).log_softmax(-1)  # [chosen, vocab]
        made = wide(chosen_logits(lm, feed, chosen, hooks(feed))).log_softmax(-1)
        agree += float((real.argmax(-1) == made.argmax(-1)).sum())
        kl += float((real.exp() * (real - made)).sum())
        loss_real += float(F.nll_loss(real, gold, reduction="sum"))
        loss_replaced += float(F.nll_loss(made, gold, reduction="sum"))
        positions += int(chosen.sum())
        done += len(rows)
        if progress:
            progress(done, len(texts))
    n = max(positions, 1)
    return {"positions": positions, "top1_agreement": agree / n, "kl": kl / n, "loss_real": loss_real / n,
            "loss_replacement": loss_replaced / n}


def _class_quality(lm: LoadedModel, hooks: Callable[[dict], dict], texts: Sequence[str], batch_size: int,
                   progress: Callable[[int, int], None] | None) -> dict:
    agree = kl = 0.0
    done = 0
    for rows, _, feed in batches(lm, texts, batch_size):
        real = wide(lm.run(feed).logits).log_softmax(-1)  # [batch, label]
        made = wide(lm.run(feed, hooks=hooks(feed)).logits).log_softmax(-1)
        agree += float((real.argmax(-1) == made.argmax(-1)).sum())
        kl += float((real.exp() * (real - made)).sum())
        done += len(rows)
        if progress:
            progress(done, len(texts))
    n = max(done, 1)
    return {"examples": done, "top1_agreement": agree / n, "kl": kl / n}
