"""Streamlit AppTest of the Fine-tuning page: a run on the tweets in the background, its curves and
figures, the finished model opened on the Predictions page in one click; bad input; the demo."""

from __future__ import annotations

import json

from tests.app.kit import start, texts


def submit(at, model: str):
    at.button(key="FormSubmitter:ft_form-Fine-tune " + model).click().run()
    return at


def run_on(monkeypatch, model: str, tmp_path, data: str, seq: int, held: int | None = None, by_length: bool = False):
    """The page with ``data`` chosen, 256 training examples (and ``held`` held out; batched by length
    or not), trained to the end in a cache of its own (the installed corpora read through a link)."""
    from bertscope.runtime.user_cache import user_cache_dir

    corpora = (user_cache_dir() / "corpora").resolve()
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))  # the run folder goes there
    (tmp_path / "corpora").symlink_to(corpora)
    at = start(monkeypatch, model).switch_page("bertscope/app/finetune.py").run()
    assert not at.exception and not at.error
    at.radio(key="ft_data").set_value(data)
    at.select_slider(key="ft_budget").set_value(256)
    if held is not None:
        at.select_slider(key="ft_held").set_value(held)
    at.selectbox(key="ft_seq").set_value(seq)
    at.toggle(key="ft_by_length").set_value(by_length)
    at = submit(at, model)
    assert not at.exception and not at.error
    job = at.session_state["finetune_job"]
    assert job.wait(timeout=600)
    at.run()
    snap = job.snapshot()
    assert snap.status == "done", snap.error
    return at, snap


def test_a_run_on_the_tweets_trains_scores_and_opens_on_the_predictions_page(monkeypatch, tiny_bert_dir, tmp_path):
    at, snap = run_on(monkeypatch, str(tiny_bert_dir), tmp_path, "sentiment", 64)
    assert snap.step == snap.total == 8 and len(snap.losses) == 8  # 256 tweets in batches of 32
    labels = {m.label for m in at.metric}
    assert {"Held-out accuracy", "Held-out macro-F1"} <= labels
    per_label = next(d.value for d in at.dataframe if "f1" in d.value.columns)
    assert list(per_label["label"]) == ["negative", "neutral", "positive"]
    caption = next(c for c in texts(at.caption) if "held-out examples;" in c)
    assert "1,024 held-out" in caption  # a seeded sample of the 3,724 held out (10% of 37,243, stratified)
    assert "((" not in caption and ("none longer than" in caption or "held-out records cut at" in caption)
    assert ": 0 training" not in caption
    (run,) = (tmp_path / "training").iterdir()
    assert "-on-sentiment-" in run.name  # never "bundled-sentiment-…", a shipped model's name
    at.button(key="ft_use").click().run()
    assert not at.exception
    assert at.session_state["model_custom"].endswith("/model")
    assert any(t.value == "Predictions" for t in at.title)


def test_a_run_on_squad_scores_exact_match_and_f1_and_opens_as_a_question_answerer(monkeypatch, tiny_bert_dir,
                                                                                     tmp_path):
    at, _ = run_on(monkeypatch, str(tiny_bert_dir), tmp_path, "squad", 128, held=256, by_length=True)
    run = json.loads(next((tmp_path / "training").glob("*/metrics.json")).read_text())
    assert run["config"]["group_by_length"] is True  # the page's toggle reaches the run
    assert {"Held-out exact match", "Held-out F1", "Windows"} <= {m.label for m in at.metric}
    assert any("256 training and 256 held-out questions (SQuAD v1.1's own train / dev)" in c for c in texts(at.caption))
    worst = next(d.value for d in at.dataframe if "question" in d.value.columns)
    assert len(worst) == 20 and list(worst.columns) == ["question", "gold", "predicted", "F1"]
    epochs = next(d.value for d in at.dataframe if "held-out exact match" in d.value.columns)
    assert len(epochs) == 1
    at.button(key="ft_use").click().run()
    assert not at.exception and any(t.value == "Predictions" for t in at.title)


def test_bad_input_and_the_hosted_demo(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir)).switch_page("bertscope/app/finetune.py").run()
    assert at.radio(key="ft_data").value == "sentiment"
    assert not [r for r in at.radio if r.key == "ft_task"] and not at.get("file_uploader")  # a file's inputs wait
    assert at.select_slider(key="ft_held").value == 1024  # a sample, not the whole held-out side
    at.radio(key="ft_data").set_value("file").run()
    assert at.radio(key="ft_task").value and at.get("file_uploader")
    at.radio(key="ft_data").set_value("file")
    at = submit(at, str(tiny_bert_dir))
    assert not at.exception and "finetune_job" not in at.session_state
    (error,) = texts(at.error)
    assert "Upload a file first" in error
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", f"bundled,{tiny_bert_dir}")
    at = start(monkeypatch, "bundled").switch_page("bertscope/app/finetune.py").run()
    assert not at.exception and any("switched off on this hosted demo" in i for i in texts(at.info))
    assert not at.get("form")
