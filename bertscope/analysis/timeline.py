"""Models in BERT's story, on one log scale: counted from an architecture config where one
exists (built on the meta device, no weights), otherwise the figure the paper published."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from bertscope.analysis.params import count_parameters


@dataclass(frozen=True)
class Milestone:
    model: str
    year: int
    parameters: int
    source: str  # "counted from config" or "published"


def _meta_total(model_class, config) -> int:
    with torch.device("meta"):
        model = model_class(config)
    return sum(p.numel() for p in model.parameters())


@lru_cache(maxsize=1)
def milestones() -> tuple[Milestone, ...]:
    from transformers import GPT2Config, GPT2Model, T5Config, T5Model

    counted = "counted from config"
    gpt2_xl = GPT2Config(n_embd=1600, n_layer=48, n_head=25, n_positions=1024, vocab_size=50257)
    gpt3 = GPT2Config(n_embd=12288, n_layer=96, n_head=96, n_positions=2048, vocab_size=50257)
    t5_11b = T5Config(d_model=1024, d_ff=65536, d_kv=128, num_heads=128, num_layers=24,
                      vocab_size=32128)
    return (
        Milestone("ELMo", 2018, 94_000_000, "published"),
        Milestone("BERT-large", 2018, count_parameters("bert-large-uncased").total, counted),
        Milestone("GPT-2 (1.5B)", 2019, _meta_total(GPT2Model, gpt2_xl), counted),
        Milestone("Megatron-LM", 2019, 8_300_000_000, "published"),
        Milestone("T5-11B", 2019, _meta_total(T5Model, t5_11b), counted),
        Milestone("Turing-NLG", 2020, 17_000_000_000, "published"),
        Milestone("GPT-3", 2020, _meta_total(GPT2Model, gpt3), counted),
        Milestone("Switch Transformer", 2021, 1_600_000_000_000, "published"),
    )
