"""Streamlit AppTest of the tuned lens where the logit lens is: the Masked page's "Layer by layer" tab with a
lens trained into the user cache (both lenses' tokens and KL, the chart) and without one (one line naming the
command that trains it)."""

from __future__ import annotations

from bertscope import load_model
from bertscope.lenses.shipped import trained_folder
from bertscope.lenses.tuned import train_tuned_lens
from tests.app.kit import start_with_url, texts

TEXTS = [f"the {a} {b} was {c} ." for a in ("old", "big", "red") for b in ("river", "house", "dog", "city")
         for c in ("muddy", "quiet")]


def test_masked_page_reads_the_tuned_lens_when_there_is_one(monkeypatch, tiny_mlm_dir, tmp_path):
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), "bertscope/app/masked.py", mlm_tab="Layer by layer")
    assert not at.exception and not at.error
    assert any("No tuned lens for" in c and "train-tuned-lens" in c for c in texts(at.caption))
    lm = load_model(str(tiny_mlm_dir))
    train_tuned_lens(lm, TEXTS, steps=3, batch_size=8).save(trained_folder(lm.name))
    at.run()
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "KL tuned" in d.value.columns)
    assert list(table["layer"])[0] == "embeddings" and len(table) == lm.num_layers + 1
    assert table["KL tuned"].iloc[-1] < 1e-5 and (table["KL tuned"] >= -1e-6).all()
    assert any("KL to the final layer" in c.proto.spec for c in at.get("plotly_chart"))
