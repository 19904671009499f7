"""A trained probe on disk and back, in one place: ``save_probe`` writes the standardiser and the
linear layer (or the MLP's layers) as ``.npz`` arrays plus JSON, never pickle; ``load_probe`` rebuilds
it in torch (``Probe.log_probs`` equals sklearn's ``predict_proba``, tested), so attribution can
differentiate through it.

A probe run's folder (``bertscope probe --out``): ``results.json`` and ``weights/layer_XX.npz`` +
``.json`` per hidden state (``layer_00`` = the embedding output, ``layer_XX`` = block XX - 1's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_file, write_text


def save_probe(probe: Pipeline, folder: Path, name: str) -> None:
    """A logistic-regression probe as arrays + JSON (no pickle): scaler and linear layer."""
    scaler, model = probe.named_steps["standardscaler"], probe[-1]
    arrays = {"mean": scaler.mean_, "scale": scaler.scale_}
    if isinstance(model, LogisticRegression):
        arrays.update(coef=model.coef_, intercept=model.intercept_)
    else:
        arrays.update({f"coef_{i}": w for i, w in enumerate(model.coefs_)})
        arrays.update({f"intercept_{i}": b for i, b in enumerate(model.intercepts_)})
    write_file(folder / f"{name}.npz", lambda tmp: np.savez(tmp, **arrays))  # then its JSON: what a reader looks for
    write_text(folder / f"{name}.json", json.dumps({"classes": [str(c) for c in model.classes_],
                                                    "kind": type(model).__name__}))


@dataclass(frozen=True)
class Probe:
    """A probe saved by ``probing.save_probe`` (no pickle): standardise, then a linear layer or an MLP."""

    model: str  # the model whose hidden states it was trained on
    level: str  # "token" or "sentence"
    pooling: str  # token: mean|first; sentence: mean|cls
    classes: list[str]
    kind: str  # LogisticRegression | MLPClassifier
    arrays: dict[str, np.ndarray]

    def log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """[batch, dim] pooled hidden states -> [batch, class] log-probabilities (as sklearn's predict_proba)."""
        a = {k: torch.as_tensor(v, dtype=torch.float32, device=h.device) for k, v in self.arrays.items()}
        z = (h.float() - a["mean"]) / a["scale"]  # [batch, dim]
        if self.kind == "LogisticRegression":
            logits = z @ a["coef"].T + a["intercept"]  # [batch, class] (one column when binary)
        else:
            layers = sum(1 for k in a if k.startswith("coef_"))
            for i in range(layers):
                z = z @ a[f"coef_{i}"] + a[f"intercept_{i}"]
                if i < layers - 1:
                    z = torch.relu(z)  # sklearn's default activation, the one make_probe uses
            logits = z
        if logits.shape[-1] == 1:  # binary: sigmoid of one logit
            return torch.cat([torch.nn.functional.logsigmoid(-logits), torch.nn.functional.logsigmoid(logits)], -1)
        return torch.log_softmax(logits, dim=-1)


def load_probe(run_dir: str | Path, layer: int) -> Probe:
    """The probe of ``layer`` from a probe run's output folder (``results.json`` + ``weights/``)."""
    folder = Path(run_dir)
    results, weights = folder / "results.json", folder / "weights" / f"layer_{layer:02d}"
    if not results.is_file():
        raise BertScopeError(f"No results.json in {run_dir}: give the --out folder of a probe run.")
    if not weights.with_suffix(".npz").is_file():
        raise BertScopeError(f"{run_dir} has no probe for layer {layer} (weights/layer_{layer:02d}.npz).")
    meta = json.loads(results.read_text())
    if meta.get("level") == "arc":
        raise BertScopeError(f"{run_dir} holds a probe of dependency arcs (two words' vectors side by side): it "
                             "cannot explain one word's vector. Use a word- or sentence-level probe run.")
    info = json.loads(weights.with_suffix(".json").read_text())
    with np.load(weights.with_suffix(".npz"), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return Probe(meta["model"], meta["level"], meta["pooling"], info["classes"], info["kind"], arrays)
