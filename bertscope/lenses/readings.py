"""One text read at every hidden state by the tuned lens and by the logit lens: a masked LM's predictions at a
[MASK] (each lens's top tokens and their probabilities), or a classifier's decision (each lens's class
probabilities), with each reading's KL to the final layer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.hooked_pass import check_text, model_inputs, turn
from bertscope.core.layers import hidden_labels
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.lenses.tuned import TunedLens, class_readout, kl_to_final, lens_kind, vocabulary_readout


@dataclass(frozen=True)
class LensReading:
    layer: str | int  # "embeddings", or a layer from 0
    tuned: list[tuple[str, float]]  # the tuned lens's top tokens (or every class) and their probabilities
    logit: list[tuple[str, float]]  # the logit lens's
    kl_tuned: float  # KL(p_final ‖ p_tuned), nats
    kl_logit: float
    final_rank_tuned: int  # where the final top-1 ranks in each lens's reading (1 = top)
    final_rank_logit: int


@dataclass(frozen=True)
class LensReadings:
    model: str
    kind: str  # "mlm" or "class"
    text: str
    position: int | None  # the [MASK] read (a masked LM)
    tokens: list[str]
    layers: list[LensReading]

    def to_json(self) -> dict:
        return {"model": self.model, "kind": self.kind, "position": self.position,
                "layers": [{"layer": r.layer, "top": [[t, p] for t, p in r.tuned], "kl_to_final": r.kl_tuned,
                            "logit_lens_top": [[t, p] for t, p in r.logit], "logit_lens_kl_to_final": r.kl_logit}
                           for r in self.layers]}


def lens_readings(lm: LoadedModel, lens: TunedLens, text: str, mask_index: int = 0, top_k: int = 5,
                  pair: str | None = None) -> LensReadings:
    """``text`` (and a classifier's ``pair``) read at every state by ``lens`` and by the logit lens (a masked LM:
    at its ``mask_index``-th [MASK])."""
    kind = lens_kind(lm)
    if not 1 <= top_k <= 50:
        raise BertScopeError(f"Show 1 to 50 tokens a layer ({top_k} asked).")
    if lens.meta.kind != kind:
        raise BertScopeError(f"The lens reads a {lens.meta.kind} head; {lm.name} is read through its {kind} head.")
    check_text(text)
    if kind == "mlm":
        text = text.replace("[MASK]", lm.tokenizer.mask_token)
    enc = lm.tokenizer(text, pair, return_tensors="pt", truncation=True, max_length=lm.max_length)
    feed = model_inputs(lm, enc)
    tokens = lm.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    logit = TunedLens.identity(lm)
    with turn(lm), torch.inference_mode():
        out = lm.run(feed, hidden_states=True, encoder_only=(kind == "mlm"))
        states = out.hidden_states  # [state] each [1, token, d]
        position = None
        if kind == "mlm":
            masks = (enc["input_ids"][0] == lm.tokenizer.mask_token_id).nonzero().flatten().tolist()
            if not masks:
                raise BertScopeError(f"The text has no {lm.tokenizer.mask_token}: the lens reads the prediction there.")
            if not 0 <= mask_index < len(masks):
                raise BertScopeError(f"Mask {mask_index + 1} does not exist: the text has {len(masks)} mask(s).")
            position = masks[mask_index]
            read = vocabulary_readout(lm)

            def logits_of(which: TunedLens, s: int) -> torch.Tensor:  # [V]
                return read(which.translate(states[s][0, position], s), s).float()
            names = None
        else:
            head = class_readout(lm, feed)

            def logits_of(which: TunedLens, s: int) -> torch.Tensor:  # [label]
                return head(which.translate(states[s], s), s)[0]
            names = list(lm.task.labels) if lm.task is not None else []
        last = lm.num_layers
        final = torch.log_softmax(logits_of(logit, last), -1)  # the model's own reading
        best = int(final.argmax())
        layers = []
        for s, label in enumerate(hidden_labels(lm.num_layers)):
            row = {}
            for name, which in (("tuned", lens), ("logit", logit)):
                logits = logits_of(which, s)
                p = torch.softmax(logits, -1)
                k = len(p) if names is not None else top_k
                top = torch.topk(p, k)
                words = [names[i] if names is not None else (lm.tokenizer.convert_ids_to_tokens(int(i)) or f"#{i}")
                         for i in top.indices.tolist()]
                row[name] = ([(w, float(v)) for w, v in zip(words, top.values.tolist())],
                             float(kl_to_final(final[None], logits[None])[0]), int((p > p[best]).sum()) + 1)
            layers.append(LensReading(label, row["tuned"][0], row["logit"][0], row["tuned"][1], row["logit"][1],
                                      row["tuned"][2], row["logit"][2]))
    if not np.isfinite([r.kl_tuned for r in layers]).all():
        raise BertScopeError("The lens gave values that are not finite on this text.")
    return LensReadings(lm.name, kind, text, position, tokens, layers)
