"""The model the second stage trains: the encoder under a new task head (``*ForSequenceClassification``,
``*ForTokenClassification`` or ``*ForQuestionAnswering``: start and end, seeded), trained in full or through LoRA adapters (peft) with the
head, the pooler and every LayerNorm trained in full beside them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bertscope.runtime.hf import load_for_training
from bertscope.training.model import wrap_lora
from bertscope.training.task_data import SPAN, TAG

AUTO = {"sequence": "AutoModelForSequenceClassification", "token": "AutoModelForTokenClassification",
        "span": "AutoModelForQuestionAnswering"}


def auto_class(task: str) -> str:
    return AUTO["token" if task == TAG else "span" if task == SPAN else "sequence"]


def build_task_model(source: str, local_only: bool, task: str, labels: Sequence[str], lora_rank: int,
                     lora_alpha: int, seed: int) -> Any:
    """The encoder of ``source`` under a new head for ``labels`` (its init drawn with ``seed``)."""
    import transformers

    torch.manual_seed(seed)
    auto = getattr(transformers, auto_class(task))
    model = load_for_training(auto, source, local_only, num_labels=len(labels), id2label=dict(enumerate(labels)),
                              label2id={x: i for i, x in enumerate(labels)},
                              ignore_mismatched_sizes=True)  # a fine-tuned checkpoint with other labels
    if lora_rank == 0:
        model.requires_grad_(True)
        return model
    return wrap_lora(model, lora_rank, lora_alpha)
