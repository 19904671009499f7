"""One training step and one scoring pass: the forward with the head at the chosen positions only,
gradients accumulated in micro-batches within a byte budget, held-out figures, cloze predictions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from bertscope.core.passes import mlm_logits
from bertscope.errors import BertScopeError
from bertscope.mlm.masking import IGNORE_INDEX, replacement_ids
from bertscope.runtime.devices import to_device
from bertscope.runtime.kernels import planless_attention
from bertscope.runtime.result_cache import return_freed_memory
from bertscope.training.batches import mask_tokens, special_mask
from bertscope.training.config import RecipeConfig
from bertscope.training.instances import Chunks
from bertscope.training.model import logits_only_at, vocabulary_layer
from bertscope.training.processes import Processes, unwrap

ONE = Processes()  # a run on one process


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The half precision a training pass on ``device`` runs in: bf16 on a GPU that has it, else fp16;
    None on the CPU (float32 throughout)."""
    if device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast_context(device: torch.device):
    """(the context of one training pass, a loss scaler or None) for ``device``: half precision on a
    GPU (``autocast_dtype``), without cuDNN's attention (``runtime.kernels.planless_attention``)."""
    dtype = autocast_dtype(device)
    if dtype is None:
        return torch.autocast("cpu", enabled=False), None
    planless_attention()
    if dtype == torch.bfloat16:
        return torch.autocast("cuda", dtype=dtype), None
    return torch.autocast("cuda", dtype=dtype), torch.amp.GradScaler("cuda")


