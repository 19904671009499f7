"""What a run of BERT's recipe is set to: the recipe's settings, the pair task each family has, the
sentences compared before and after.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from bertscope.errors import BertScopeError
from bertscope.mlm.masking import check_rates
from bertscope.runtime.families import pair_head

PAIR_TASKS = ("none", "nsp", "sop")
CLOZE = (  # everyday sentences to watch predictions change (a word a reader would expect)
    "I drink a cup of [MASK] every morning.",
    "He deposited the money in the [MASK].",
    "The capital of France is [MASK].",
    "She opened the [MASK] and walked into the room.",
    "The children played in the [MASK] after school.",
    "It was a cold winter [MASK].",
)


MIN_HELD_OUT = 64  # held-out chunks scored at least, when a budget cuts the held-out side


@dataclass(frozen=True)
class RecipeConfig:
    seq_len: int = 128  # tokens per chunk, [CLS] and [SEP] included
    select_rate: float = 0.15  # share of a chunk's ordinary tokens chosen for prediction
    mask_rate: float = 0.8  # of the chosen: replaced by [MASK]
    random_rate: float = 0.1  # of the chosen: replaced by a random ordinary token (the rest stay)
    masking: Literal["dynamic", "static"] = "dynamic"  # RoBERTa's, or one corruption per chunk (BERT)
    lora_rank: int = 16  # 0 = full fine-tuning
    lora_alpha: int = 32
    epochs: int = 16
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: float = 0.06  # share of the steps with a linear warm-up
    seed: int = 0
    max_chunks: int | None = None  # a budget: train on at most this many chunks (None: all)
    pair_task: Literal["none", "nsp", "sop"] = "none"  # sentence pairs with BERT's NSP or ALBERT's SOP beside MLM
    max_held_out: int | None = None  # held-out chunks scored each epoch (None: all, or in proportion to max_chunks)

    def held_out_budget(self, train: int, held: int) -> int | None:
        """How many held-out chunks to score (None: all): ``max_held_out``, else, under a ``max_chunks`` budget, the
        held-out side cut in the proportion the training side was (at least 64, to keep the loss readable)."""
        if self.max_held_out is not None:
            return self.max_held_out
        if self.max_chunks is None or self.max_chunks >= train:
            return None
        return max(MIN_HELD_OUT, -(-held * self.max_chunks // max(train, 1)))

    def check(self) -> None:
        if not 8 <= self.seq_len <= 512:
            raise BertScopeError("The chunk length must be between 8 and 512 tokens.")
        check_rates(self.select_rate, self.mask_rate, self.random_rate)  # the recipe page's rules
        if self.masking not in ("dynamic", "static"):
            raise BertScopeError("Masking is 'dynamic' or 'static'.")
        if self.pair_task not in PAIR_TASKS:
            raise BertScopeError("The sentence-pair task is 'none', 'nsp' (BERT's) or 'sop' (ALBERT's).")
        check_finite(self)
        if self.lora_rank < 0 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise BertScopeError("LoRA rank >= 0, epochs >= 1, batch size >= 1 and a positive learning rate, please.")
        if self.max_chunks is not None and self.max_chunks < 1 or self.max_held_out is not None and self.max_held_out < 1:
            raise BertScopeError("--max-chunks and --max-held-out must be at least 1.")


def check_finite(cfg: Any) -> None:
    """Every number of a run's settings finite: ``nan`` passes every ``<= 0`` check and trains nothing."""
    for item in fields(cfg):
        value = getattr(cfg, item.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise BertScopeError(f"{item.name.replace('_', ' ')} is {value}: give a finite number.")


def check_pair_task(model_name: str, model_type: str, task: str) -> None:
    """Each family trains the sentence-pair head its own pretraining had (and the loader reads)."""
    if task == "none":
        return
    has = pair_head(model_type)
    if task != has:
        what = {"nsp": "next-sentence", "sop": "sentence-order"}[task]
        other = f" (its own is {has.upper()}: choose --pair {has})" if has else ""
        owner = {"nsp": "NSP is BERT's", "sop": "SOP is ALBERT's"}[task]
        raise BertScopeError(f"{model_name} is a {model_type} model, which has no {what} head{other}: {owner}.")


MAX_CLOZE, MAX_CLOZE_CHARS = 12, 300


def check_cloze(texts: Sequence[str]) -> list[str]:
    """The sentences to compare before and after: each with a [MASK] (the first is predicted)."""
    texts = [t.strip() for t in texts if t and t.strip()]
    if not texts:
        raise BertScopeError("Give at least one sentence with [MASK] to compare before and after.")
    if len(texts) > MAX_CLOZE:
        raise BertScopeError(f"At most {MAX_CLOZE} sentences to compare before and after ({len(texts)} given).")
    for text in texts:
        if "[MASK]" not in text:
            raise BertScopeError(f"Each sentence needs a [MASK] to predict: {text[:60]!r} has none.")
        if len(text) > MAX_CLOZE_CHARS:
            raise BertScopeError(f"Sentences to compare are at most {MAX_CLOZE_CHARS} characters: {text[:40]!r}… "
                                 f"has {len(text)}.")
    return texts


@dataclass(frozen=True)
class FinetuneConfig:
    """BERT's second stage (Devlin et al. 2019, §4 and appendix A.3: batch 32, learning rate 5e-5,
    2-4 epochs, the whole model trained; with ``lora_rank`` > 0 adapters instead, at a larger rate)."""

    task: str = "classify"  # classify, pairs, tag or span
    seq_len: int = 128  # tokens at most per input, special tokens included (longer inputs are cut and counted)
    lora_rank: int = 0  # 0 = every weight (BERT's own fine-tuning)
    lora_alpha: int = 32
    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup: float = 0.1
    seed: int = 0
    held_out: float = 0.1  # the share held out where the data has no split of its own
    class_weights: bool = False  # weigh each class's loss by n / (classes x its count)
    max_examples: int | None = None  # a budget: train on at most this many (seeded sample)
    max_held_out: int | None = None  # a budget: score at most this many held-out examples every epoch (seeded sample)
    group_by_length: bool = False  # batches of inputs of like length (transformers' group_by_length): less padding

    def check(self) -> None:
        if self.task not in ("classify", "pairs", "tag", "span"):
            raise BertScopeError(f"Unknown task {self.task!r}: use classify, pairs, tag or span.")
        if self.task == "span" and self.class_weights:
            raise BertScopeError("Class weights are for labels; an answer span has none to weigh.")
        if not 8 <= self.seq_len <= 512:
            raise BertScopeError("--seq-len must be between 8 and 512 tokens.")
        check_finite(self)
        if self.lora_rank < 0 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise BertScopeError("LoRA rank >= 0, epochs >= 1, batch size >= 1 and a positive learning rate, please.")
        if not 0 < self.held_out < 0.5:
            raise BertScopeError("--held-out must be a share between 0 and 0.5.")
        if self.max_examples is not None and self.max_examples < 2:
            raise BertScopeError("--max-examples must be at least 2.")
        if self.max_held_out is not None and self.max_held_out < 1:
            raise BertScopeError("--max-held-out must be at least 1.")
