"""Load a BERT-family encoder by hub id, local directory or the name ``bundled``.

    >>> from bertscope import load_model
    >>> lm = load_model("bundled")            # genuine all-MiniLM-L6-v2, no network needed
    >>> lm.heads, lm.num_layers, lm.num_heads
    (frozenset(), 6, 12)

What is loaded:
- the pretraining heads when the checkpoint carries them: ``BertForPreTraining`` (MLM + NSP)
  for BERT-like types, else the masked-LM class, else the bare encoder. A head counts as
  present only if every one of its weights came from the checkpoint, so a randomly
  initialised head is never shown as real;
- eager attention (``attn_implementation="eager"``) for passes that return attention weights,
  and the fastest kernel the class supports (SDPA) for passes that need only hidden states or
  logits, switched per pass without reloading (``kernels.py``);
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
from pathlib import Path
from typing import Any, Iterator

import torch

from .bundled import BUNDLED_ORIGIN, bundled_model_dir
from .bundled_mlm import CARD_NOTE as MLM_NOTE
from .bundled_mlm import MLM, bundled_mlm_dir
from .bundled_mlm import ORIGIN as MLM_ORIGIN
from .bundled_multilingual import MULTILINGUAL, ROUND_TRIP_NOTE, bundled_multilingual_dir
from .bundled_multilingual import ORIGIN as MULTILINGUAL_ORIGIN
from .devices import resolve_device, resolve_dtype
from .errors import BertScopeError
from .hub import hub_reachable
from .kernels import EAGER, AttentionKernels, fastest_kernel
from .presets import BUNDLED

# Encoder families whose Hugging Face classes return real attention weights in eager mode.
ENCODER_TYPES = frozenset(
    {
        "albert", "bert", "big_bird", "camembert", "convbert", "data2vec-text", "deberta",
        "deberta-v2", "distilbert", "electra", "ernie", "ibert", "megatron-bert", "mobilebert",
        "modernbert", "mpnet", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
        "roformer", "squeezebert", "xlm-roberta", "xlm-roberta-xl", "xmod",
    }
)
# Types whose pretraining class has the next-sentence-prediction head.
NSP_TYPES = frozenset({"bert", "megatron-bert", "mobilebert", "ernie"})
# Types whose pretraining class has ALBERT's sentence-order-prediction head.
SOP_TYPES = frozenset({"albert"})
# RoBERTa-style position ids start at padding_idx + 1, so two positions are never usable.
POSITION_OFFSET_TYPES = frozenset(
    {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "xmod",
     "roberta-prelayernorm"}
)
# Weights a checkpoint may lack without harm: the pooler is never used for inspection.
_OPTIONAL_BASE_WEIGHTS = re.compile(r"(^|\.)pooler\.")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True, eq=False)
class LoadedModel:
    """A loaded encoder with its tokenizer, and what it can do."""

    name: str  # what was asked for: "bundled", a hub id or a directory
    source: str  # the hub id or directory the files came from
    model: Any  # transformers PreTrainedModel in eval mode; shared, treat as read-only
    tokenizer: Any  # fast tokenizer (word ids need it)
    heads: frozenset[str]  # subset of {"mlm", "nsp", "sop"} whose weights came from the checkpoint
    device: torch.device
    dtype: torch.dtype
    max_length: int  # most tokens per input, special tokens included
    revision: str | None = None  # hub commit hash when known
    origin: str | None = None  # where the weights were published, e.g. for "bundled"
    notes: tuple[str, ...] = field(default_factory=tuple)
    fast_attention: str = EAGER  # kernel for passes without attention weights ("sdpa" when supported)
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

    def attention_kernel(self, need_weights: bool):
        """Context for one forward pass: eager if it returns attention weights, else the fastest."""
        return self.kernels.use(self.model, EAGER if need_weights else self.fast_attention)

    @property
    def model_type(self) -> str:
        return self.config.model_type

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
        return self.tokenizer.mask_token

    def parameter_count(self, encoder_only: bool = False) -> int:
        """Distinct parameters as loaded (tied weights once); ``encoder_only`` skips the heads."""
        module = self.model.base_model if encoder_only else self.model
        return sum(p.numel() for p in module.parameters())


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' load reports and progress bars for the duration of a load."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def resolve_source(name: str) -> tuple[str, bool]:
    """(hub id or directory, local_files_only) for what the user typed."""
    name = (name or "").strip()
    if not name:
        raise BertScopeError("No model given: pick a preset, type a hub id or a local folder.")
    if name == BUNDLED:
        return str(bundled_model_dir()), True
    if name == MULTILINGUAL:
        return str(bundled_multilingual_dir()), True
    if name == MLM:
        return str(bundled_mlm_dir()), True
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BertScopeError(f"{name} has no config.json: point to a saved model folder.")
        return str(path.resolve()), True
    if name.startswith(("/", ".", "~")) or os.sep in name.strip("/").replace("/", "", 1):
        raise BertScopeError(f"No model folder at {name}: check the path.")
    if not _HUB_ID.match(name):
        raise BertScopeError(f"{name!r} is neither a hub id (org/name) nor a local folder.")
    return name, not hub_reachable()


def _explain_load_error(name: str, local_only: bool, err: Exception) -> BertScopeError:
    text = str(err)
    if "trust_remote_code" in text:
        return BertScopeError(
            f"{name} needs its own code (trust_remote_code), which BertScope never runs: "
            "choose a standard encoder."
        )
    if local_only and not Path(name).is_dir():
        return BertScopeError(
            f"{name} is not in the local Hugging Face cache and the hub is unreachable: "
            f"download it where there is network (`hf download {name}`) or choose 'bundled'."
        )
    first_line = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return BertScopeError(f"Could not load {name}: {first_line}")


def _load_config(name: str, source: str, local_only: bool) -> Any:
    from transformers import AutoConfig

    try:
        with quiet_transformers():
            config = AutoConfig.from_pretrained(
                source, local_files_only=local_only, trust_remote_code=False
            )
    except (OSError, ValueError, KeyError) as err:
        raise _explain_load_error(name, local_only, err) from err
    if getattr(config, "auto_map", None):
        raise BertScopeError(
            f"{name} needs its own code (trust_remote_code), which BertScope never runs: "
            "choose a standard encoder."
        )
    if config.model_type not in ENCODER_TYPES:
        kind = "an encoder-decoder" if getattr(config, "is_encoder_decoder", False) else "not"
        raise BertScopeError(
            f"{name} is a {config.model_type} model, {kind} a BERT-family encoder: "
            "choose e.g. bert-base-uncased, roberta-base or bundled."
        )
    return config


def _head_candidates(config: Any) -> list[tuple[Any, frozenset[str]]]:
    from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForPreTraining

    model_type = config.model_type
    saved_as = getattr(config, "architectures", None) or []
    if saved_as and all(a.endswith("Model") for a in saved_as):
        return [(AutoModel, frozenset())]  # saved from a bare encoder: it has no heads to find
    candidates = []
    if model_type in NSP_TYPES:
        candidates.append((AutoModelForPreTraining, frozenset({"mlm", "nsp"})))
    if model_type in SOP_TYPES:
        candidates.append((AutoModelForPreTraining, frozenset({"mlm", "sop"})))
    candidates.append((AutoModelForMaskedLM, frozenset({"mlm"})))
    candidates.append((AutoModel, frozenset()))
    return candidates


def _load_weights(
    name: str, source: str, local_only: bool, config: Any, dtype: torch.dtype
) -> tuple[Any, frozenset[str]]:
    """The richest class whose head weights all come from the checkpoint."""
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
                )
        except ValueError as err:
            if "Unrecognized configuration class" in str(err) and i < last:
                continue  # this family has no such head class
            raise _explain_load_error(name, local_only, err) from err
        except OSError as err:
            raise _explain_load_error(name, local_only, err) from err
        prefix = model.base_model_prefix + "."
        missing = list(info.get("missing_keys", []))
        if heads and any(not k.startswith(prefix) for k in missing):
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


def _load_tokenizer(name: str, source: str, local_only: bool) -> Any:
    from transformers import AutoTokenizer

    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(
                source, local_files_only=local_only, trust_remote_code=False
            )
    except (OSError, ValueError, KeyError) as err:
        raise _explain_load_error(name, local_only, err) from err
    if not getattr(tokenizer, "is_fast", False):
        raise BertScopeError(
            f"{name} has no fast tokenizer, so words cannot be mapped to pieces: "
            "save a tokenizer.json with the model."
        )
    return tokenizer


def max_input_length(config: Any, tokenizer: Any) -> int:
    """Most tokens the model takes in one input, special tokens included."""
    limits = []
    positions = getattr(config, "max_position_embeddings", None)
    if positions:
        limits.append(positions - (2 if config.model_type in POSITION_OFFSET_TYPES else 0))
    declared = getattr(tokenizer, "model_max_length", None)
    if declared and declared < 1_000_000:  # unset lengths are reported as 1e30
        limits.append(int(declared))
    return min(limits) if limits else 512


def load_model(name: str, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """Load ``name`` (preset, hub id, local folder or "bundled") ready for inspection."""
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    source, local_only = resolve_source(name)
    config = _load_config(name, source, local_only)
    tokenizer = _load_tokenizer(name, source, local_only)
    model, heads = _load_weights(name, source, local_only, config, torch_dtype)
    model.to(torch_device).eval()
    model.requires_grad_(False)
    notes = {MULTILINGUAL: [ROUND_TRIP_NOTE], MLM: [MLM_NOTE]}.get(name.strip(), [])
    if "mlm" not in heads:
        notes.append("This checkpoint has no masked-LM head: fill-mask views are unavailable.")
    return LoadedModel(
        name=name.strip(),
        source=source,
        model=model,
        tokenizer=tokenizer,
        heads=heads,
        device=torch_device,
        dtype=torch_dtype,
        max_length=max_input_length(config, tokenizer),
        revision=getattr(config, "_commit_hash", None),
        origin={BUNDLED: BUNDLED_ORIGIN, MULTILINGUAL: MULTILINGUAL_ORIGIN, MLM: MLM_ORIGIN}.get(name.strip()),
        notes=tuple(notes),
        fast_attention=fastest_kernel(model),
    )