def forward_chosen(model: Any, batch: Chunks, inputs: torch.Tensor, labels: torch.Tensor, pad_id: int,
             device: torch.device, context: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One pass of the recipe: (logits [chosen, vocab] float32, gold ids [chosen], pair logits
    [batch, 2] float32 or None)."""
    labels = to_device(labels, device)  # pinned and queued: no host wait behind the last step
    chosen = labels != IGNORE_INDEX  # [batch, token]
    feed = {"input_ids": to_device(inputs, device), "attention_mask": to_device((batch.ids != pad_id).long(), device)}
    if batch.token_types is not None:
        feed["token_type_ids"] = to_device(batch.token_types, device)
    with context, logits_only_at(unwrap(model), chosen) as gathered:
        out = model(**feed)  # through DDP's wrapper when several processes train
    logits = mlm_logits(out)
    if not gathered:
        logits = logits[chosen]
    pair = getattr(out, "seq_relationship_logits", None)
    if pair is None:
        pair = getattr(out, "sop_logits", None)
    return logits.float(), labels[chosen], None if batch.pair_labels is None or pair is None else pair.float()


BACKWARD_FACTOR = 2  # measured: a training row costs about twice what autograd saves for it (BERT-base,


def training_budget(device: torch.device) -> int:
    """Bytes a training step's activations may take: ``BERTSCOPE_TRAIN_MB`` when set, else half
    of a GPU's memory, or a quarter of the machine's memory on the CPU."""
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


def saved_bytes(model: Any, device: torch.device, forward: Callable[[], Any]) -> int:
    """What autograd keeps for backward during ``forward()`` (a one-row pass in training mode,
    dropout's masks included), the weights themselves not counted. The random state is left as
    it was (dropout draws from it)."""
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

    was_training = model.training
    model.train()  # dropout's masks are saved too
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), \
            torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        out = forward()
        del out  # the graph goes with it
    model.train(was_training)
    if device.type == "cpu":
        return_freed_memory()  # the probe's activations back to the OS, not kept beside the first step's
    return total


def saved_bytes_per_row(model: Any, tokenizer: Any, chunks: Chunks, cfg: RecipeConfig, device: torch.device,
                        context: Any, replacements: torch.Tensor) -> int:
    """What autograd keeps for backward for one row of ``chunks`` (every row is ``seq_len`` wide,
    so any row costs the same): measured on a one-row forward of the recipe."""
    row = chunks.take(slice(0, 1))
    inputs, labels = mask_tokens(row.ids, special_mask(tokenizer, row.ids), replacements, tokenizer.mask_token_id,
                                 cfg, torch.Generator().manual_seed(0))
    return saved_bytes(model, device, lambda: forward_chosen(model, row, inputs, labels, tokenizer.pad_token_id,
                                                             device, context))


def accumulate_gradients(model: Any, batch: Chunks, inputs: torch.Tensor, labels: torch.Tensor, pad_id: int,
                          device: torch.device, context: Any, scaler: Any, micro: int,
                          group: Processes = ONE) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Backward passes over this process's share of ``batch`` (all of it on one process) in
    slices of ``micro`` rows whose gradients add up to the whole batch's: each slice's summed
    losses divided by the whole batch's chosen positions (masked-LM) and rows (pair head), times
    the number of processes, whose gradients DDP averages. Only the last slice all-reduces. A
    process whose share is empty (a last batch smaller than the processes) runs one row with
    weight 0, so every process takes part in the step's all-reduce. Returns the whole batch's
    (masked-LM loss, pair loss or None), summed over processes, as float64 scalars on the device (read
    them only when they are shown: reading waits for the GPU)."""
    chosen = int((labels != IGNORE_INDEX).sum())
    rows = len(batch)
    mine = group.share(rows)
    parts = [slice(s, min(s + micro, mine.stop)) for s in range(mine.start, mine.stop, micro)]
    weight = 1.0 if parts else 0.0
    parts = parts or [slice(0, 1)]
    mlm_total = torch.zeros((), dtype=torch.float64, device=device)
    pair_total, paired = torch.zeros((), dtype=torch.float64, device=device), False
    for k, part in enumerate(parts):
        with group.no_sync(model, last=k == len(parts) - 1):
            picked, gold, pair = forward_chosen(model, batch.take(part), inputs[part], labels[part], pad_id, device,
                                                context)
            mlm = F.cross_entropy(picked, gold, reduction="sum") / chosen
            loss = mlm
            if pair is not None:  # BERT's and ALBERT's objective: the sum of the two losses
                pair_part = F.cross_entropy(pair, to_device(batch.pair_labels[part], device), reduction="sum") / rows
                loss = loss + pair_part
                pair_total += weight * pair_part.detach().double()
                paired = True
            loss = loss * (weight * group.world)
            (scaler.scale(loss) if scaler is not None else loss).backward()
        mlm_total += weight * mlm.detach().double()
    if group.world > 1:
        mlm_total, pair_total = group.sum(torch.stack([mlm_total, pair_total]))
    return mlm_total, pair_total if paired else None


EVAL_LOGIT_BYTES = 1 << 30  # an evaluation batch's [batch, token, vocab] float32 logits at most


@torch.no_grad()
def evaluate(model: Any, tokenizer: Any, chunks: Chunks | torch.Tensor, cfg: RecipeConfig, device: torch.device,
             batch_size: int = 128, group: Processes = ONE) -> dict[str, float]:
    """Held-out loss, top-1 and top-5 over the chosen positions of one fixed corruption, and for
    sentence pairs the pair head's loss and accuracy. Batches hold at most ``batch_size`` chunks
    and ``EVAL_LOGIT_BYTES`` of float32 logits at the chosen positions. Several processes each
    score their share of the chunks (the corruption is drawn for the whole set first) and
    their sums are added."""
    if isinstance(chunks, torch.Tensor):
        chunks = Chunks(chunks)
    rows = chunks.ids.shape[1]  # logits a chunk: at every position, or at its chosen ones with the hook
    if vocabulary_layer(model) is not None:
        rows = max(1, round(rows * cfg.select_rate))
    row_bytes = rows * model.config.vocab_size * 4
    batch_size = max(1, min(batch_size, EVAL_LOGIT_BYTES // row_bytes))
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(cfg.seed + 1_000_003)  # the same corruption every epoch
    replacements = torch.from_numpy(replacement_ids(tokenizer, model.config.vocab_size))
    loss_sum, top1, top5, count = 0.0, 0, 0, 0
    pair_loss, pair_right, pairs = 0.0, 0, 0
    context, _ = autocast_context(device)
    # one corruption of the whole set, drawn before batching: the figure does not depend on batch sizes
    all_inputs, all_labels = mask_tokens(chunks.ids, special_mask(tokenizer, chunks.ids), replacements,
                                         tokenizer.mask_token_id, cfg, generator)
    mine = group.share(len(chunks))
    for start in range(mine.start, mine.stop, batch_size):
        part = slice(start, min(start + batch_size, mine.stop))
        picked, gold, pair = forward_chosen(model, chunks.take(part), all_inputs[part], all_labels[part],
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
    if group.world > 1:
        sums = group.sum(torch.tensor([loss_sum, top1, top5, count, pair_loss, pair_right, pairs], dtype=torch.float64))
        loss_sum, pair_loss = float(sums[0]), float(sums[4])
        top1, top5, count, pair_right, pairs = (int(sums[i]) for i in (1, 2, 3, 5, 6))
    figures = {"loss": loss_sum / max(1, count), "top1": top1 / max(1, count), "top5": top5 / max(1, count),
               "positions": count}
    if pairs:
        figures.update({"pair_loss": pair_loss / pairs, "pair_accuracy": pair_right / pairs, "pairs": pairs})
    return figures


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
        logits = mlm_logits(model(**enc))[0, at].float()
        ids = logits.topk(k).indices.tolist()
        out.append({"text": text, "top": [tokenizer.convert_ids_to_tokens(i) for i in ids]})
    model.train(was_training)
    return out
