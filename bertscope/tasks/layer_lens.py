"""The logit lens for task heads: the model's own head read at every hidden state — at which layer
is the decision made? (nostalgebraist 2020's logit lens, here for fine-tuned classifiers, as the
masked-LM head is read in ``heads.logit_lens``.)

Hidden state s (the embeddings, then each layer's output) is put where the last layer's output
goes (the hook point ``blocks.{L-1}.hook_resid_post``), and the rest of the model runs as it is:
the head reads it exactly as it reads the last layer — BERT's and ALBERT's pooler (dense + tanh
on [CLS]) then the classifier, RoBERTa's and ELECTRA's head on [CLS], DistilBERT's
pre-classifier, DeBERTa's context pooler — with no re-implementation per family. The L + 1
readings run as rows of batches bounded by bytes (each row is a whole pass: on BERT-base at 512
tokens about 9 s on 2 CPU cores, so the page runs it when asked, through the cost budget); the
last one is the model's own decision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from bertscope.core.batch_plan import DEFAULT_BATCH_BYTES
from bertscope.core.hooked_pass import model_inputs
from bertscope.core.layers import hidden_names
from bertscope.core.models import LoadedModel
from bertscope.core.passes import repeat_feed, rows_within_budget, wide
from bertscope.core.task_head import SEQUENCE, require_task
from bertscope.errors import BertScopeError
from bertscope.tasks.classify import scores_of


@dataclass(frozen=True)
class LayerDecisions:
    """Each hidden state's reading by the classifier's head."""

    states: list[str]  # "embeddings", "0", … (core.layers)
    labels: tuple[str, ...]
    scores: np.ndarray  # [state, label] as the head scores them (probabilities, or the regression value)
    scoring: str
    logits: np.ndarray  # [state, label]

    @property
    def predicted(self) -> list[str]:
        return [self.labels[int(i)] for i in self.scores.argmax(-1)]

    def first_final(self) -> str:
        """The first hidden state from which on the reading stays the final decision."""
        predicted = self.predicted
        at = len(predicted) - 1
        while at > 0 and predicted[at - 1] == predicted[-1]:
            at -= 1
        return self.states[at]

    def to_json(self) -> dict:
        return {"labels": list(self.labels), "scoring": self.scoring,
                "layers": [{"layer": name if name == "embeddings" else int(name),
                            "scores": {label: float(v) for label, v in zip(self.labels, row)}}
                           for name, row in zip(self.states, self.scores)],
                "decided_from": self.first_final()}


def layer_decisions(lm: LoadedModel, text: str, pair: str | None = None,
                    max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> LayerDecisions:
    """The classifier's head applied to every hidden state of ``text`` (and its pair).

    Args:
        lm: a sequence classifier.
        text: segment A (not empty).
        pair: segment B, for a sentence-pair classifier.
        max_batch_bytes: about how many bytes of outputs one batch of readings may hold.

    Returns:
        ``LayerDecisions``: the states ("embeddings", "0", ...), the labels, the scores [state, label] as the head
            scores them (probabilities, or a regression's value), the scoring and the logits [state, label]; the last
            row is the model's own decision.
    """
    require_task(lm, SEQUENCE)
    if not isinstance(text, str) or not text.strip():
        raise BertScopeError("The text is empty: type at least one word.")
    feed = model_inputs(lm, lm.tokenizer(text, pair, return_tensors="pt", truncation=True, max_length=lm.max_length))
    names = ["embed"] + [f"blocks.{layer}.hook_resid_post" for layer in range(lm.num_layers)]
    _, cache = lm.run_with_cache(feed, names, encoder_only=True)
    states = torch.cat([cache[name] for name in names])  # [state, token, dim]
    last = f"blocks.{lm.num_layers - 1}.hook_resid_post"

    feed = {k: v.to(lm.device) for k, v in feed.items()}
    per_batch = rows_within_budget(lm, states.shape[1], max_batch_bytes)
    parts = []
    for start in range(0, len(names), per_batch):  # the readings in batches bounded by bytes
        chunk = states[start:start + per_batch]  # [rows, token, dim]

        def as_last(x: torch.Tensor, hook, chunk=chunk) -> torch.Tensor:  # x [rows, token, dim]
            return chunk.to(x.dtype)

        rows = repeat_feed(feed, len(chunk))
        parts.append(wide(lm.run(rows, hooks={last: as_last}).logits))  # [rows, label]
    logits = torch.cat(parts)  # [state, label]
    scores = scores_of(logits, lm.task.scoring).cpu().numpy()
    return LayerDecisions(hidden_names(lm.num_layers), lm.task.labels, scores, lm.task.scoring, logits.cpu().numpy())
