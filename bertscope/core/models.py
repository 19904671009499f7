"""Load a BERT-family encoder by hub id, local directory or the name ``bundled``.

    >>> from bertscope import load_model
    >>> lm = load_model("bundled")            # genuine all-MiniLM-L6-v2, no network needed
    >>> lm.outputs, lm.num_layers, lm.num_heads
    (frozenset(), 6, 12)

What is loaded:
- the pretraining output layers ("heads" in Hugging Face's words) when the checkpoint carries them: ``BertForPreTraining`` (MLM + NSP)
  for BERT-like types, else the masked-LM class, else the bare encoder; a fine-tuned checkpoint's
  task head (sequence classification, token classification, question answering: ``task``) when
  it was saved with one. A head counts as present only if every one of its weights came from
  the checkpoint, so a randomly initialised head is never shown as real;
- eager attention (``attn_implementation="eager"``) for passes that return attention weights,
  and the fastest kernel the class supports (SDPA) for passes that need only hidden states or
  logits, switched per pass without reloading (``runtime.kernels``);
- eval mode, on the chosen device and dtype. The object is shared read-only between sessions:
  pass ``output_attentions`` per call, never mutate ``model.config``.

``trust_remote_code`` is never enabled.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from bertscope.core import hooked_pass
from bertscope.core.hook_points import hook_names
from bertscope.core.task_head import TaskHead, task_head, task_kind
from bertscope.errors import BertScopeError
from bertscope.runtime.devices import resolve_device, resolve_dtype
from bertscope.runtime.families import pair_head
from bertscope.runtime.hf import (
    explain_load_error,
    load_hf_config,
    load_hf_tokenizer,
    max_input_length,
    quiet_transformers,
)
from bertscope.runtime.kernels import EAGER, AttentionKernels, fastest_kernel, planless_attention
from bertscope.sources.bundled import BUNDLED_MODELS
from bertscope.sources.resolve import resolve_source

# Weights a checkpoint may lack without harm: the pooler is never used for inspection.
_OPTIONAL_BASE_WEIGHTS = re.compile(r"(^|\.)pooler\.")
PRETRAINING_HEADS = frozenset({"mlm", "nsp", "sop"})


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A loaded encoder with its tokenizer, and what it can do."""

    name: str  # what was asked for: "bundled", a hub id or a directory
    source: str  # the hub id or directory the files came from
    model: Any  # transformers PreTrainedModel in eval mode; shared, treat as read-only
    tokenizer: Any  # fast tokenizer (word ids need it)
    outputs: frozenset[str]  # pretraining output layers whose weights came from the checkpoint: subset of
    # {"mlm", "nsp", "sop"} ("heads" is kept for attention heads; ``task`` is a fine-tuned output layer)
    device: torch.device
    dtype: torch.dtype
    max_length: int  # most tokens per input, special tokens included
    revision: str | None = None  # hub commit hash when known
    origin: str | None = None  # where the weights were published, e.g. for "bundled"
    notes: tuple[str, ...] = field(default_factory=tuple)
    fast_attention: str = EAGER  # kernel for passes without attention weights ("sdpa" when supported)
    task: TaskHead | None = None  # a fine-tuned checkpoint's task head (its kind and labels)
    kernels: AttentionKernels = field(default_factory=AttentionKernels, repr=False)
    # forward passes on one shared model at once; more would only contend for the same cores
    # (or GPU memory) and, on a hosted demo, let one session starve the others
    guard: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(
            max(1, int(os.environ.get("BERTSCOPE_CONCURRENT_FORWARDS", "1") or 1))
        ),
        repr=False,
    )

    @property
    def config(self) -> Any:
        return self.model.config

    def attention_kernel(self, need_weights: bool) -> contextlib.AbstractContextManager[None]:
        """Context for one forward pass: eager if it returns attention weights, else the fastest."""
        return self.kernels.use(self.model, EAGER if need_weights else self.fast_attention)

    def run(self, inputs: Any, **kwargs: Any) -> Any:
        """One pass through the owner (``core.hooked_pass.run``): ``lm.run(text, hooks={name: fn})``."""
        return hooked_pass.run(self, inputs, **kwargs)

    def run_with_cache(self, inputs: Any, names: Any, **kwargs: Any) -> tuple[Any, hooked_pass.ActivationCache]:
        """(output, {name: tensor}) for the named hook points (``core.hooked_pass.run_with_cache``)."""
        return hooked_pass.run_with_cache(self, inputs, names, **kwargs)

    def hooks(self, hooks: Any) -> contextlib.AbstractContextManager[None]:
        """``with lm.hooks({name: fn}):`` every pass of this thread inside runs the hooks."""
        return hooked_pass.hooks_on(self, hooks)

    @property
    def hook_names(self) -> list[str]:
        """Every named hook point of this model (``core.hook_points``)."""
        return hook_names(self.model)

    @property
    def model_type(self) -> str:
        return cast(str, self.config.model_type)

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.config.num_attention_heads)

    @property
    def hidden_size(self) -> int:
        return int(self.config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def architecture(self) -> str:
        return type(self.model).__name__

    @property
    def mask_token(self) -> str | None:
        return cast("str | None", self.tokenizer.mask_token)

    def parameter_count(self, encoder_only: bool = False) -> int:
        """Distinct parameters as loaded (tied weights once); ``encoder_only`` skips the heads."""
        module = self.model.base_model if encoder_only else self.model
        return sum(p.numel() for p in module.parameters())


def _head_candidates(config: Any) -> list[tuple[Any, frozenset[str]]]:
    from transformers import (
        AutoModel,
        AutoModelForMaskedLM,
        AutoModelForPreTraining,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    model_type = config.model_type
    saved_as = getattr(config, "architectures", None) or []
    if saved_as and all(a.endswith("Model") for a in saved_as):
        return [(AutoModel, frozenset())]  # saved from a bare encoder: it has no heads to find
    kind = task_kind(config)
    if kind is not None:  # a fine-tuned checkpoint: its task head, else the encoder alone
        task_class = {"sequence-classification": AutoModelForSequenceClassification,
                      "token-classification": AutoModelForTokenClassification,
                      "question-answering": AutoModelForQuestionAnswering}[kind]
        return [(task_class, frozenset({kind})), (AutoModel, frozenset())]
    candidates: list[tuple[Any, frozenset[str]]] = []
    pair = pair_head(model_type)
    if pair is not None:
        candidates.append((AutoModelForPreTraining, frozenset({"mlm", pair})))
    candidates.append((AutoModelForMaskedLM, frozenset({"mlm"})))
    candidates.append((AutoModel, frozenset()))
    return candidates


def _load_weights(
    name: str, source: str, local_only: bool, config: Any, dtype: torch.dtype
) -> tuple[Any, frozenset[str]]:
    """The richest class whose head weights all come from the checkpoint."""
    from safetensors import SafetensorError

    candidates = _head_candidates(config)
    last = len(candidates) - 1
    for i, (auto_class, heads) in enumerate(candidates):
        try:
            with quiet_transformers():
                model, info = auto_class.from_pretrained(
                    source,
                    config=config,
                    local_files_only=local_only,
                    trust_remote_code=False,
                    attn_implementation="eager",
                    dtype=dtype,
                    output_loading_info=True,
                    use_safetensors=True,  # weights as safetensors only: a pickled checkpoint is never opened
                )
        except SafetensorError as err:  # a truncated or damaged weights file
            raise BertScopeError(f"{name}: its weights file cannot be read ({str(err).splitlines()[0]}); it may be "
                                 "cut short: download or save it again.") from None
        except ValueError as err:
            if "Unrecognized configuration class" in str(err) and i < last:
                continue  # this family has no such head class
            raise explain_load_error(name, local_only, err) from err
        except OSError as err:
            raise explain_load_error(name, local_only, err) from err
        prefix = model.base_model_prefix + "."
        missing = list(info.get("missing_keys", []))
        task = bool(heads - PRETRAINING_HEADS)
        # a task head reads the pooler too (BERT's classifier): then every weight must be there
        if heads and any(task or not k.startswith(prefix) for k in missing):
            del model
            continue  # the checkpoint has no such head: try a plainer class
        body_missing = [
            k for k in missing if not _OPTIONAL_BASE_WEIGHTS.search(k.removeprefix(prefix))
        ]
        if body_missing or info.get("mismatched_keys"):
            raise BertScopeError(
                f"{name}: the checkpoint does not match its {config.model_type} config "
                f"(e.g. missing {body_missing[:1] or info['mismatched_keys'][:1]})."
            )
        return model, heads
    raise BertScopeError(f"{name}: no encoder class could load this checkpoint.")


def load_model(name: str, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """Load ``name`` (preset, hub id, local folder or "bundled") ready for inspection.

    Args:
        name: a preset ("bert-base-uncased", …), a hub id, a local folder, or a bundled model ("bundled",
            "bundled-mlm", "bundled-multilingual", "bundled-sentiment", "bundled-upos", "bundled-reranker").
        device: "auto" (cuda, then mps, then cpu), "cpu", "cuda" or "mps".
        dtype: "auto" (float32), "float16" or "bfloat16" (on a GPU).

    Returns:
        A ``LoadedModel``: the model, its tokenizer, its family's record and what it outputs; one shared per process
        and name.
    """
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    source, local_only = resolve_source(name)
    config = load_hf_config(name, source, local_only)
    tokenizer = load_hf_tokenizer(name, source, local_only)
    model, found = _load_weights(name, source, local_only, config, torch_dtype)
    outputs = found & PRETRAINING_HEADS
    task = next((task_head(model.config, kind) for kind in found - PRETRAINING_HEADS), None)
    if torch_device.type == "cuda":
        planless_attention()
    model.to(torch_device).eval()
    model.requires_grad_(False)
    bundled = BUNDLED_MODELS.get(name.strip())
    notes = [bundled.note] if bundled is not None and bundled.note else []
    if task is not None and task.generic_labels:
        notes.append(f"The checkpoint does not name its labels: they are shown as it has them "
                     f"({', '.join(task.labels[:4])}{', …' if len(task.labels) > 4 else ''}).")
    if task is None and task_kind(config) is not None:
        notes.append(f"The checkpoint was saved as {', '.join(config.architectures)}, but its task head's weights are "
                     "not all in it: loaded as the encoder alone.")
    if "mlm" not in outputs:
        notes.append("This checkpoint has no masked-LM head: fill-mask views are unavailable.")
    return LoadedModel(
        name=name.strip(),
        source=source,
        model=model,
        tokenizer=tokenizer,
        outputs=outputs,
        device=torch_device,
        dtype=torch_dtype,
        max_length=max_input_length(config, tokenizer),
        revision=getattr(config, "_commit_hash", None),
        origin=bundled.origin if bundled is not None else None,
        notes=tuple(notes),
        fast_attention=fastest_kernel(model),
        task=task,
    )
