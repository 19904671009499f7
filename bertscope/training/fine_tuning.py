"""BERT's second stage, run: fine-tune an encoder under a task head (Devlin et al. 2019, §4: a
layer over [CLS] for classification and sentence pairs, over every token for tagging, a start and
an end vector for answer spans (``training.span_objective``); the whole model trained end to end,
or LoRA adapters with the head in full).

    >>> from bertscope.training.fine_tuning import finetune
    >>> from bertscope.training.task_data import load_task_data
    >>> data = load_task_data("classify", "sentiment")
    >>> state = finetune("bundled", data, "runs/sentiment", FinetuneConfig(lora_rank=16, lr=5e-4))  # doctest: +SKIP

The same loop as pretraining (``training.loop``: seeded epochs, AdamW with warm-up and decay,
clipping, micro-batches within the byte budget, a checkpoint after every epoch that a rerun
resumes from, N processes through Accelerate), with ``training.task_objective`` in place of
the masked LM. A process's rows of a batch go longest first, so rows of like length share a
micro-batch and pad little; ``group_by_length`` batches inputs of like length (transformers' order).
The run folder: ``model/`` (a standard transformers checkpoint with the head and
``id2label``: ``AutoModelForSequenceClassification.from_pretrained`` opens it, so does BertScope
with its task head), ``adapter/`` for LoRA runs (the delta: adapter, the weights trained in full,
``task.json``; ``sources.delta.apply_delta`` merges it onto the base), ``metrics.json`` (the
settings, every epoch's held-out figures, the test side's where the data has one, the worst
held-out examples) and ``curves.png``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertscope.core.task_head import SPANS
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_text
from bertscope.runtime.hf import load_hf_config, load_hf_tokenizer, max_input_length
from bertscope.sources.resolve import resolve_source
from bertscope.training.checkpoint import RunState, load_checkpoint
from bertscope.training.config import FinetuneConfig
from bertscope.training.export import export_run, two_panels
from bertscope.training.loop import adamw, run_epochs
from bertscope.training.model import trainable
from bertscope.training.processes import Processes
from bertscope.training.span_objective import SpanObjective, doc_stride, encode_spans, scoring_settings
from bertscope.training.steps import BACKWARD_FACTOR, autocast_context, saved_bytes, training_budget
from bertscope.training.task_data import SPAN, TAG, TaskData
from bertscope.training.task_model import auto_class, build_task_model
from bertscope.training.task_objective import Encoded, TaskObjective, encode, pad, scores

WORST = 20  # held-out examples kept in metrics.json, the model's least likely gold first


def task_tokenizer(model_name: str, source: str, local_only: bool, task: str) -> Any:
    """The model's tokenizer; byte-level BPE (RoBERTa's) told that words come pre-split for tagging."""
    tokenizer = load_hf_tokenizer(model_name, source, local_only)
    if task == TAG and getattr(tokenizer, "add_prefix_space", None) is False:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local_only, add_prefix_space=True)
    return tokenizer


def _sample(side, n: int | None, seed: int):
    if n is None or n >= len(side):
        return side
    rows = sorted(np.random.default_rng(seed).choice(len(side), n, replace=False).tolist())
    return side.take(rows, side.name)


def class_weights(encoded: Encoded, labels: list[str], tagging: bool) -> torch.Tensor:
    """n / (classes x count) per label (sklearn's "balanced"), 0 for a label the side lacks."""
    flat = [v for row in encoded.labels for v in row if v >= 0] if tagging else list(encoded.labels)
    counts = np.bincount(flat, minlength=len(labels)).astype(np.float64)
    present = counts > 0
    weights = np.zeros(len(labels))
    weights[present] = len(flat) / (present.sum() * counts[present])
    return torch.tensor(weights, dtype=torch.float32)


def finetune(model_name: str, data: TaskData, out: str | Path, cfg: FinetuneConfig = FinetuneConfig(),
             device: str = "auto", progress: Callable[[int, int, dict], None] | None = None,
             stop: Callable[[], bool] | None = None, memory_bytes: int | None = None) -> RunState:
    """Run (or resume) the second stage on ``data``; writes the run folder (module docstring).
    ``progress(step, total, info)`` after each step; ``stop()`` between steps ends the run at
    its last finished epoch (kept in the checkpoint).

    Args:
        model_name: the encoder fine-tuned.
        data: the task's sides (``load_task_data``).
        out: the run folder.
        cfg: the settings (``FinetuneConfig``).
        device: as ``load_model``.
        progress: called with (step, total steps, info).
        stop: asked between steps; True ends the run at its last finished epoch.
        memory_bytes: the bound on a step's activations.

    Returns:
        The ``RunState``: the steps done, the losses and held-out scores, the folder.
    """
    cfg.check()
    if data.task != cfg.task:
        raise BertScopeError(f"The data is for {data.task}, the run for {cfg.task}.")
    data.check()
    workers = Processes.join(device)
    torch_device = workers.device
    source, local_only, config, tokenizer = _tokenizer_for(model_name, cfg)
    labels = data.labels
    train_side = _sample(data.train, cfg.max_examples, cfg.seed)
    held_side = _sample(data.held_out, cfg.max_held_out, cfg.seed)
    if cfg.task == SPAN:
        train, held = (encode_spans(tokenizer, side, cfg.seq_len) for side in (train_side, held_side))
    else:
        train, held = (encode(tokenizer, cfg.task, side, labels, cfg.seq_len) for side in (train_side, held_side))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    run = {"model": model_name, "data": data.source, "labels": labels}
    run_file = out / "run.json"
    if run_file.is_file() and json.loads(run_file.read_text()) != run:
        raise BertScopeError(f"{out} holds a run of another model, data or label set: choose another output folder.")
    if workers.main:
        write_text(run_file, json.dumps(run))
    model = build_task_model(source, local_only, cfg.task, labels, cfg.lora_rank, cfg.lora_alpha, cfg.seed)
    model = model.to(torch_device)
    params = trainable(model)
    optimizer = adamw(params, cfg.lr, cfg.weight_decay)
    state = load_checkpoint(out / "checkpoint", model, optimizer, cfg) or RunState()
    runner = workers.wrap(model)
    context, scaler = autocast_context(torch_device)
    objective = _objective(cfg, data, train, held, tokenizer.pad_token_id, torch_device)
    budget = memory_bytes if memory_bytes is not None else workers.memory_share(training_budget(torch_device))
    widest = max(range(len(train)), key=lambda r: len(train.ids[r]))

    def one_row():  # the widest training row: every row of a batch costs at most this
        feed, _ = pad(train, [widest], tokenizer.pad_token_id, cfg.task == TAG).part(slice(None), torch_device)
        with context:
            return model(**feed)[0]  # the logits (start logits for spans)

    row_bytes = BACKWARD_FACTOR * saved_bytes(model, torch_device, one_row)
    micro = max(1, min(cfg.batch_size, budget // max(1, row_bytes)))
    eval_rows = max(1, min(256, budget // max(1, row_bytes // config.num_hidden_layers)))
    before = state.history[0]["before"] if state.history else {
        "held_out": objective.evaluate(model, eval_rows, workers)}
    n_trainable = sum(p.numel() for p in params.values())
    finished = run_epochs(model, runner, params, optimizer, objective, cfg, out, state, workers, micro, eval_rows,
                          before, context, scaler, progress, stop)
    if not finished:
        return state
    if workers.main:
        test = _test_scores(objective, model, tokenizer, data, cfg, eval_rows)
        worst = objective.worst(model, eval_rows, WORST) if isinstance(objective, SpanObjective) else \
            worst_examples(objective, model, held_side, eval_rows, labels)
        export_run(model, tokenizer, out, cfg, model_name,
                   adapter_files={"task.json": _task_file(model, cfg, labels, objective)})
        write_task_metrics(out, model_name, data, cfg, state, train, held, n_trainable, test, worst, torch_device,
                           {"rows_per_pass": micro, "activation_bytes_per_row": row_bytes, "budget_bytes": budget,
                            "processes": workers.world})
    workers.barrier()
    workers.end()
    return state


def _tokenizer_for(model_name: str, cfg: FinetuneConfig) -> tuple[str, bool, Any, Any]:
    """(the source, local only, its config, the task's tokenizer), or one line: a decoder, remote code, an unknown
    id, rows longer than the model takes."""
    source, local_only = resolve_source(model_name)
    config = load_hf_config(model_name, source, local_only)  # refuses decoders, remote code, unknown ids
    tokenizer = task_tokenizer(model_name, source, local_only, cfg.task)
    longest = max_input_length(config, tokenizer)
    if cfg.seq_len > longest:
        raise BertScopeError(f"--seq-len {cfg.seq_len} is longer than {model_name} takes ({longest}): use at most "
                             f"{longest}.")
    return source, local_only, config, tokenizer


def _objective(cfg: FinetuneConfig, data: TaskData, train, held, pad_id: int, device) -> TaskObjective:
    """The task's loss and scoring: spans (where "no answer" competes when the data has unanswerable questions,
    decided once), or classes and tags (class-weighted when asked)."""
    if cfg.task == SPAN:
        return SpanObjective(cfg.task, data.labels, train, held, pad_id, device,
                             no_answer=data.train.unanswerable + data.held_out.unanswerable > 0,
                             by_length=cfg.group_by_length)
    return TaskObjective(cfg.task, data.labels, train, held, pad_id, device,
                         class_weights(train, data.labels, cfg.task == TAG) if cfg.class_weights else None,
                         by_length=cfg.group_by_length)


def _test_scores(objective: TaskObjective, model, tokenizer, data: TaskData, cfg: FinetuneConfig,
                 eval_rows: int) -> dict | None:
    """The test side's loss and scores, when the data has one."""
    if data.test is None:
        return None
    encoded = encode(tokenizer, cfg.task, data.test, data.labels, cfg.seq_len)
    loss_sum, count, confusion, _ = objective.predictions(model, encoded, eval_rows)
    return {"name": data.test.name, "loss": loss_sum / max(1, count), **scores(confusion, data.labels),
            ("words" if cfg.task == TAG else "examples"): count, "unscored_words": encoded.unscored_words,
            "truncated": encoded.truncated}


def _task_file(model, cfg: FinetuneConfig, labels: list[str], objective: TaskObjective | SpanObjective) -> str:
    """task.json: the auto class and labels; for spans the scoring settings, set on the model's config too (the
    page answers as the run was scored)."""
    task: dict[str, Any] = {"auto": auto_class(cfg.task), "id2label": dict(enumerate(labels)), "task": cfg.task}
    if isinstance(objective, SpanObjective):
        params = {SPANS: scoring_settings(cfg.seq_len, objective.no_answer)}
        (model.get_base_model() if hasattr(model, "get_base_model") else model).config.task_specific_params = params
        task["task_specific_params"] = params
    return json.dumps(task, indent=1)


def worst_examples(objective: TaskObjective, model, side, rows: int, labels: list[str]) -> list[dict]:
    """The held-out examples whose gold label the model finds least likely (misclassified first)."""
    per_row = objective.last_rows  # the last epoch's scoring, when one process ran it
    if per_row is None:
        per_row = objective.predictions(model, objective.held, rows)[3]
    ranked = sorted(per_row.items(), key=lambda item: item[1][2])[:WORST]
    out = []
    for r, (gold, predicted, logp) in ranked:
        if objective.tagging:
            out.append({"words": side.words[r], "gold": [labels[g] for g in gold],
                        "predicted": [labels[p] for p in predicted], "log_p_gold": logp,
                        "errors": sum(g != p for g, p in zip(gold, predicted))})
        else:
            out.append({"text": side.texts[r], **({"pair": side.pairs[r]} if side.pairs else {}),
                        "gold": labels[gold], "predicted": labels[predicted], "log_p_gold": logp})
    return out


def write_task_metrics(out: Path, model_name: str, data: TaskData, cfg: FinetuneConfig, state: RunState,
                       train: Encoded, held: Encoded, n_trainable: int, test: dict | None, worst: list[dict],
                       device: torch.device, memory: dict) -> None:
    counts = {"train_examples": len(train), "held_out_examples": len(held)}
    if cfg.task == SPAN:  # examples are questions; a question may take several windows (rows)
        counts = {"train_examples": len(train.questions), "held_out_examples": len(held.questions),
                  "windows": {"train": len(train), "held_out": len(held)},
                  "questions_over_several_windows": {"train": train.several, "held_out": held.several},
                  "questions_too_long_for_a_window": {"train": train.too_long, "held_out": held.too_long},
                  "doc_stride": doc_stride(cfg.seq_len)}
    metrics = {
        "model": model_name, "task": cfg.task, "data": data.source, "split": data.how_split, "labels": data.labels,
        "config": asdict(cfg), **counts,
        "truncated": {"train": train.truncated, "held_out": held.truncated},
        "unscored_words": {"train": train.unscored_words, "held_out": held.unscored_words},
        "trainable_parameters": n_trainable, "memory": memory,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "before": state.history[0]["before"] if state.history else None,
        "epochs": [{k: v for k, v in h.items() if k != "before"} for h in state.history],
        "after": {"held_out": state.history[-1]["held_out"] if state.history else None, "test": test},
        "worst_held_out": worst,
    }
    write_text(out / "metrics.json", json.dumps(metrics, indent=1))
    plot_task_curves(metrics, out / "curves.png")


def plot_task_curves(metrics: dict, path: Path) -> None:
    epochs = [e["epoch"] for e in metrics["epochs"]]
    held = [e["held_out"] for e in metrics["epochs"]]
    if metrics["task"] == SPAN:
        two_panels(path, epochs, {"train": ([e["train_loss"] for e in metrics["epochs"]], "o-"),
                                  "held out": ([h["loss"] for h in held], "s-")},
                   {"exact match": ([h["exact_match"] for h in held], "o-"), "F1": ([h["f1"] for h in held], "s-")},
                   "Held-out exact match and F1 (SQuAD's)", "held out")
        return
    unit = "words" if metrics["task"] == "tag" else "examples"
    two_panels(path, epochs, {"train": ([e["train_loss"] for e in metrics["epochs"]], "o-"),
                              "held out": ([h["loss"] for h in held], "s-")},
               {f"accuracy ({unit})": ([h["accuracy"] for h in held], "o-"),
                "macro-F1": ([h["macro_f1"] for h in held], "s-")}, "Held-out accuracy and macro-F1", "held out")
