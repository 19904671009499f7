"""The model's own sentence embedding, computed as sentence-transformers computes it (``SentenceTransformer.encode``:
equal within 1e-5 on every shipped embedding model, ``tests/retrieval``), through the one owner of a pass.

    >>> from bertscope import load_model
    >>> from bertscope.retrieval import embed, settings_of
    >>> lm = load_model("bundled")                           # all-MiniLM-L6-v2: mean pooling, normalised, 256 tokens
    >>> embed(lm, ["A man is eating food."]).vectors.shape   # [text, dim]
    (1, 384)

Each text is stripped and given its prompt (``kind``: "query", "passage", … as the model declares them), tokenised
with the model's ``max_seq_length`` (``truncated`` says which were cut), run in length-sorted batches bounded by
bytes, pooled over its tokens with the attention mask (the prompt's tokens left out where the pooling says so),
passed through any dense layers and normalised where the model says so.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertscope.core.hooked_pass import run
from bertscope.core.models import LoadedModel
from bertscope.errors import BertScopeError
from bertscope.retrieval.settings import DenseLayer, EmbeddingSettings, read_settings

BATCH_BYTES = 256 * 2**20  # one batch's last hidden states and attention scores, at most


@dataclass(frozen=True)
class Embeddings:
    """One vector per text, as the model embeds it."""

    model: str
    texts: tuple[str, ...]  # as given
    kind: str | None  # the prompt's name ("query", "passage"), or None
    vectors: np.ndarray  # [text, dim] float32
    tokens: np.ndarray  # [text] tokens the model read, special tokens and the prompt included
    truncated: np.ndarray  # [text] bool: cut at the model's max_seq_length
    settings: EmbeddingSettings

    def to_json(self) -> dict:
        return {"model": self.model, "kind": self.kind, "dim": int(self.vectors.shape[1]),
                "texts": list(self.texts), "vectors": self.vectors.round(7).tolist(),
                "tokens": self.tokens.tolist(), "truncated": self.truncated.tolist(), "settings": self.settings.note}


def model_folder(lm: LoadedModel) -> Path | None:
    """The loaded model's files on disk: its folder, or its snapshot in the local Hugging Face cache (None: none)."""
    folder = Path(lm.source)
    if folder.is_dir():
        return folder
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(lm.source, revision=lm.revision, local_files_only=True,
                                      allow_patterns=["*.json", "*/config.json", "*/model.safetensors"]))
    except Exception:  # noqa: BLE001 - no local copy of its folder
        return None


def settings_of(lm: LoadedModel) -> EmbeddingSettings:
    """The loaded model's settings: from its folder, or from its files in the local Hugging Face cache.

    Args:
        lm: the model.

    Returns:
        ``EmbeddingSettings`` (``declared`` False: the stated default); a one-line error for a sparse or ColBERT
        checkpoint, which has no one vector a text.
    """
    return read_settings(model_folder(lm))


def max_tokens(lm: LoadedModel, settings: EmbeddingSettings) -> int:
    """Where the model cuts an input: its declared ``max_seq_length``, within what its positions allow."""
    return min(settings.max_seq_length or lm.max_length, lm.max_length)


@functools.lru_cache(maxsize=8)
def dense_weights(folder: Path, device: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    from safetensors.torch import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    weight = tensors.get("linear.weight")
    if weight is None:
        raise BertScopeError(f"{folder}/model.safetensors holds no linear.weight (sentence-transformers' Dense).")
    bias = tensors.get("linear.bias")
    return weight.float().to(device), None if bias is None else bias.float().to(device)


def pool(hidden: torch.Tensor, mask: torch.Tensor, settings: EmbeddingSettings) -> torch.Tensor:
    """[batch, dim] from ``hidden`` [batch, token, dim] and ``mask`` [batch, token] (1 for the tokens pooled), as
    sentence-transformers' ``Pooling`` computes each mode."""
    hidden, weights = hidden.float(), mask.to(hidden.dtype if hidden.is_floating_point() else torch.float32).float()
    mode = settings.pooling
    if mode == "cls":
        return hidden[:, 0]
    if mode == "max":
        return hidden.masked_fill(weights[..., None] == 0, -1e9).max(dim=1).values
    if mode == "lasttoken":
        last = weights.cumsum(1).argmax(1)  # the last position the mask keeps
        return hidden[torch.arange(len(hidden), device=hidden.device), last]
    if mode == "weightedmean":
        weights = weights * torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=weights.dtype)
    summed = (hidden * weights[..., None]).sum(1)  # [batch, dim]
    counts = weights.sum(1, keepdim=True).clamp(min=1e-9)  # [batch, 1]
    return summed / counts.sqrt() if mode == "mean_sqrt_len" else summed / counts


def apply_dense(x: torch.Tensor, layers: tuple[DenseLayer, ...]) -> torch.Tensor:
    """``x`` [..., in] through sentence-transformers' ``Dense`` layers (``activation(x @ W.T + b)``), in x's dtype:
    a sentence embedding's after its pooling, a ColBERT checkpoint's projection of every token."""
    for layer in layers:
        weight, bias = dense_weights(layer.folder, str(x.device))
        x = torch.nn.functional.linear(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))
        x = {"tanh": torch.tanh, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
             "identity": lambda v: v}[layer.activation](x)
    return x


def finish(pooled: torch.Tensor, settings: EmbeddingSettings) -> torch.Tensor:
    """The modules after the pooling: dense layers, then the normalisation (both differentiable)."""
    out = apply_dense(pooled, settings.dense)
    return torch.nn.functional.normalize(out, p=2, dim=1) if settings.normalize else out


