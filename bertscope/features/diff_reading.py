"""A crosscoder read: the one pass behind ``bertscope diff-features`` and the Compare page's Latents tab.

The crosscoder is found (``crosscoder_for``: a folder given, or the one shipped for the pair) and checked against
both models; both models' outputs on held-out mixture text give every latent's norms, class and Latent Scaling
(``model_diff.diff_models``); the causal check (``diff_causal``) switches the fine-tuned-only latents off inside
the fine-tuned task model. For a tagger read at its last layer, each latent's fine-tuned decoder direction is also
read by the head (``head_weights``: what the latent pushes each label's logit by, a unit of activation), the
head being linear there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from bertscope.core.models import LoadedModel
from bertscope.core.task_head import TOKEN
from bertscope.errors import BertScopeError
from bertscope.features.activations import layer_activations, resid_post
from bertscope.features.crosscoder import BatchTopKCrosscoder, load_crosscoder
from bertscope.features.diff_causal import (
    MAX_EXAMPLES,
    MAX_LATENTS,
    DiffEffect,
    check_crosscoder_layer,
    diff_effect,
    task_side,
)
from bertscope.features.model_diff import CLASSES, ModelDiff, diff_models
from bertscope.features.sae import same_model
from bertscope.features.shipped import CFG_FILE, layer_folder, sae_layers, shipped_crosscoders
from bertscope.runtime.progress import staged

JSON_CLASS = {"shared": "shared", "base-only": "base", "fine-tuned-only": "finetuned", "other": "other",
              "never fires": "silent", "fine-tuned-only, real": "finetuned_real"}  # the JSON's words for CLASSES
Progress = Callable[[int, int, str], None]  # (done, total, "what, unit"), as the app's bars take it


def check_pair(base: LoadedModel, tuned: LoadedModel) -> None:
    """One line when two models cannot share a crosscoder: other widths, or other word pieces."""
    if base.hidden_size != tuned.hidden_size:
        raise BertScopeError(f"{base.name} is {base.hidden_size} wide and {tuned.name} {tuned.hidden_size}: a crosscoder "
                             "reads a model and one fine-tuned from it.")
    if base.tokenizer.get_vocab() != tuned.tokenizer.get_vocab():
        raise BertScopeError(f"{base.name} and {tuned.name} split text differently: a crosscoder reads both on the "
                             "same word pieces (a model and one fine-tuned from it).")


def crosscoder_layers(base: LoadedModel, tuned: LoadedModel, folder: str | Path | None = None
                      ) -> tuple[Path, list[int]]:
    """(the folder, its layers): ``folder``, or the one shipped for the pair; one line when there is none."""
    source = Path(folder) if folder else shipped_crosscoders(base.name, tuned.name)
    if source is None:
        raise BertScopeError(f"No crosscoder is shipped for {base.name} and {tuned.name}: train one "
                             f"(bertscope train-crosscoder {base.name} {tuned.name} --out FOLDER) and give its folder.")
    layers = sae_layers(source)
    if not layers:
        raise BertScopeError(f"{source} holds no crosscoder (cfg.json + crosscoder.safetensors, or layer_LL folders).")
    return source, layers


def crosscoder_for(base: LoadedModel, tuned: LoadedModel, folder: str | Path | None = None,
                   layer: int | None = None) -> tuple[BatchTopKCrosscoder, Path, int]:
    """(the crosscoder, its folder, its layer) for the pair, checked against both models."""
    check_pair(base, tuned)
    source, layers = crosscoder_layers(base, tuned, folder)
    layer = layers[-1] if layer is None else layer
    if layer not in layers:
        raise BertScopeError(f"{source} has no crosscoder for layer {layer}: it has layers {', '.join(map(str, layers))}.")
    path = layer_folder(source, layer) if (layer_folder(source, layer) / CFG_FILE).is_file() else source
    cc = load_crosscoder(path, base.device)
    made_for = tuple(m for m in cc.info.models if m)
    if made_for and not (len(made_for) == 2 and all(map(same_model, made_for, (base.name, tuned.name)))):
        raise BertScopeError(f"{path} was made for {' and '.join(made_for)}, not {base.name} and {tuned.name}.")
    if cc.d_in != base.hidden_size or (cc.info.hook_name and cc.info.hook_name != resid_post(layer)):
        raise BertScopeError(f"{path} reads {cc.info.hook_name or '?'} ({cc.d_in} wide), not {resid_post(layer)} of "
                             f"{base.hidden_size}-wide models.")
    return cc, path, layer


@dataclass(frozen=True)
class DiffReading:
    models: tuple[str, str]  # base, fine-tuned
    path: str
    layer: int
    d_sae: int
    k: int
    diff: ModelDiff = field(repr=False)
    sources: dict[str, int]  # held-out texts read from each corpus
    effect: DiffEffect | None = field(repr=False)
    note: str | None  # why no causal check ran
    head_labels: tuple[str, ...] = ()
    head_weights: np.ndarray | None = field(repr=False, default=None)  # [d_sae, label], or None
    positions: str = "pieces"  # what the crosscoder reads: word pieces, or [CLS] ("cls")

    def pushes(self, latent: int, top: int = 3) -> list[tuple[str, float]]:
        """The labels whose logit the latent's fine-tuned direction raises most (tagger at its last layer)."""
        if self.head_weights is None:
            return []
        row = self.head_weights[latent]
        return [(self.head_labels[i], float(row[i])) for i in np.argsort(-row)[:top]]

    def to_json(self, all_latents: bool = False) -> dict:
        d, e = self.diff, self.effect
        real = d.real_fine_tuned_only
        contexts = e.contexts if e is not None else {}
        latents = []
        for j in range(self.d_sae):
            name = CLASSES[d.classes[j]]
            if not all_latents and name in ("shared", "never fires") and j not in contexts:
                continue
            row = {"latent": j, "norm_base": round(float(d.norms[0, j]), 6),
                   "norm_finetuned": round(float(d.norms[1, j]), 6), "relative_norm": round(float(d.delta[j]), 6),
                   "class": JSON_CLASS[name], "fires": int(d.fires[j]), "real": bool(real[j])}
            if self.head_weights is not None:
                row["pushes"] = [{"label": label, "logit": round(w, 6)} for label, w in self.pushes(j)]
            row["top_contexts"] = [c.to_json() for c in contexts.get(j, [])]  # none: it never fired on the task
            if e is not None:
                row["gold"] = e.gold_counts.get(j, {})
            latents.append(row)
        out = {"crosscoder": {"path": self.path, "layer": self.layer, "d_sae": self.d_sae, "k": self.k,
                              "models": list(self.models), "positions": self.positions},
               "held_out": {"tokens": d.tokens, "sources": self.sources,
                            "fve": {"base": finite_or_none(d.fve[0]), "finetuned": finite_or_none(d.fve[1])}, "l0": round(d.l0, 3)},
               "counts": {JSON_CLASS[k]: v for k, v in d.counts().items()},
               "latents": latents, "causal": None if self.effect is None else self.effect.to_json()}
        if self.note:
            out["causal_note"] = self.note
        return out


