"""A checkpoint's own sentence-embedding settings, as sentence-transformers declares them in its folder, read and
never guessed (sentence-transformers' ``SentenceTransformer`` reads the same files):

- ``modules.json``: the modules in order: the Transformer, then ``Pooling``, optional ``Dense`` layers, ``Normalize``;
- ``sentence_bert_config.json``: the Transformer's ``max_seq_length`` (all-MiniLM-L6-v2 cuts at 256, not 512) and
  ``do_lower_case``;
- ``<Pooling path>/config.json``: the pooling mode (``pooling_mode_mean_tokens``, ``_cls_token``, ``_max_tokens``,
  ``_mean_sqrt_len_tokens``, ``_weightedmean_tokens``, ``_lasttoken``) and ``include_prompt``;
- ``<Dense path>/config.json`` + ``model.safetensors``: ``in_features``, ``out_features``, ``bias``,
  ``activation_function``;
- ``config_sentence_transformers.json``: ``prompts`` (E5's ``"query: "`` / ``"passage: "``), ``default_prompt_name``
  and ``similarity_fn_name`` (cosine by default).

A checkpoint without ``modules.json`` gets a stated default (mean pooling, no normalisation, cosine), and
``EmbeddingSettings.note`` says so."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bertscope.errors import BertScopeError

POOLINGS = ("mean", "cls", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
SIMILARITIES = ("cosine", "dot")
ACTIVATIONS = {"torch.nn.modules.activation.Tanh": "tanh", "torch.nn.modules.linear.Identity": "identity",
               "torch.nn.modules.activation.ReLU": "relu", "torch.nn.modules.activation.GELU": "gelu"}


@dataclass(frozen=True)
class DenseLayer:
    """A ``Dense`` module after the pooling: ``activation(x @ weight.T + bias)``."""

    folder: Path
    in_features: int
    out_features: int
    bias: bool
    activation: str  # tanh | identity | relu | gelu


@dataclass(frozen=True)
class EmbeddingSettings:
    """How the checkpoint turns its last hidden states into one sentence vector, and how it compares two."""

    pooling: str = "mean"
    normalize: bool = False
    max_seq_length: int | None = None  # None: the model's own maximum
    do_lower_case: bool = False
    include_prompt: bool = True  # whether the prompt's tokens are pooled with the text's
    dense: tuple[DenseLayer, ...] = ()
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    similarity: str = "cosine"
    declared: bool = False  # read from the checkpoint's folder; False: the stated default

    @property
    def note(self) -> str:
        """One line saying where the settings come from."""
        if self.declared:
            steps = [f"{self.pooling} pooling", *(f"a dense layer to {d.out_features}" for d in self.dense)]
            if self.normalize:
                steps.append("normalised")
            prompts = "; prompts " + ", ".join(f"{k}: {v!r}" for k, v in self.prompts.items() if v) \
                if any(self.prompts.values()) else ""
            cut = f", cut at {self.max_seq_length} tokens" if self.max_seq_length else ""
            return f"The model's own embedding (sentence-transformers' settings in its folder): {', '.join(steps)}" \
                   f"{cut}; {self.similarity} similarity{prompts}."
        return ("No sentence-transformers settings in this checkpoint's folder: mean pooling over every token, "
                "cosine similarity (the stated default; the model was not necessarily trained for it).")

    def prompt(self, name: str | None) -> str:
        """The text put before an input of kind ``name`` ("query", "passage"; None: the default prompt, if any)."""
        if name is None:
            return self.prompts.get(self.default_prompt_name or "", "")
        if name not in self.prompts:
            if not self.prompts:
                return ""
            raise BertScopeError(f"This model has no {name!r} prompt; its prompts: {', '.join(self.prompts)}.")
        return self.prompts[name]


def read_json(path: Path) -> dict:
    """A JSON object from a checkpoint's file; one line for what cannot be read as one."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise BertScopeError(f"{path} cannot be read as sentence-transformers settings ({err}).") from None
    if not isinstance(found, dict):
        raise BertScopeError(f"{path} is not a JSON object.")
    return found


