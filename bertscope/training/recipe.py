"""BERT's masked-LM recipe, run: continued pretraining of a BERT-family encoder.

    >>> from bertscope.training import RecipeConfig, train
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
  documents are disjoint (the caller splits, e.g. ``corpora.brown.split_documents``);
- ``pair_task`` "nsp" / "sop": instead of plain chunks, sentence pairs [CLS] A [SEP] B [SEP]
  built once per run as google-research/bert's ``create_pretraining_data.py`` (``training.instances``):
  for NSP (Devlin et al. 2019, §3.1) half the B segments come from another document; for SOP
  (Lan et al. 2020, §4.1) half the pairs are swapped. The pair head's cross-entropy is added to
  the masked-LM loss, as in both papers. Each family trains its own head (BERT: NSP; ALBERT:
  SOP), which the loader then reads like any checkpoint's;
- model: the encoder with a masked-LM head (``AutoModelForMaskedLM``; ``AutoModelForPreTraining``
  for a pair task): the checkpoint's own heads where it has them, else new ones (the MLM output
  layer tied to the input embeddings). The head's vocabulary projection runs only at the chosen
  positions (``logits_only_at``): 15% of its rows, where it costs as much as MiniLM's encoder;
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
``sources.delta.apply_delta`` merges onto the base), ``metrics.json`` and ``curves.png``.

The pieces around this loop: ``training.config`` (settings), ``training.instances`` (chunks and
pairs), ``training.batches`` (the corruption, by ``heads.masking``'s rule), ``training.model``
(heads, LoRA), ``training.steps`` (forward, backward, scoring), ``training.checkpoint``,
``training.export``; ``training.job`` runs it in the background for the app. Data-parallel on N
processes (``accelerate launch -m bertscope pretrain …`` or ``pretrain --processes N``):
``training.processes`` (how the batch, the held-out scoring and the writing are shared) and
``training.launch`` (starting the launch from the command line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.mlm.masking import replacement_ids
from bertscope.runtime.hf import load_hf_config, load_hf_tokenizer, max_input_length
from bertscope.sources.resolve import resolve_source
from bertscope.training.batches import mask_tokens, special_mask
from bertscope.training.checkpoint import RunState, load_checkpoint
from bertscope.training.config import CLOZE, RecipeConfig, check_cloze, check_pair_task
from bertscope.training.export import export_run, write_metrics
from bertscope.training.instances import Chunks, build_chunks
from bertscope.training.loop import adamw, run_epochs
from bertscope.training.model import build_model, trainable
from bertscope.training.processes import Processes
from bertscope.training.steps import (
    BACKWARD_FACTOR,
    accumulate_gradients,
    autocast_context,
    cloze,
    evaluate,
    saved_bytes_per_row,
    training_budget,
)


@dataclass
class MaskedLM:
    """The first stage's objective (``loop.Objective``): BERT's corruption of each batch (drawn
    from the epoch's generator, or once for static masking), the masked-LM loss and the pair head's."""

    tokenizer: Any
    cfg: RecipeConfig
    chunks: Chunks
    held: Chunks
    replacements: torch.Tensor
    device: torch.device
    static: tuple[torch.Tensor, torch.Tensor] | None = None  # (inputs, labels) of every chunk, drawn once

    def __len__(self) -> int:
        return len(self.chunks)

    def order(self, generator: torch.Generator, batch_size: int) -> torch.Tensor:
        return torch.randperm(len(self.chunks), generator=generator)  # chunks are all of one length

    def batch(self, idx: torch.Tensor, generator: torch.Generator):
        batch = self.chunks.take(idx)  # [batch, seq_len]
        if self.static is not None:
            return batch, self.static[0][idx], self.static[1][idx]
        inputs, labels = mask_tokens(batch.ids, special_mask(self.tokenizer, batch.ids), self.replacements,
                                     self.tokenizer.mask_token_id, self.cfg, generator)
        return batch, inputs, labels

    def tokens(self, batch) -> int:
        return int((batch[0].ids != self.tokenizer.pad_token_id).sum())

    def accumulate(self, runner, batch, micro, group, context, scaler) -> dict[str, torch.Tensor]:
        mlm, pair = accumulate_gradients(runner, *batch, self.tokenizer.pad_token_id, self.device, context, scaler,
                                         micro, group)
        return {"loss": mlm, **({"pair_loss": pair} if pair is not None else {})}

    def evaluate(self, model, rows: int, group) -> dict:
        return evaluate(model, self.tokenizer, self.held, self.cfg, self.device, rows, group)


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
    would take more runs as micro-batches whose gradients add up to the whole batch's.

    Args:
        model_name: the model trained (a preset, a folder, a bundled model).
        train_documents: documents, each a list of sentences.
        held_out_documents: documents scored, never trained on.
        out: the run folder.
        cfg: the recipe's settings (``RecipeConfig``).
        device: as ``load_model``.
        progress: called with (step, total steps, info).
        stop: asked between steps; True ends the run at its last finished epoch.
        cloze_texts: texts with a [MASK], predicted before and after.
        memory_bytes: the bound on a step's activations.

    Returns:
        The ``RunState``: the steps done, the losses, the folder.
    """
    cfg.check()
    source, local_only, tokenizer, cloze_texts = _checked_inputs(model_name, cfg, cloze_texts)
    workers = Processes.join(device)  # one process, or this one's place under `accelerate launch`
    torch_device = workers.device
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    train_chunks, held_chunks = _chunks(tokenizer, train_documents, held_out_documents, cfg)
    model = build_model(source, local_only, cfg).to(torch_device)
    params = trainable(model)
    optimizer = adamw(params, cfg.lr, cfg.weight_decay)
    state = load_checkpoint(out / "checkpoint", model, optimizer, cfg) or RunState()
    runner = workers.wrap(model)  # DDP across processes (the weights broadcast from the main one)
    replacements = torch.from_numpy(replacement_ids(tokenizer, model.config.vocab_size))
    static_generator = torch.Generator().manual_seed(cfg.seed + 7)
    static = None
    if cfg.masking == "static":  # one corruption per chunk, drawn once (BERT's)
        static = mask_tokens(train_chunks.ids, special_mask(tokenizer, train_chunks.ids), replacements,
                             tokenizer.mask_token_id, cfg, static_generator)
    context, scaler = autocast_context(torch_device)
    budget = memory_bytes if memory_bytes is not None else workers.memory_share(training_budget(torch_device))
    row_bytes = BACKWARD_FACTOR * saved_bytes_per_row(model, tokenizer, train_chunks, cfg, torch_device, context,
                                                          replacements)
    micro = max(1, min(cfg.batch_size, budget // max(1, row_bytes)))  # rows a pass, within the budget
    # without a graph, a pass holds about one layer's activations at a time: scoring batches in the budget too
    eval_rows = max(1, min(128, budget // max(1, row_bytes // model.config.num_hidden_layers)))
    if state.history and [c["text"] for c in state.history[0]["before"]["cloze"]] != cloze_texts:
        raise BertScopeError(f"{out} was started with other sentences to compare before and after: give the same "
                             "ones to resume, or choose another output folder.")
    before = state.history[0]["before"] if state.history else {
        "held_out": evaluate(model, tokenizer, held_chunks, cfg, torch_device, eval_rows, workers),
        "cloze": cloze(model, tokenizer, cloze_texts, torch_device)}
    n_trainable = sum(p.numel() for p in params.values())
    objective = MaskedLM(tokenizer, cfg, train_chunks, held_chunks, replacements, torch_device, static)
    finished = run_epochs(model, runner, params, optimizer, objective, cfg, out, state, workers, micro, eval_rows,
                          before, context, scaler, progress, stop)
    if not finished:
        return state
    after = cloze(model, tokenizer, cloze_texts, torch_device)
    if workers.main:
        export_run(model, tokenizer, out, cfg, model_name)
        write_metrics(out, model_name, cfg, state, len(train_chunks), len(held_chunks), n_trainable, after,
                      torch_device, {"rows_per_pass": micro, "activation_bytes_per_row": row_bytes,
                                     "budget_bytes": budget, "processes": workers.world})
    workers.barrier()
    workers.end()
    return state


def _checked_inputs(model_name: str, cfg: RecipeConfig, cloze_texts: Sequence[str]
                    ) -> tuple[str, bool, Any, list[str]]:
    """(the source, local only, the tokenizer, the cloze texts with its mask token), or one line on what cannot
    be trained: a decoder, remote code, chunks longer than the model takes, no mask token, a pair task it lacks."""
    cloze_texts = check_cloze(cloze_texts)
    source, local_only = resolve_source(model_name)
    config = load_hf_config(model_name, source, local_only)  # refuses decoders, remote code, unknown ids
    tokenizer = load_hf_tokenizer(model_name, source, local_only)
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
    return source, local_only, tokenizer, cloze_texts


def _chunks(tokenizer: Any, train_documents: Sequence[Sequence[str]], held_out_documents: Sequence[Sequence[str]],
            cfg: RecipeConfig) -> tuple[Any, Any]:
    """The training and held-out chunks ([chunk, seq_len] rows), each cut to its budget (seeded). Pairs are drawn
    once per run (as BERT's create_pretraining_data); masks every step when dynamic."""
    train_chunks = build_chunks(tokenizer, train_documents, cfg, seed=cfg.seed)
    held_chunks = build_chunks(tokenizer, held_out_documents, cfg, seed=cfg.seed + 1_000_003)
    held_budget = cfg.held_out_budget(len(train_chunks), len(held_chunks))  # before the training side is cut
    if cfg.max_chunks is not None:
        keep = torch.randperm(len(train_chunks), generator=torch.Generator().manual_seed(cfg.seed))[:cfg.max_chunks]
        train_chunks = train_chunks.take(keep.sort().values)
    if held_budget is not None and held_budget < len(held_chunks):  # scoring in proportion to the training budget
        keep = torch.randperm(len(held_chunks), generator=torch.Generator().manual_seed(cfg.seed + 1))[:held_budget]
        held_chunks = held_chunks.take(keep.sort().values)
    return train_chunks, held_chunks
