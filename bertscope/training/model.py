"""The model a run trains: the encoder with its masked-LM head (and NSP / SOP head), LoRA-wrapped by
peft, and which weights are trained in full beside the adapters.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from typing import Any

import torch

from bertscope.core.hook_points import UNEMBED_IN, Hooks
from bertscope.runtime.families import family_of
from bertscope.runtime.hf import load_for_training
from bertscope.training.config import RecipeConfig


def build_model(source: str, local_only: bool, cfg: RecipeConfig) -> Any:
    """The encoder with a masked-LM head (and, for a pair task, the family's pretraining class:
    BERT's NSP head or ALBERT's SOP head), LoRA-wrapped when ``cfg.lora_rank`` > 0."""
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    auto = AutoModelForMaskedLM if cfg.pair_task == "none" else AutoModelForPreTraining
    model = load_for_training(auto, source, local_only)
    if cfg.lora_rank == 0:
        model.requires_grad_(True)
        return model
    return wrap_lora(model, cfg.lora_rank, cfg.lora_alpha)


def wrap_lora(model: Any, rank: int, alpha: int) -> Any:
    """peft's LoRA on the family's attention and feed-forward projections (``Family.lora_targets``:
    the same in both of BERT's stages), with the weights ``trained_in_full`` trainable beside it."""
    from peft import LoraConfig, get_peft_model

    targets = list(family_of(model.config.model_type).lora_targets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks transformers a deprecated question
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                                                 target_modules=targets, bias="none"))
    full = trained_in_full(model)
    for name, p in model.named_parameters():
        if name in full:
            p.requires_grad_(True)
    return model


def trained_in_full(model: Any) -> set[str]:
    """The parameters trained in full beside LoRA, by what they are rather than by any family's names:
    every LayerNorm, the pooler, and every output layer outside the encoder (a task head; the masked-LM
    head's transform and bias; a pair head), but never a vocabulary projection's weight (the
    [vocabulary x hidden] matrix, tied to the embeddings or not)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    encoder = {id(p) for p in inner.base_model.parameters()}
    vocabulary = inner.get_output_embeddings()
    projection = id(vocabulary.weight) if isinstance(vocabulary, torch.nn.Linear) else None
    kept = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm) for p in m.parameters()}
    pooler = getattr(inner.base_model, "pooler", None)
    if pooler is not None:
        kept |= {id(p) for p in pooler.parameters()}
    return {name for name, p in model.named_parameters() if "lora_" not in name and
            (id(p) in kept or (id(p) not in encoder and id(p) != projection))}


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


