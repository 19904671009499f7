"""The model a run trains: the encoder with its masked-LM head (and NSP / SOP head), LoRA-wrapped by
peft, and which weights are trained in full beside the adapters.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any

import torch

from bertscope.core.hook_points import UNEMBED_IN, Hooks
from bertscope.runtime.hf import quiet_transformers
from bertscope.sources.delta import PAIR_HEAD_PREFIXES
from bertscope.training.config import LORA_TARGETS, RecipeConfig


def build_model(source: str, local_only: bool, cfg: RecipeConfig) -> Any:
    """The encoder with a masked-LM head (and, for a pair task, the family's pretraining class:
    BERT's NSP head or ALBERT's SOP head), LoRA-wrapped when ``cfg.lora_rank`` > 0."""
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    auto = AutoModelForMaskedLM if cfg.pair_task == "none" else AutoModelForPreTraining
    with quiet_transformers():
        model = auto.from_pretrained(source, local_files_only=local_only, trust_remote_code=False,
                                                     attn_implementation="sdpa", dtype=torch.float32)
    if cfg.lora_rank == 0:
        model.requires_grad_(True)
        return model
    from peft import LoraConfig, get_peft_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks transformers a deprecated question
        model = get_peft_model(model, LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                                 target_modules=LORA_TARGETS, bias="none"))
    for name, p in model.named_parameters():
        if is_extra(name):
            p.requires_grad_(True)
    return model


def is_extra(name: str) -> bool:
    """Weights trained in full beside LoRA: the head's transform and bias, every LayerNorm, and
    for pair tasks the pooler and the pair classifier."""
    inner = inner_name(name)
    return ("LayerNorm" in inner or inner.startswith(("cls.predictions.transform.", "lm_head.dense.",
                                                      "lm_head.layer_norm.", "predictions.dense.",
                                                      "predictions.LayerNorm.", "bert.pooler.", "albert.pooler.",
                                                      *PAIR_HEAD_PREFIXES))
            or inner in {"cls.predictions.bias", "lm_head.bias", "predictions.bias"}) and "lora_" not in inner


def inner_name(name: str) -> str:
    return name.removeprefix("base_model.model.")


def trainable(model: Any) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def vocabulary_layer(model: Any) -> torch.nn.Linear | None:
    """The masked-LM head's [hidden -> vocab] output layer, where it is a plain Linear."""
    decoder = model.get_output_embeddings()
    return decoder if isinstance(decoder, torch.nn.Linear) else None


@contextmanager
def logits_only_at(model: Any, chosen: torch.Tensor):
    """Within the block the masked-LM head's output layer sees only the ``chosen`` positions
    ([batch, token] bool): the model's logits come out as [chosen, vocab], in the order of
    ``tensor[chosen]``. The [vocab x hidden] projection is the head's cost (about as much as
    the whole encoder for MiniLM), and the loss needs 15% of its rows. Yields False (nothing
    changed) where the model has no such output layer."""
    if vocabulary_layer(model) is None:
        yield False
        return
    # the hook point unembed.hook_in: [batch, token, hidden] -> [chosen, hidden]
    with Hooks(model, {UNEMBED_IN: lambda x, hook: x[chosen]}):
        yield True


def mlm_logits(out: Any) -> torch.Tensor:
    """The masked-LM logits of a ``*ForMaskedLM`` (``logits``) or ``*ForPreTraining`` output."""
    logits = getattr(out, "prediction_logits", None)
    return out.logits if logits is None else logits
