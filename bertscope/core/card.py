"""The facts shown about a loaded model: the home page's card and ``bertscope info``."""

from __future__ import annotations

from typing import Any

from bertscope.core.models import LoadedModel

OUTPUT_NAMES = {"mlm": "masked-LM", "nsp": "next-sentence", "sop": "sentence-order"}


def model_card(lm: LoadedModel) -> dict[str, Any]:
    """Plain JSON-ready facts about ``lm``."""
    return {
        "model": lm.name,
        "source": lm.source,
        "origin": lm.origin,
        "revision": lm.revision,
        "model_type": lm.model_type,
        "architecture": lm.architecture,
        "layers": lm.num_layers,
        "heads": lm.num_heads,
        "hidden_size": lm.hidden_size,
        "vocab_size": lm.vocab_size,
        "max_length": lm.max_length,
        "outputs_present": sorted(lm.outputs),
        "heads_present": sorted(lm.outputs),  # the old key of outputs_present, for scripts that read it
        "task": None if lm.task is None else {"kind": lm.task.kind, "labels": list(lm.task.labels),
                                               "problem_type": lm.task.problem_type,
                                               "description": lm.task.describe()},
        "parameters": lm.parameter_count(),
        "encoder_parameters": lm.parameter_count(encoder_only=True),
        "device": str(lm.device),
        "dtype": str(lm.dtype).removeprefix("torch."),
        "notes": list(lm.notes),
    }


def outputs_text(outputs: list[str] | frozenset[str]) -> str:
    """'masked-LM, next-sentence' or 'none (encoder only)'."""
    names = [OUTPUT_NAMES.get(h, h) for h in sorted(outputs)]
    return ", ".join(names) if names else "none (encoder only)"