def prepared(lm: LoadedModel, texts: list[str], kind: str | None, settings: EmbeddingSettings) -> list[str]:
    """The texts as the model reads them: stripped, lower-cased where declared, the prompt before each."""
    if not texts:
        raise BertScopeError("Give at least one text to embed.")
    prompt = settings.prompt(kind)
    out = []
    for n, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise BertScopeError(f"Text {n + 1} is empty: give it some words.")
        text = text.strip()
        out.append(prompt + (text.lower() if settings.do_lower_case else text))
    return out


def feed_of(lm: LoadedModel, texts: list[str], settings: EmbeddingSettings) -> dict[str, torch.Tensor]:
    enc = lm.tokenizer(texts, padding=True, truncation="longest_first", max_length=max_tokens(lm, settings),
                       return_tensors="pt")
    return {k: v for k, v in enc.items() if k in lm.tokenizer.model_input_names}


def prompt_tokens(lm: LoadedModel, prompt: str) -> int:
    """Tokens the prompt takes at the start of an input, the leading special token included (what
    sentence-transformers leaves out of the pooling when ``include_prompt`` is false)."""
    if not prompt:
        return 0
    return len(lm.tokenizer(prompt, add_special_tokens=True)["input_ids"]) - 1  # less the closing special token


def embedding_plan(lm: LoadedModel, inputs: list[str], settings: EmbeddingSettings, batch_size: int
                   ) -> tuple[list[list[int]], list[int]]:
    """The batches ``embed`` runs: the prepared ``inputs``' rows, longest first (as sentence-transformers batches),
    each batch at most ``batch_size`` rows and ``BATCH_BYTES`` of hidden states and attention scores; and each
    input's length in tokens before the cut."""
    cut = max_tokens(lm, settings)
    lengths = [len(ids) for ids in lm.tokenizer(inputs, add_special_tokens=True, truncation=False,
                                                verbose=False)["input_ids"]]
    order = np.argsort([-n for n in lengths], kind="stable")
    plan, start = [], 0
    while start < len(order):
        longest = min(lengths[order[start]], cut)
        per_row = longest * (lm.hidden_size * 4 * 3 + lm.model.config.num_attention_heads * longest * 4)
        rows = max(1, min(batch_size, BATCH_BYTES // max(1, per_row)))
        plan.append([int(i) for i in order[start:start + rows]])
        start += rows
    return plan, lengths


@torch.no_grad()
def embed_batch(lm: LoadedModel, inputs: list[str], settings: EmbeddingSettings, kind: str | None) -> np.ndarray:
    """[batch, dim] float32: one planned batch of prepared ``inputs`` through the model, pooled and finished (the
    prompt's tokens left out of the pooling where the settings say so)."""
    skip = 0 if settings.include_prompt else prompt_tokens(lm, settings.prompt(kind))
    feed = {k: v.to(lm.device) for k, v in feed_of(lm, inputs, settings).items()}
    hidden = run(lm, feed, encoder_only=True, grad=False).last_hidden_state  # [batch, token, dim]
    mask = feed["attention_mask"].clone()
    if skip:
        mask[:, :skip] = 0
    return finish(pool(hidden, mask, settings), settings).float().cpu().numpy()


def embed(lm: LoadedModel, texts: list[str], kind: str | None = None, settings: EmbeddingSettings | None = None,
          batch_size: int = 32, progress: Any = None, engine: Any = None) -> Embeddings:
    """Every text's embedding, as the model's settings (``settings_of``) compute it.

    Args:
        lm: an embedding model (or any encoder: the stated default settings).
        texts: the texts (each stripped; empty ones refused).
        kind: the prompt to put before each text ("query", "passage"; None: the model's default prompt, if any).
        settings: ``settings_of(lm)`` when None.
        batch_size: texts a batch at most (fewer where a batch's bytes would pass ``BATCH_BYTES``).
        progress: called with (done, total) texts.
        engine: None (this process) or a ``runtime.engine.Engine`` (``engines.ray_engine.RayEngine``): the same
            batches, planned here, embedded by its actors with these settings; the vectors are the same bytes.

    Returns:
        ``Embeddings``: [text, dim] vectors, the tokens read and which texts were cut.
    """
    settings = settings or settings_of(lm)
    given = list(texts)
    inputs = prepared(lm, given, kind, settings)
    cut = max_tokens(lm, settings)
    plan, lengths = embedding_plan(lm, inputs, settings, batch_size)
    if engine is None:
        done = ((rows, embed_batch(lm, [inputs[i] for i in rows], settings, kind)) for rows in plan)
    else:
        done = engine.embedding_rows(lm, inputs, plan, kind, settings)
    vectors: np.ndarray | None = None
    count = 0
    for rows, out in done:  # rows: [batch] the texts' places; out: [batch, dim]
        if vectors is None:
            vectors = np.zeros((len(given), out.shape[1]), np.float32)
        vectors[np.asarray(rows, np.int64)] = out
        count += len(rows)
        if progress:
            progress(count, len(given))
    assert vectors is not None
    return Embeddings(lm.name, tuple(given), kind, vectors, np.minimum(lengths, cut).astype(np.int64),
                      np.asarray(lengths) > cut, settings)


def scores(settings: EmbeddingSettings, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[a, b] the model's similarity of every pair: cosine or dot product as it declares."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if settings.similarity == "cosine":
        a = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12)
        b = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), 1e-12)
    return a @ b.T