def _pooling(config: dict) -> str:
    modes = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
             "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_weightedmean_tokens": "weightedmean",
             "pooling_mode_lasttoken": "lasttoken"}
    if isinstance(config.get("pooling_mode"), str):  # newer sentence-transformers write the mode by name
        chosen = [config["pooling_mode"].replace("mean_sqrt_len_tokens", "mean_sqrt_len")]
    else:
        chosen = [mode for key, mode in modes.items() if config.get(key)]
    if len(chosen) != 1 or chosen[0] not in POOLINGS:
        raise BertScopeError(f"Pooling {chosen or 'none'}: BertScope computes one pooling mode of {', '.join(POOLINGS)}.")
    return chosen[0]


def _not_single_vector(root: Path, modules: list, st: dict) -> None:
    """One line where the checkpoint is a sparse encoder or a ColBERT model: neither has one vector a text."""
    kinds = {str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)}
    if kinds & {"SpladePooling", "MLMTransformer"}:
        raise BertScopeError(f"{root.name} is a sparse encoder (SPLADE): it scores texts by shared vocabulary terms, "
                             "not one vector a text; explain it with `bertscope sparse` (the Similarity page's Terms "
                             "& matches tab).")
    if str(st.get("similarity_fn_name", "")).lower() == "maxsim" or "query_prefix" in st:
        raise BertScopeError(f"{root.name} is a ColBERT model (late interaction): it scores a vector a token, not one "
                             "a text; explain it with `bertscope maxsim` (the Similarity page's Terms & matches tab).")


def read_settings(folder: str | Path | None) -> EmbeddingSettings:
    """The settings of the checkpoint in ``folder``.

    Args:
        folder: a model's local folder; None or a folder without ``modules.json`` gives the stated default.

    Returns:
        ``EmbeddingSettings``; a one-line error for modules BertScope does not compute, pickled weights, or a sparse
        or ColBERT checkpoint.
    """
    root = Path(folder) if folder is not None else None
    if root is None or not (root / "modules.json").is_file():
        return EmbeddingSettings()
    modules = json.loads((root / "modules.json").read_text(encoding="utf-8")) if root else []
    if not isinstance(modules, list):
        raise BertScopeError(f"{root / 'modules.json'} is not a list of modules.")
    st_file = root / "config_sentence_transformers.json"
    st = read_json(st_file) if st_file.is_file() else {}  # read once: both checks and the settings below use it
    _not_single_vector(root, modules, st)
    pooling, normalize, dense, include_prompt = "mean", False, [], True
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        path = root / str(module.get("path", ""))
        if kind == "Transformer":
            continue
        if kind == "Pooling":
            config = read_json(path / "config.json")
            pooling, include_prompt = _pooling(config), bool(config.get("include_prompt", True))
        elif kind == "Dense":
            config = read_json(path / "config.json")
            if not (path / "model.safetensors").is_file():
                raise BertScopeError(f"{path} holds no model.safetensors: BertScope never opens pickled weights.")
            activation = ACTIVATIONS.get(str(config.get("activation_function", "")))
            if activation is None:
                raise BertScopeError(f"{path}: activation {config.get('activation_function')!r} is not one BertScope "
                                     f"computes ({', '.join(ACTIVATIONS)}).")
            dense.append(DenseLayer(path, int(config["in_features"]), int(config["out_features"]),
                                    bool(config.get("bias", True)), activation))
        elif kind == "Normalize":
            normalize = True
        else:
            raise BertScopeError(f"{root}: the module {module.get('type')!r} is not one BertScope computes (Transformer, "
                                 "Pooling, Dense, Normalize).")
    bert = read_json(root / "sentence_bert_config.json") if (root / "sentence_bert_config.json").is_file() else {}
    similarity = str(st.get("similarity_fn_name") or "cosine")
    if similarity == "dot_product":
        similarity = "dot"
    if similarity not in SIMILARITIES:
        raise BertScopeError(f"Similarity {similarity!r}: BertScope explains cosine and dot-product scores.")
    prompts = {str(k): str(v) for k, v in (st.get("prompts") or {}).items()}
    return EmbeddingSettings(pooling, normalize, int(bert["max_seq_length"]) if bert.get("max_seq_length") else None,
                             bool(bert.get("do_lower_case", False)), include_prompt, tuple(dense), prompts,
                             st.get("default_prompt_name"), similarity, declared=True)
