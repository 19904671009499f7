"""The model the second stage trains: the encoder under a new task head (``*ForSequenceClassification``,
``*ForTokenClassification`` or ``*ForQuestionAnswering``: start and end, seeded), trained in full or through LoRA adapters (peft) with the
head, the pooler and every LayerNorm trained in full beside them."""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import torch

from bertscope.runtime.hf import quiet_transformers
from bertscope.training.config import LORA_TARGETS
from bertscope.training.model import inner_name
from bertscope.training.task_data import SPAN, TAG

AUTO = {"sequence": "AutoModelForSequenceClassification", "token": "AutoModelForTokenClassification",
        "span": "AutoModelForQuestionAnswering"}
# each family's attention and feed-forward projections (BERT's names by default)
LORA_BY_TYPE = {"distilbert": ["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"],
                "deberta-v2": ["query_proj", "key_proj", "value_proj", "output.dense", "intermediate.dense"],
                "albert": ["query", "key", "value", "attention.dense", "ffn", "ffn_output"]}


def auto_class(task: str) -> str:
    return AUTO["token" if task == TAG else "span" if task == SPAN else "sequence"]


def build_task_model(source: str, local_only: bool, task: str, labels: Sequence[str], lora_rank: int,
                     lora_alpha: int, seed: int) -> Any:
    """The encoder of ``source`` under a new head for ``labels`` (its init drawn with ``seed``)."""
    import transformers

    torch.manual_seed(seed)
    auto = getattr(transformers, auto_class(task))
    with quiet_transformers():
        model = auto.from_pretrained(source, local_files_only=local_only, trust_remote_code=False,
                                     attn_implementation="sdpa", dtype=torch.float32, num_labels=len(labels),
                                     id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)},
                                     ignore_mismatched_sizes=True)  # a fine-tuned checkpoint with other labels
    if lora_rank == 0:
        model.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    prefix = model.base_model_prefix
    targets = LORA_BY_TYPE.get(model.config.model_type, LORA_TARGETS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks transformers a deprecated question
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                                                 target_modules=targets, bias="none"))
    for name, p in model.named_parameters():
        if is_task_extra(name, prefix):
            p.requires_grad_(True)
    return model


def is_task_extra(name: str, prefix: str) -> bool:
    """Weights trained in full beside LoRA: the task head (everything outside the encoder), the
    pooler and every LayerNorm."""
    inner = inner_name(name)
    if "lora_" in inner:
        return False
    head = not inner.startswith(prefix + ".")
    return head or ".pooler." in inner or "layernorm" in inner.lower().replace("_", "")