def finite_or_none(x: float) -> float | None:
    """A figure for JSON: NaN (nothing to measure) as null."""
    return None if np.isnan(x) else x


def head_weights(tuned: LoadedModel, cc: BatchTopKCrosscoder, layer: int) -> np.ndarray | None:
    """[d_sae, label] each latent's fine-tuned decoder row read by a tagger's head at its last layer; None where
    the head is not linear in that layer's output (a classifier's pooler, a lower layer, ModernBERT's final
    norm and head MLP before its classifier)."""
    if tuned.task is None or tuned.task.kind != TOKEN or layer != tuned.num_layers - 1:
        return None
    if any(hasattr(tuned.model, name) for name in ("head", "final_norm")):
        return None
    head = getattr(tuned.model, "classifier", None)
    if not isinstance(head, torch.nn.Linear) or head.in_features != cc.d_in:
        return None
    with torch.no_grad():
        return (cc.W_dec[1].float() @ head.weight.float().T.to(cc.W_dec.device)).cpu().numpy()  # [d_sae, label]


def read_diff(base: LoadedModel, tuned: LoadedModel, cc: BatchTopKCrosscoder, path: str | Path, layer: int,
              held_out: int = 200, examples: int = 500, latents: Sequence[int] | None = None, max_latents: int = 32,
              seed: int = 0, progress: Progress | None = None, data: str | None = None) -> DiffReading:
    """The crosscoder's latents on ``held_out`` texts of each installed corpus (the mixture's held-out side as the
    crosscoder's training split it), then the causal check of the fine-tuned-only latents (or ``latents``) on
    ``examples`` held-out task examples (a sample drawn with ``seed``; ``data``: the task data, as
    ``diff_causal.task_side`` takes it); ``note`` says why no check ran.

    Args:
        base: the base model.
        tuned: the fine-tuned task model.
        cc: the crosscoder of both models' layer ``layer`` output (``crosscoder_for``).
        path: where the crosscoder was read from, reported as it is.
        layer: the layer, from 0: the one the crosscoder reads (its hook point names it), else one line.
        held_out: texts from each installed corpus, at least 1; the mixture is split with the seed the crosscoder
            was trained with.
        examples: held-out task examples of the causal check, 1 to ``MAX_EXAMPLES`` (2,000).
        latents: the latents to switch off, 1 to ``MAX_LATENTS`` (64), from 0 (None: the fine-tuned-only ones).
        max_latents: with ``latents`` None, the fine-tuned-only latents that fire most on the held-out text, at most
            (the real ones by Latent Scaling when there are any).
        seed: the task examples' sample (0 or more).
        progress: called with (done, total, "what, unit") for each stage: both models' activations, the check.
        data: the task data, a shipped corpus or a file (None: what the shipped task models were trained on).

    Returns:
        A ``DiffReading``: the models, path, layer, width and k; the ``ModelDiff`` on the held-out text (norms,
            classes, Latent Scaling, FVE, L0); the texts read from each corpus; the ``DiffEffect`` of the check, or
            None and the ``note`` saying why; for a tagger read at its last layer, ``head_weights`` [d_sae, label]:
            what each latent's fine-tuned direction adds to each label's logit (else None); what the crosscoder reads
            (``positions``: "pieces" or "cls").
    """
    from bertscope.corpora.mixture import mixed_texts

    check_crosscoder_layer(cc, layer)
    if held_out < 1 or not 1 <= examples <= MAX_EXAMPLES or not 1 <= max_latents <= MAX_LATENTS or seed < 0:
        raise BertScopeError(f"Read at least one held-out text and 1 to {MAX_EXAMPLES:,} task examples, switch 1 to "
                             f"{MAX_LATENTS} latents off; the seed is a number from 0.")
    if latents is not None:
        latents = list(dict.fromkeys(int(j) for j in latents))
        if not 1 <= len(latents) <= MAX_LATENTS or not all(0 <= j < cc.d_sae for j in latents):
            raise BertScopeError(f"Switch 1 to {MAX_LATENTS} latents off, numbered 0 to {cc.d_sae - 1}.")
    note, found = None, None
    try:  # said before any work: no head, a classifier at its last layer, labels that miss the data's
        found = task_side(tuned, layer, examples, seed, data, cc.info.positions)
    except BertScopeError as err:
        note = str(err)
    # the held-out side of the mixture as the crosscoder's training drew it: its seed splits Brown's documents
    trained_seed = int((cc.info.extra or {}).get("seed", 0))
    held = mixed_texts(held_out, held_out=True, seed=trained_seed)
    caches = []
    for lm in (base, tuned):
        caches.append(layer_activations(lm, held.texts, layer, max_tokens=10**9, progress=staged(
            progress, f"Held-out activations of {lm.name} at layer {layer}, sentences"), positions=cc.info.positions))
    diff = diff_models(cc, caches[0], caches[1])
    if latents is not None:
        chosen = latents
    else:
        real = diff.real_fine_tuned_only
        pool = np.nonzero(real)[0] if real.any() else np.nonzero(diff.classes == CLASSES.index("fine-tuned-only"))[0]
        chosen = [int(j) for j in pool[np.argsort(-diff.fires[pool], kind="stable")][:max_latents]]
    effect = None
    if note is None and not chosen:
        note = "no fine-tuned-only latent to switch off"
    elif note is None:
        effect = diff_effect(base, tuned, cc, layer, chosen, diff.delta, examples, seed,
                             staged(progress, f"The causal check with {len(chosen)} latents off, batches"), found)
    weights = head_weights(tuned, cc, layer)
    labels = tuple(tuned.task.labels) if weights is not None and tuned.task is not None else ()
    return DiffReading((base.name, tuned.name), str(path), layer, cc.d_sae, cc.k, diff, held.counts(), effect, note,
                       labels, weights, cc.info.positions)
