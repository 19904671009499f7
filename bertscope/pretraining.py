"""BERT's masked-LM recipe, run: continued pretraining of a BERT-family encoder.

    >>> from bertscope.pretraining import RecipeConfig, train
    >>> run = train("bundled", documents_train, documents_held_out, "runs/mlm",
    ...             RecipeConfig(epochs=16, lora_rank=16, lr=1e-3))       # doctest: +SKIP

References: Devlin et al. (2019), BERT, section 3.1 and appendix A.1 (15% of tokens chosen;
of those 80% [MASK], 10% a random token, 10% unchanged; the loss on the chosen positions
only) and google-research/bert's ``create_pretraining_data.py`` (exactly round(15% x n)
positions per sequence, never a special token); Liu et al. (2019), RoBERTa, section 4.1
(dynamic masking: a new mask every time a sequence is seen, against BERT's static masks);
Hu et al. (2022), LoRA, through the ``peft`` library.

What one run does:
- text: each document's sentences are tokenised and concatenated, then cut into chunks of
  ``seq_len`` tokens ([CLS] ... [SEP]); a chunk never mixes documents, and train and held-out
  documents are disjoint (the caller splits, e.g. ``brown.split_documents``);
- ``pair_task`` "nsp" / "sop": instead of plain chunks, sentence pairs [CLS] A [SEP] B [SEP]
  built once per run as google-research/bert's ``create_pretraining_data.py`` (``pair_instances``):
  for NSP (Devlin et al. 2019, §3.1) half the B segments come from another document; for SOP
  (Lan et al. 2020, §4.1) half the pairs are swapped. The pair head's cross-entropy is added to
  the masked-LM loss, as in both papers. Each family trains its own head (BERT: NSP; ALBERT:
  SOP), which the loader then reads like any checkpoint's;
- model: the encoder with a masked-LM head (``AutoModelForMaskedLM``; ``AutoModelForPreTraining``
  for a pair task): the checkpoint's own heads where it has them, else new ones (the MLM output
  layer tied to the input embeddings). The head's vocabulary projection runs only at the chosen
  positions (``_logits_only_at``): 15% of its rows, where it costs as much as MiniLM's encoder;
- ``lora_rank`` > 0: LoRA adapters on the query, key, value, attention-output and both
  feed-forward projections, and the head's transform, every LayerNorm and the output bias
  trained in full; the embeddings (and so the tied output layer) stay frozen. 0: every weight;
- AdamW, linear warm-up then linear decay, gradient clipping at 1.0; on a GPU bf16 autocast
  (fp16 with loss scaling where bf16 is missing);
- memory bounded by bytes: what autograd saves for one row is measured once (saved-tensor
  hooks on a one-row forward), and a batch whose rows would take more than the budget
  (``BERTSCOPE_TRAIN_MB``; half a GPU, a quarter of the machine's memory on the CPU) runs as
  micro-batches whose gradients add up to the batch's (equal to 1e-5 without dropout);
- after each epoch: held-out loss, top-1 and top-5 accuracy over the chosen positions of a
  fixed (seeded) corruption of the held-out chunks (and the pair head's held-out accuracy), and a checkpoint of everything needed to
  go on (trainable weights, optimiser moments, RNG states: safetensors + JSON, no pickle,
  written to a temporary folder and renamed). A rerun with the same output folder resumes at
  the last finished epoch and ends with the same weights as an uninterrupted run.

Outputs in the run folder: ``model/`` (a standard transformers folder with the head, LoRA
merged), ``adapter/`` for LoRA runs (the delta alone: adapter + ``extras.safetensors``, which
``apply_delta`` merges onto the base), ``metrics.json`` and ``curves.png``.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .errors import BertScopeError
from .mlm_recipe import IGNORE_INDEX, _check_rates
from .user_cache import replace_folder

PAIR_TASKS = ("none", "nsp", "sop")
LORA_TARGETS = ["query", "key", "value", "output.dense", "intermediate.dense"]  # attention + FFN projections
CLOZE = (  # everyday sentences to watch predictions change (a word a reader would expect)
    "I drink a cup of [MASK] every morning.",
    "He deposited the money in the [MASK].",
    "The capital of France is [MASK].",
    "She opened the [MASK] and walked into the room.",
    "The children played in the [MASK] after school.",
    "It was a cold winter [MASK].",
)


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

    def check(self) -> None:
        if not 8 <= self.seq_len <= 512:
            raise BertScopeError("The chunk length must be between 8 and 512 tokens.")
        _check_rates(self.select_rate, self.mask_rate, self.random_rate)  # the recipe page's rules
        if self.masking not in ("dynamic", "static"):
            raise BertScopeError("Masking is 'dynamic' or 'static'.")
        if self.pair_task not in PAIR_TASKS:
            raise BertScopeError("The sentence-pair task is 'none', 'nsp' (BERT's) or 'sop' (ALBERT's).")
        if self.lora_rank < 0 or self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise BertScopeError("LoRA rank >= 0, epochs >= 1, batch size >= 1 and a positive learning rate, please.")


@dataclass(frozen=True)
class Chunks:
    """What training takes and the held-out set scores: rows of ``seq_len`` tokens."""

    ids: torch.Tensor  # [chunk, seq_len] int64: [CLS] ... [SEP] (pairs: [CLS] A [SEP] B [SEP]), padded
    token_types: torch.Tensor | None = None  # [chunk, seq_len] 0 = segment A, 1 = segment B (pairs only)
    pair_labels: torch.Tensor | None = None  # [chunk] 0 = B follows A / in order, 1 = B random (NSP) / swapped (SOP)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, idx: torch.Tensor | slice) -> "Chunks":
        return Chunks(self.ids[idx], None if self.token_types is None else self.token_types[idx],
                      None if self.pair_labels is None else self.pair_labels[idx])


def tokenize_documents(tokenizer: Any, documents: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Per document, per sentence: its token ids (no special tokens); empty ones dropped."""
    out = []
    for sentences in documents:
        sentences = [s for s in sentences if s.strip()]
        if sentences:
            rows = [r for r in tokenizer(list(sentences), add_special_tokens=False)["input_ids"] if r]
            if rows:
                out.append(rows)
    return out


