"""Apply a LoRA run's delta (``adapter/``: the adapter plus the weights trained in full) onto its base
encoder, and save the result as a standard transformers folder.

This is how ``bundled-mlm`` is built on first use from the shipped 3.4 MB delta, and how any
LoRA run of ``bertscope pretrain`` can be shared without its base weights. It reads with
``local_files_only`` and tells peft the base is local, so nothing is asked of the network.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.hf import quiet_transformers

PAIR_HEAD_PREFIXES = ("cls.seq_relationship.", "sop_classifier.")  # BERT's NSP, ALBERT's SOP classifier
TASK_CLASSES = ("AutoModelForSequenceClassification", "AutoModelForTokenClassification", "AutoModelForQuestionAnswering")


def apply_delta(base_source: str, delta: Path, folder: Path) -> Path:
    """Merge a LoRA run's ``adapter/`` onto its base encoder and save a standard masked-LM
    folder at ``folder`` (atomically), or, for a fine-tuning run's delta (its ``task.json``), the
    task model with its labels. The base is read from ``base_source`` (a folder)."""
    import transformers
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

    extras = load_file(str(delta / "extras.safetensors"))
    task_file = delta / "task.json"  # a fine-tuning run's delta: its head's class and labels
    options: dict[str, Any] = {}
    if task_file.is_file():
        task = json.loads(task_file.read_text(encoding="utf-8"))
        if task.get("auto") not in TASK_CLASSES:
            raise BertScopeError(f"{task_file} names {task.get('auto')!r}, not a task class BertScope builds.")
        auto = getattr(transformers, task["auto"])
        labels = {int(k): v for k, v in task["id2label"].items()}
        options = {"num_labels": len(labels), "id2label": labels, "label2id": {v: k for k, v in labels.items()}}
    else:
        paired = any(name.startswith(PAIR_HEAD_PREFIXES) for name in extras)  # trained with NSP or SOP
        auto = AutoModelForPreTraining if paired else AutoModelForMaskedLM
    with quiet_transformers():
        model = auto.from_pretrained(base_source, local_files_only=True, dtype=torch.float32, **options)
        tokenizer = AutoTokenizer.from_pretrained(base_source, local_files_only=True)
    if task_file.is_file() and "task_specific_params" in task:  # how the run windowed and decoded (spans)
        model.config.task_specific_params = task["task_specific_params"]
    named = dict(model.named_parameters())
    unknown = sorted(set(extras) - set(named))
    if unknown:
        raise BertScopeError(f"The delta in {delta} does not fit {base_source} (e.g. {unknown[0]}).")
    with torch.no_grad():
        for name, value in extras.items():
            named[name].copy_(value)
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft asks transformers a deprecated question
        merged = PeftModel.from_pretrained(model, str(delta), local_files_only=True).merge_and_unload()
        with writing_folder(folder) as tmp:
            merged.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    return folder
