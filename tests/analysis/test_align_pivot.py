"""Alignment against a pivot: P@1 of each language's items retrieving the pivot's same item, raw and
centred; coverage; the JSON in the shape of pairwise retrieval; the UDHR from the command line."""

import json

import numpy as np

from bertscope.analysis.align_pivot import pivot_accuracy
from bertscope.cli import main


def test_pivot_accuracy_by_hand():
    rng = np.random.default_rng(0)
    pivot = rng.normal(size=(10, 2, 8))  # [item, layer, dim]
    close = pivot + 0.01 * rng.normal(size=pivot.shape)  # the same items, a little moved: all retrieved
    shuffled = pivot[::-1].copy()  # item i looks like pivot item 9 - i: none retrieved (10 items, no fixed point)
    vectors = np.stack([pivot, close, shuffled])  # [language, item, layer, dim]
    acc = pivot_accuracy(vectors)
    assert acc.shape == (2, 3) and np.isnan(acc[:, 0]).all()
    assert (acc[:, 1] == 1.0).all() and (acc[:, 2] == 0.0).all()


def test_align_udhr_from_the_command_line(capsys, tiny_multilingual_dir):
    """The UDHR as the README's test command installs it (make corpora)."""
    code = main(["align", str(tiny_multilingual_dir), "--data", "udhr", "--languages", "deu_1996,rus,cmn_hans",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["data"] == "udhr" and result["pivot"] == "eng" and result["items"] == 30
    assert result["languages"] == ["eng", "deu_1996", "rus", "cmn_hans"]
    assert set(result["layers"][0]["p_at_1"]) == {"deu_1996-eng", "rus-eng", "cmn_hans-eng"}
    assert result["layers"][0]["layer"] == "embeddings" and result["best_layer"] in [row["layer"] for row in result["layers"]]
    coverage = {c["language"]: c for c in result["coverage"]}
    assert coverage["cmn_hans"]["script"] == "Han" and coverage["cmn_hans"]["pieces_per_word"] is None
    assert coverage["rus"]["script"] == "Cyrillic" and coverage["rus"]["pieces_per_word"] > 0
    code = main(["align", str(tiny_multilingual_dir), "--data", "udhr", "--languages", "nope"])
    _, err = capsys.readouterr()
    assert code == 2 and "No complete UDHR version 'nope'" in err