def _special_ids(tokenizer: Any) -> tuple[int, int, int]:
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    if cls is None or sep is None or pad is None:
        raise BertScopeError("The tokenizer needs [CLS], [SEP] and [PAD] tokens (or <s>, </s>, <pad>).")
    return cls, sep, pad


def chunk_documents(tokenizer: Any, documents: Sequence[Sequence[str]], seq_len: int) -> torch.Tensor:
    """[chunk, seq_len] int64: each document's tokens cut into [CLS] piece [SEP] chunks, padded.
    A document's last piece is kept when it has at least a quarter of a chunk."""
    body = seq_len - 2
    cls, sep, pad = _special_ids(tokenizer)
    chunks = []
    for sentences in tokenize_documents(tokenizer, documents):
        ids = [i for row in sentences for i in row]
        for start in range(0, len(ids), body):
            piece = ids[start:start + body]
            if len(piece) < max(4, body // 4) and start > 0:
                continue
            chunks.append([cls, *piece, sep] + [pad] * (body - len(piece)))
    if not chunks:
        raise BertScopeError("The corpus has no text to train on.")
    return torch.tensor(chunks, dtype=torch.long)


def pair_instances(tokenizer: Any, documents: Sequence[Sequence[str]], seq_len: int, task: str,
                   seed: int) -> Chunks:
    """Sentence pairs for NSP or SOP, as google-research/bert's ``create_instances_from_document``
    (and ALBERT's): a document's sentences are gathered until they fill a chunk, then cut at a
    random sentence boundary into segment A and segment B (a one-sentence piece is cut inside
    the sentence). NSP: half the time B is replaced by text from a random other document
    (label 1, NotNext; from a distant part of the same one when there is only one document),
    and the sentences it displaced start the next pair. SOP: half the time
    A and B swap places (label 1). The pair is trimmed to fit as in ``truncate_seq_pair``: the
    longer segment loses a token at a random end until both fit."""
    import random

    if task not in ("nsp", "sop"):
        raise BertScopeError("Sentence pairs are built for 'nsp' or 'sop'.")
    cls, sep, pad = _special_ids(tokenizer)
    docs = tokenize_documents(tokenizer, documents)
    rng = random.Random(seed)
    target = seq_len - 3  # [CLS] A [SEP] B [SEP]
    rows, types, labels = [], [], []
    for d, sentences in enumerate(docs):
        i, chunk, length = 0, [], 0
        while i < len(sentences):
            chunk.append(sentences[i])
            length += len(sentences[i])
            if i == len(sentences) - 1 or length >= target:
                if len(chunk) == 1:  # one sentence: two pieces of it
                    piece = chunk[0][:target + 1]
                    cut = rng.randint(1, len(piece) - 1) if len(piece) > 1 else 0
                    parts, a_end = [piece[:cut], piece[cut:]], 1
                else:
                    parts, a_end = chunk, rng.randint(1, len(chunk) - 1)
                a = [t for part in parts[:a_end] for t in part]
                b = [t for part in parts[a_end:] for t in part]
                label = 0
                if task == "nsp" and rng.random() < 0.5:
                    if len(docs) > 1:
                        other = rng.randrange(len(docs) - 1)
                        other += other >= d  # any document but this one
                        start = rng.randrange(len(docs[other]))
                    else:  # one document (as google's code then does): a part of it away from this pair
                        other, near = d, range(i - len(chunk) + 1, i + 2)
                        far = [j for j in range(len(sentences)) if j not in near]
                        start = rng.choice(far) if far else rng.randrange(len(sentences))
                    b = []
                    for sentence in docs[other][start:]:
                        b.extend(sentence)
                        if len(b) >= target - len(a):
                            break
                    label = 1
                    if len(chunk) > 1:
                        i -= len(chunk) - a_end  # the displaced sentences start the next pair
                elif task == "sop" and rng.random() < 0.5:
                    a, b, label = b, a, 1
                while len(a) + len(b) > target:  # truncate_seq_pair
                    longer = a if len(a) > len(b) else b
                    del longer[0 if rng.random() < 0.5 else -1]
                if a and b:
                    row = [cls, *a, sep, *b, sep]
                    rows.append(row + [pad] * (seq_len - len(row)))
                    types.append([0] * (len(a) + 2) + [1] * (len(b) + 1) + [0] * (seq_len - len(row)))
                    labels.append(label)
                chunk, length = [], 0
            i += 1
    if not rows:
        raise BertScopeError("The corpus has no text to build sentence pairs from.")
    return Chunks(torch.tensor(rows, dtype=torch.long), torch.tensor(types, dtype=torch.long),
                  torch.tensor(labels, dtype=torch.long))


def build_chunks(tokenizer: Any, documents: Sequence[Sequence[str]], cfg: RecipeConfig, seed: int) -> Chunks:
    """Plain chunks for masked-LM alone, sentence pairs when ``cfg.pair_task`` asks for them."""
    if cfg.pair_task == "none":
        return Chunks(chunk_documents(tokenizer, documents, cfg.seq_len))
    return pair_instances(tokenizer, documents, cfg.seq_len, cfg.pair_task, seed)


def ordinary_ids(tokenizer: Any, vocab_size: int) -> torch.Tensor:
    """[n] ids a random replacement may take: the vocabulary without special or unused tokens."""
    special = set(tokenizer.all_special_ids)
    vocab = tokenizer.get_vocab()
    keep = sorted(i for piece, i in vocab.items()
                  if i < vocab_size and i not in special and not (piece.startswith("[") and piece.endswith("]")))
    return torch.tensor(keep, dtype=torch.long)


def mask_tokens(ids: torch.Tensor, special: torch.Tensor, replacements: torch.Tensor, mask_id: int,
                cfg: RecipeConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of a batch: (inputs [batch, token], labels [batch, token]).

    Per row, exactly max(1, round(n x select_rate)) of its n ordinary tokens are chosen
    uniformly; each chosen token becomes ``mask_id`` with probability mask_rate, a random
    ordinary token with random_rate, and stays otherwise. Labels hold the original id at the
    chosen positions and -100 (ignored by the loss) everywhere else."""
    b, t = ids.shape
    candidate = ~special  # [batch, token]
    n = candidate.sum(dim=1)  # [batch]
    count = torch.clamp((n.float() * cfg.select_rate).round().long(), min=1)
    count = torch.minimum(count, n)
    scores = torch.rand(b, t, generator=generator)
    scores[~candidate] = -1.0  # never chosen before an ordinary token
    rank = torch.argsort(torch.argsort(scores, dim=1, descending=True), dim=1)  # [batch, token] 0 = best
    chosen = (rank < count[:, None]) & candidate
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    u = torch.rand(b, t, generator=generator)
    to_mask = chosen & (u < cfg.mask_rate)
    to_random = chosen & (u >= cfg.mask_rate) & (u < cfg.mask_rate + cfg.random_rate)
    random_ids = replacements[torch.randint(len(replacements), (b, t), generator=generator)]
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


def special_mask(tokenizer: Any, ids: torch.Tensor) -> torch.Tensor:
    """[batch, token] bool: special tokens and padding (never chosen)."""
    return torch.isin(ids, torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=ids.dtype))


def build_model(source: str, local_only: bool, cfg: RecipeConfig) -> Any:
    """The encoder with a masked-LM head (and, for a pair task, the family's pretraining class:
    BERT's NSP head or ALBERT's SOP head), LoRA-wrapped when ``cfg.lora_rank`` > 0."""
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

    from .models import quiet_transformers

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
        if _is_extra(name):
            p.requires_grad_(True)
    return model


PAIR_HEAD_PREFIXES = ("cls.seq_relationship.", "sop_classifier.")  # BERT's NSP, ALBERT's SOP classifier


def _is_extra(name: str) -> bool:
    """Weights trained in full beside LoRA: the head's transform and bias, every LayerNorm, and
    for pair tasks the pooler and the pair classifier."""
    inner = _inner_name(name)
    return ("LayerNorm" in inner or inner.startswith(("cls.predictions.transform.", "lm_head.dense.",
                                                      "lm_head.layer_norm.", "predictions.dense.",
                                                      "predictions.LayerNorm.", "bert.pooler.", "albert.pooler.",
                                                      *PAIR_HEAD_PREFIXES))
            or inner in {"cls.predictions.bias", "lm_head.bias", "predictions.bias"}) and "lora_" not in inner


def _inner_name(name: str) -> str:
    return name.removeprefix("base_model.model.")


def trainable(model: Any) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _lr_at(step: int, total: int, cfg: RecipeConfig) -> float:
    warm = max(1, int(total * cfg.warmup))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    return cfg.lr * max(0.0, (total - step) / max(1, total - warm))


def _autocast(device: torch.device):
    if device.type != "cuda":
        return torch.autocast("cpu", enabled=False), None
    if torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16), None
    return torch.autocast("cuda", dtype=torch.float16), torch.amp.GradScaler("cuda")


def check_pair_task(model_name: str, model_type: str, task: str) -> None:
    """Each family trains the sentence-pair head its own pretraining had (and the loader reads)."""
    from .models import NSP_TYPES, SOP_TYPES

    if task == "nsp" and model_type not in NSP_TYPES:
        other = " (ALBERT's is SOP: choose --pair sop)" if model_type in SOP_TYPES else ""
        raise BertScopeError(f"{model_name} is a {model_type} model, which has no next-sentence head{other}: "
                             "NSP is BERT's.")
    if task == "sop" and model_type not in SOP_TYPES:
        other = " (BERT's is NSP: choose --pair nsp)" if model_type in NSP_TYPES else ""
        raise BertScopeError(f"{model_name} is a {model_type} model, which has no sentence-order head{other}: "
                             "SOP is ALBERT's.")


def _mlm_logits(out: Any) -> torch.Tensor:
    """The masked-LM logits of a ``*ForMaskedLM`` (``logits``) or ``*ForPreTraining`` output."""
    logits = getattr(out, "prediction_logits", None)
    return out.logits if logits is None else logits


def _vocabulary_layer(model: Any) -> torch.nn.Linear | None:
    """The masked-LM head's [hidden -> vocab] output layer, where it is a plain Linear."""
    decoder = model.get_output_embeddings()
    return decoder if isinstance(decoder, torch.nn.Linear) else None


@contextmanager
def _logits_only_at(model: Any, chosen: torch.Tensor):
    """Within the block the masked-LM head's output layer sees only the ``chosen`` positions
    ([batch, token] bool): the model's logits come out as [chosen, vocab], in the order of
    ``tensor[chosen]``. The [vocab x hidden] projection is the head's cost (about as much as
    the whole encoder for MiniLM), and the loss needs 15% of its rows. Yields False (nothing
    changed) where the model has no such output layer."""
    decoder = _vocabulary_layer(model)
    if decoder is None:
        yield False
        return

    def only_chosen(module: Any, args: tuple) -> tuple:
        return (args[0][chosen], *args[1:])  # [batch, token, hidden] -> [chosen, hidden]

    handle = decoder.register_forward_pre_hook(only_chosen)
    try:
        yield True
    finally:
        handle.remove()


def _forward(model: Any, batch: Chunks, inputs: torch.Tensor, labels: torch.Tensor, pad_id: int,
             device: torch.device, context: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One pass of the recipe: (logits [chosen, vocab] float32, gold ids [chosen], pair logits
    [batch, 2] float32 or None)."""
    labels = labels.to(device)
    chosen = labels != IGNORE_INDEX  # [batch, token]
    feed = {"input_ids": inputs.to(device), "attention_mask": (batch.ids != pad_id).long().to(device)}
    if batch.token_types is not None:
        feed["token_type_ids"] = batch.token_types.to(device)
    with context, _logits_only_at(model, chosen) as gathered:
        out = model(**feed)
    logits = _mlm_logits(out)
    if not gathered:
        logits = logits[chosen]
    pair = getattr(out, "seq_relationship_logits", None)
    if pair is None:
        pair = getattr(out, "sop_logits", None)
    return logits.float(), labels[chosen], None if batch.pair_labels is None or pair is None else pair.float()


BACKWARD_FACTOR = 2  # measured: a training row costs about twice what autograd saves for it (BERT-base,
# 512 tokens, CPU: 775 MiB saved, +1.57 GB peak RSS a row) -- the backward pass's own buffers


def training_budget(device: torch.device) -> int:
    """Bytes a training step's activations may take: ``BERTSCOPE_TRAIN_MB`` when set, else half
    of a GPU's memory, or a quarter of the machine's memory on the CPU."""
    import os

    value = os.environ.get("BERTSCOPE_TRAIN_MB", "").strip()
    if value:
        try:
            mb = int(value)
        except ValueError:
            mb = 0
        if mb <= 0:
            raise BertScopeError(f"BERTSCOPE_TRAIN_MB must be a positive number of MiB, not {value!r}.")
        return mb << 20
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // 2
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 16 << 30
    return memory // 4


def saved_bytes_per_row(model: Any, tokenizer: Any, chunks: Chunks, cfg: RecipeConfig, device: torch.device,
                        context: Any, replacements: torch.Tensor) -> int:
    """What autograd keeps for backward for one row of ``chunks`` (every row is ``seq_len`` wide,
    so any row costs the same): measured on a one-row forward with saved-tensor hooks, the
    weights themselves not counted. The random state is left as it was (dropout draws from it)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    total = 0

    def count(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        key = t.untyped_storage().data_ptr()
        if key not in seen and key not in params:
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t

    row = chunks.take(slice(0, 1))
    inputs, labels = mask_tokens(row.ids, special_mask(tokenizer, row.ids), replacements, tokenizer.mask_token_id,
                                 cfg, torch.Generator().manual_seed(0))
    was_training = model.training
    model.train()  # dropout's masks are saved too
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), \
            torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        picked, gold, pair = _forward(model, row, inputs, labels, tokenizer.pad_token_id, device, context)
        del picked, gold, pair  # the graph goes with them
    model.train(was_training)
    if device.type == "cpu":
        from .result_cache import return_freed_memory

        return_freed_memory()  # the probe's activations back to the OS, not kept beside the first step's
    return total


def _accumulate_gradients(model: Any, batch: Chunks, inputs: torch.Tensor, labels: torch.Tensor, pad_id: int,
                          device: torch.device, context: Any, scaler: Any, micro: int) -> tuple[float, float | None]:
    """Backward passes over ``batch`` in slices of ``micro`` rows whose gradients add up to the
    whole batch's: each slice's summed losses divided by the batch's chosen positions (masked-LM)
    and rows (pair head). Returns the batch's (masked-LM loss, pair loss or None)."""
    chosen = int((labels != IGNORE_INDEX).sum())
    rows = len(batch)
    mlm_total, pair_total, paired = 0.0, 0.0, False
    for start in range(0, rows, micro):
        part = slice(start, start + micro)
        picked, gold, pair = _forward(model, batch.take(part), inputs[part], labels[part], pad_id, device, context)
        mlm = F.cross_entropy(picked, gold, reduction="sum") / chosen
        loss = mlm
        if pair is not None:  # BERT's and ALBERT's objective: the sum of the two losses
            pair_part = F.cross_entropy(pair, batch.pair_labels[part].to(device), reduction="sum") / rows
            loss = loss + pair_part
            pair_total += float(pair_part.detach())
            paired = True
        (scaler.scale(loss) if scaler is not None else loss).backward()
        mlm_total += float(mlm.detach())
    return mlm_total, pair_total if paired else None


EVAL_LOGIT_BYTES = 1 << 30  # an evaluation batch's [batch, token, vocab] float32 logits at most


@torch.no_grad()
def evaluate(model: Any, tokenizer: Any, chunks: Chunks | torch.Tensor, cfg: RecipeConfig, device: torch.device,
             batch_size: int = 128) -> dict[str, float]:
    """Held-out loss, top-1 and top-5 over the chosen positions of one fixed corruption, and for
    sentence pairs the pair head's loss and accuracy. Batches hold at most ``batch_size`` chunks
    and ``EVAL_LOGIT_BYTES`` of float32 logits at the chosen positions."""
    if isinstance(chunks, torch.Tensor):
        chunks = Chunks(chunks)
    rows = chunks.ids.shape[1]  # logits a chunk: at every position, or at its chosen ones with the hook
    if _vocabulary_layer(model) is not None:
        rows = max(1, round(rows * cfg.select_rate))
    row_bytes = rows * model.config.vocab_size * 4
    batch_size = max(1, min(batch_size, EVAL_LOGIT_BYTES // row_bytes))
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(cfg.seed + 1_000_003)  # the same corruption every epoch
    replacements = ordinary_ids(tokenizer, model.config.vocab_size)
    loss_sum, top1, top5, count = 0.0, 0, 0, 0
    pair_loss, pair_right, pairs = 0.0, 0, 0
    context, _ = _autocast(device)
    # one corruption of the whole set, drawn before batching: the figure does not depend on batch sizes
    all_inputs, all_labels = mask_tokens(chunks.ids, special_mask(tokenizer, chunks.ids), replacements,
                                         tokenizer.mask_token_id, cfg, generator)
    for start in range(0, len(chunks), batch_size):
        part = slice(start, start + batch_size)
        picked, gold, pair = _forward(model, chunks.take(part), all_inputs[part], all_labels[part],
                                      tokenizer.pad_token_id, device, context)
        loss_sum += float(F.cross_entropy(picked, gold, reduction="sum"))
        best = picked.topk(5, dim=-1).indices  # [chosen, 5]
        top1 += int((best[:, 0] == gold).sum())
        top5 += int((best == gold[:, None]).any(dim=-1).sum())
        count += len(gold)
        if pair is not None:
            truth = chunks.pair_labels[part].to(device)
            pair_loss += float(F.cross_entropy(pair, truth, reduction="sum"))
            pair_right += int((pair.argmax(dim=-1) == truth).sum())
            pairs += len(truth)
    model.train(was_training)
    figures = {"loss": loss_sum / max(1, count), "top1": top1 / max(1, count), "top5": top5 / max(1, count),
               "positions": count}
    if pairs:
        figures.update({"pair_loss": pair_loss / pairs, "pair_accuracy": pair_right / pairs, "pairs": pairs})
    return figures


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


@torch.no_grad()
def cloze(model: Any, tokenizer: Any, texts: Sequence[str], device: torch.device, k: int = 5) -> list[dict]:
    """Top-k words at the first mask of each text."""
    was_training = model.training
    model.eval()
    out = []
    for text in texts:
        text = text.replace("[MASK]", tokenizer.mask_token)  # RoBERTa's <mask>
        enc = tokenizer(text, return_tensors="pt").to(device)
        at = int((enc["input_ids"][0] == tokenizer.mask_token_id).nonzero()[0])
        logits = _mlm_logits(model(**enc))[0, at].float()
        ids = logits.topk(k).indices.tolist()
        out.append({"text": text, "top": [tokenizer.convert_ids_to_tokens(i) for i in ids]})
    model.train(was_training)
    return out


@dataclass
class RunState:
    epoch: int = 0  # epochs finished
    step: int = 0  # optimiser steps taken
    history: list[dict] = field(default_factory=list)  # one entry per finished epoch


def _save_checkpoint(folder: Path, model: Any, optimizer: torch.optim.Optimizer, state: RunState,
                     cfg: RecipeConfig) -> None:
    """Everything needed to go on, atomically: trainable weights, AdamW moments, RNG states."""
    from safetensors.torch import save_file

    params = trainable(model)
    names = list(params)
    tensors = {f"param.{n}": p.detach().cpu().contiguous() for n, p in params.items()}
    index = {id(p): i for i, p in enumerate(params.values())}
    for p, moments in optimizer.state.items():
        for key, value in moments.items():
            tensors[f"opt.{index[id(p)]}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    tensors["rng.cpu"] = torch.get_rng_state()
    if torch.cuda.is_available():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".tmp-"))
    save_file(tensors, str(tmp / "state.safetensors"))
    (tmp / "state.json").write_text(json.dumps({"epoch": state.epoch, "step": state.step, "history": state.history,
                                                "config": asdict(cfg), "params": names}, indent=1))
    replace_folder(tmp, folder)


def _load_checkpoint(folder: Path, model: Any, optimizer: torch.optim.Optimizer, cfg: RecipeConfig) -> RunState | None:
    from safetensors.torch import load_file

    if not (folder / "state.json").is_file():
        return None
    meta = json.loads((folder / "state.json").read_text())
    saved = {"pair_task": "none", **meta["config"]}  # runs saved before pair tasks existed
    if {k: v for k, v in saved.items() if k != "epochs"} != {k: v for k, v in asdict(cfg).items() if k != "epochs"}:
        raise BertScopeError(f"{folder.parent} holds a run with other settings: choose another output folder.")
    tensors = load_file(str(folder / "state.safetensors"))
    params = trainable(model)
    if list(params) != meta["params"]:
        raise BertScopeError(f"The checkpoint in {folder} does not fit this model.")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[f"param.{n}"])
    values = list(params.values())
    for key, value in tensors.items():
        if key.startswith("opt."):
            _, i, name = key.split(".", 2)
            optimizer.state[values[int(i)]][name] = value.to(values[int(i)].device) if name != "step" else value
    torch.set_rng_state(tensors["rng.cpu"])
    if "rng.cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    return RunState(meta["epoch"], meta["step"], meta["history"])


def train(
    model_name: str,
    train_documents: Sequence[Sequence[str]],
    held_out_documents: Sequence[Sequence[str]],
    out: str | Path,
    cfg: RecipeConfig = RecipeConfig(),
    device: str = "auto",
    progress: Callable[[int, int, dict], None] | None = None,
    stop: Callable[[], bool] | None = None,
    cloze_texts: Sequence[str] = CLOZE,
    memory_bytes: int | None = None,
) -> RunState:
    """Run (or resume) the recipe; writes the run folder (see the module docstring).

    ``progress(step, total_steps, info)`` after each step; ``stop()`` is asked between steps
    and ends the run early at the last finished epoch (a cancel button). ``cloze_texts``
    (each with a [MASK]) are predicted before and after, for metrics.json and the page.
    ``memory_bytes`` bounds a step's activations (default ``training_budget``): a batch that
    would take more runs as micro-batches whose gradients add up to the whole batch's."""
    from .devices import resolve_device
    from .models import _load_config, _load_tokenizer, resolve_source

    cfg.check()
    cloze_texts = check_cloze(cloze_texts)
    torch_device = resolve_device(device)
    source, local_only = resolve_source(model_name)
    config = _load_config(model_name, source, local_only)  # refuses decoders, remote code, unknown ids
    tokenizer = _load_tokenizer(model_name, source, local_only)
    from .models import max_input_length

    longest = max_input_length(config, tokenizer)
    if cfg.seq_len > longest:
        raise BertScopeError(f"Chunks of {cfg.seq_len} tokens are longer than {model_name} takes ({longest}): "
                             f"use at most {longest}.")
    if tokenizer.mask_token_id is None:
        raise BertScopeError(f"{model_name}'s tokenizer has no mask token: it cannot learn masked-LM.")
    cloze_texts = [t.replace("[MASK]", tokenizer.mask_token) for t in cloze_texts]
    for text in cloze_texts:
        if len(tokenizer(text)["input_ids"]) > longest:
            raise BertScopeError(f"{text[:40]!r}… is longer than {model_name} takes ({longest} tokens).")
    if cfg.pair_task != "none":
        check_pair_task(model_name, config.model_type, cfg.pair_task)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    # pairs are drawn once per run (as BERT's create_pretraining_data); masks every step when dynamic
    train_chunks = build_chunks(tokenizer, train_documents, cfg, seed=cfg.seed)  # rows [chunk, seq_len]
    held_chunks = build_chunks(tokenizer, held_out_documents, cfg, seed=cfg.seed + 1_000_003)
    if cfg.max_chunks is not None:
        keep = torch.randperm(len(train_chunks), generator=torch.Generator().manual_seed(cfg.seed))[:cfg.max_chunks]
        train_chunks = train_chunks.take(keep.sort().values)
    model = build_model(source, local_only, cfg).to(torch_device)
    params = trainable(model)
    decay = [p for n, p in params.items() if p.ndim >= 2]
    no_decay = [p for n, p in params.items() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    steps_per_epoch = math.ceil(len(train_chunks) / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    state = _load_checkpoint(out / "checkpoint", model, optimizer, cfg) or RunState()
    replacements = ordinary_ids(tokenizer, model.config.vocab_size)
    static_generator = torch.Generator().manual_seed(cfg.seed + 7)
    static = None
    if cfg.masking == "static":  # one corruption per chunk, drawn once (BERT's)
        static = mask_tokens(train_chunks.ids, special_mask(tokenizer, train_chunks.ids), replacements,
                             tokenizer.mask_token_id, cfg, static_generator)
    context, scaler = _autocast(torch_device)
    budget = memory_bytes if memory_bytes is not None else training_budget(torch_device)
    row_bytes = BACKWARD_FACTOR * saved_bytes_per_row(model, tokenizer, train_chunks, cfg, torch_device, context,
                                                          replacements)
    micro = max(1, min(cfg.batch_size, budget // max(1, row_bytes)))  # rows a pass, within the budget
    # without a graph, a pass holds about one layer's activations at a time: scoring batches in the budget too
    eval_rows = max(1, min(128, budget // max(1, row_bytes // model.config.num_hidden_layers)))
    if state.history and [c["text"] for c in state.history[0]["before"]["cloze"]] != cloze_texts:
        raise BertScopeError(f"{out} was started with other sentences to compare before and after: give the same "
                             "ones to resume, or choose another output folder.")
    before = state.history[0]["before"] if state.history else {
        "held_out": evaluate(model, tokenizer, held_chunks, cfg, torch_device, eval_rows),
        "cloze": cloze(model, tokenizer, cloze_texts, torch_device)}
    model.train()
    n_trainable = sum(p.numel() for p in params.values())
    for epoch in range(state.epoch, cfg.epochs):
        generator = torch.Generator().manual_seed(cfg.seed * 1_000 + epoch)  # order and masks of this epoch
        order = torch.randperm(len(train_chunks), generator=generator)
        started, losses, pair_losses, tokens = time.perf_counter(), [], [], 0
        for s in range(steps_per_epoch):
            if stop is not None and stop():
                return state
            idx = order[s * cfg.batch_size:(s + 1) * cfg.batch_size]
            batch = train_chunks.take(idx)  # [batch, seq_len]
            if static is not None:
                inputs, labels = static[0][idx], static[1][idx]
            else:
                inputs, labels = mask_tokens(batch.ids, special_mask(tokenizer, batch.ids), replacements,
                                             tokenizer.mask_token_id, cfg, generator)
            for group in optimizer.param_groups:
                group["lr"] = _lr_at(state.step, total, cfg)
            optimizer.zero_grad(set_to_none=True)
            mlm_loss, pair_loss = _accumulate_gradients(model, batch, inputs, labels, tokenizer.pad_token_id,
                                                        torch_device, context, scaler, micro)
            if pair_loss is not None:
                pair_losses.append(pair_loss)
            if scaler is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            else:
                torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
                optimizer.step()
            state.step += 1
            losses.append(mlm_loss)
            tokens += int((batch.ids != tokenizer.pad_token_id).sum())
            if progress is not None:
                progress(state.step, total, {"epoch": epoch + 1, "loss": losses[-1],
                                             **({"pair_loss": pair_losses[-1]} if pair_losses else {})})
        seconds = time.perf_counter() - started
        held = evaluate(model, tokenizer, held_chunks, cfg, torch_device, eval_rows)
        state.epoch = epoch + 1
        state.history.append({"epoch": epoch + 1, "train_loss": float(np.mean(losses)), "held_out": held,
                              **({"train_pair_loss": float(np.mean(pair_losses))} if pair_losses else {}),
                              "seconds": seconds, "tokens_per_s": tokens / seconds,
                              **({"before": before} if epoch == 0 else {})})
        _save_checkpoint(out / "checkpoint", model, optimizer, state, cfg)
    _export(model, tokenizer, out, cfg, model_name)
    _write_metrics(out, model_name, cfg, state, len(train_chunks), len(held_chunks), n_trainable,
                   cloze(model, tokenizer, cloze_texts, torch_device), torch_device,
                   {"rows_per_pass": micro, "activation_bytes_per_row": row_bytes, "budget_bytes": budget})
    return state


def _export(model: Any, tokenizer: Any, out: Path, cfg: RecipeConfig, model_name: str) -> None:
    """``model/`` (standard folder, LoRA merged) and, for LoRA, ``adapter/`` (the delta)."""
    from safetensors.torch import save_file

    if cfg.lora_rank:
        model.peft_config["default"].base_model_name_or_path = model_name  # the name, not a local path
        tmp = Path(tempfile.mkdtemp(dir=out, prefix="adapter.tmp-"))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Could not find a config file")  # a preset name, not a hub id
            model.save_pretrained(tmp)  # adapter_config.json + adapter_model.safetensors (LoRA only)
        extras = {_inner_name(n): p.detach().cpu().contiguous() for n, p in model.named_parameters() if _is_extra(n)}
        save_file(extras, str(tmp / "extras.safetensors"))
        replace_folder(tmp, out / "adapter")
        merged = model.merge_and_unload()
    else:
        merged = model
    tmp = Path(tempfile.mkdtemp(dir=out, prefix="model.tmp-"))
    merged.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    replace_folder(tmp, out / "model")


def _write_metrics(out: Path, model_name: str, cfg: RecipeConfig, state: RunState, n_train: int, n_held: int,
                   n_trainable: int, after: list[dict], device: torch.device, memory: dict) -> None:
    metrics = {
        "model": model_name, "config": asdict(cfg), "train_chunks": n_train, "held_out_chunks": n_held,
        "trainable_parameters": n_trainable, "memory": memory,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "before": state.history[0]["before"] if state.history else None,
        "epochs": [{k: v for k, v in h.items() if k != "before"} for h in state.history],
        "after": {"held_out": state.history[-1]["held_out"] if state.history else None, "cloze": after},
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1))
    plot_curves(metrics, out / "curves.png")


def plot_curves(metrics: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [e["epoch"] for e in metrics["epochs"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    task = metrics["config"].get("pair_task", "none")
    paired = task != "none" and all("pair_accuracy" in e["held_out"] for e in metrics["epochs"])
    mlm = "masked-LM " if paired else ""
    left.plot(epochs, [e["train_loss"] for e in metrics["epochs"]], "o-", label=f"{mlm}train")
    left.plot(epochs, [e["held_out"]["loss"] for e in metrics["epochs"]], "s-", label=f"{mlm}held out")
    right.plot(epochs, [e["held_out"]["top1"] for e in metrics["epochs"]], "o-", label="top-1 (masked positions)")
    right.plot(epochs, [e["held_out"]["top5"] for e in metrics["epochs"]], "s-", label="top-5 (masked positions)")
    if paired:
        left.plot(epochs, [e["held_out"]["pair_loss"] for e in metrics["epochs"]], "^--",
                  label=f"{task.upper()} held out")
        right.plot(epochs, [e["held_out"]["pair_accuracy"] for e in metrics["epochs"]], "^--",
                   label=f"{task.upper()} accuracy (pairs; chance 0.5)")
    left.set(xlabel="epoch", ylabel="loss (nats)", title="Loss")
    right.set(xlabel="epoch", ylabel="held-out accuracy", title="Held-out accuracy", ylim=(0, 1))
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def apply_delta(base_source: str, delta: Path, folder: Path) -> Path:
    """Merge a LoRA run's ``adapter/`` onto its base encoder and save a standard masked-LM
    folder at ``folder`` (atomically). The base is read from ``base_source`` (a folder)."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

    from .models import quiet_transformers

    extras = load_file(str(delta / "extras.safetensors"))
    paired = any(name.startswith(PAIR_HEAD_PREFIXES) for name in extras)  # trained with NSP or SOP
    auto = AutoModelForPreTraining if paired else AutoModelForMaskedLM
    with quiet_transformers():
        model = auto.from_pretrained(base_source, local_files_only=True, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(base_source, local_files_only=True)
    named = dict(model.named_parameters())
    unknown = sorted(set(extras) - set(named))
    if unknown:
        raise BertScopeError(f"The delta in {delta} does not fit {base_source} (e.g. {unknown[0]}).")
    with torch.no_grad():
        for name, value in extras.items():
            named[name].copy_(value)
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks transformers a deprecated question
        merged = PeftModel.from_pretrained(model, str(delta)).merge_and_unload()
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=folder.name + ".tmp-"))
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    replace_folder(tmp, folder)
    return folder
