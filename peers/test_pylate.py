"""ColBERT's MaxSim map against PyLate 1.6.0 (in ``.venv-pylate``), on tiny random ColBERT checkpoints PyLate
itself builds and saves.

PyLate pins sentence-transformers 5.3 and transformers <= 5.3 (the app pins 5.23), so BertScope is not imported
here: each checkpoint is saved by PyLate, encoded by PyLate (``ColBERT.encode`` with ``is_query`` True and False),
and handed to ``bertscope maxsim … --json`` in the app's environment (``BERTSCOPE_PYTHON``, which ``make
test-peers`` sets). The query and passage token vectors' similarities, and the score (PyLate's
``scores.colbert_scores``), must agree to 1e-5: the prefixes, the [MASK] query expansion (attended to or not), the
skiplist and the projection all read as PyLate reads them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

pylate = pytest.importorskip("pylate")

WORDS = ["the", "dog", "ate", "bread", "bank", "river", "money", "who", "wrote", "homer", "iliad", "a", "of", "in",
         "was", "muddy", "deposited", "she", "he", "poem", ".", ",", "?", "!"]
QUERY = "who wrote the iliad ?"
PASSAGES = ["homer wrote the iliad , a poem .", "the dog ate the bread in the bank of the river !",
            "she deposited the money in the bank , the dog ate the bread , homer wrote the iliad , a poem ."]  # cut


def _tiny_bert(folder: Path) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").parent.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=48, max_position_embeddings=64))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _bertscope(folder: Path, passage: str) -> dict:
    python = os.environ.get("BERTSCOPE_PYTHON")
    if not python:
        pytest.fail("BERTSCOPE_PYTHON is not set: make test-peers points it at the app's environment")
    done = subprocess.run([python, "-m", "bertscope", "maxsim", str(folder), "--query", QUERY, "--passage", passage,
                           "--device", "cpu", "--json"], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("attend", [False, True], ids=["masks-unattended", "masks-attended"])
def test_maxsim_map_equals_pylate(tmp_path, attend):
    from pylate import models, scores

    base = _tiny_bert(tmp_path / "base")
    torch.manual_seed(1)
    model = models.ColBERT(model_name_or_path=str(base), device="cpu", embedding_size=16, query_length=12,
                           document_length=20, attend_to_expansion_tokens=attend)
    folder = tmp_path / "colbert"
    model.save(str(folder))
    model = models.ColBERT(model_name_or_path=str(folder), device="cpu")
    q = model.encode([QUERY], is_query=True)[0]  # [query token, 16]
    for passage in PASSAGES:
        d = model.encode([passage], is_query=False)[0]  # [kept passage token, 16]
        ours = _bertscope(folder, passage)
        assert ours["kind"] == "ColBERT"
        assert len(ours["query_tokens"]) == 12 and ours["expansion"].count(True) == 12 - 3 - len(QUERY.split())  # [CLS] [Q] … [SEP]
        assert "," not in ours["passage_tokens"] and "!" not in ours["passage_tokens"]  # the skiplist
        np.testing.assert_allclose(np.array(ours["similarities"]), q @ d.T, atol=1e-5)
        expected = float(scores.colbert_scores(torch.tensor(q[None]), torch.tensor(d[None]))[0, 0])
        assert ours["score"] == pytest.approx(expected, abs=1e-4)
        assert sum(ours["contributions"]) == pytest.approx(ours["score"], abs=1e-6)
