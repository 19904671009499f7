"""A hostile visitor against the hosted demo (``BERTSCOPE_DEMO=1``): every row of the hosted-demo audit replayed
where a visitor can reach it, asserting that the limit holds. The rows a visitor reaches by uploading a file are
replayed in a real browser too (``tests/browser/test_hostile_uploads.py``: AppTest cannot fill an uploader); the
readers' rows in ``tests/test_fuzz.py``; the killed writers in ``tests/core/test_atomic_writes.py``; the server's
stop in ``tests/cli/test_app_command.py``."""

from __future__ import annotations

import ast
import html
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

import bertscope.app
from bertscope.app.kit.budget import BudgetRefused, CostBudget, client_address
from bertscope.app.kit.pages import page
from bertscope.errors import BertScopeError
from tests.app.kit import APP, texts
from tests.conftest import labels, task_checkpoint

APP_DIR = Path(bertscope.app.__file__).parent
PAYLOAD = ("Paris.\n\n![x](https://example.invalid/p.png) [Log in](https://example.invalid/login)\n\n"
           "# Session expired <img src=x onerror=alert(1)>")


@pytest.fixture
def demo(monkeypatch):
    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    monkeypatch.setenv("BERTSCOPE_WARM_UMAP", "0")


def _demo_app(monkeypatch, model: str, allow: tuple[str, ...] = (), **query) -> AppTest:
    monkeypatch.setenv("BERTSCOPE_ALLOWLIST", ",".join((model, *allow)))
    monkeypatch.setenv("BERTSCOPE_MODEL", model)
    at = AppTest.from_file(APP, default_timeout=180)
    for name, value in query.items():
        at.query_params[name] = value
    return at.run()


# -- the budget refunded finished work ----------------------------------------------------------------------------

def test_work_that_started_is_charged_whatever_ends_it():
    """Row 1: any error refunded the job's charge, even after the heavy work ran (7 extractions on a budget of 5).
    Now the budget keeps every charge; seven jobs that each fail after starting: five run, two are refused."""
    from bertscope.app.kit import budget as kit

    ledger, ran = CostBudget(), 0
    for i in range(7):
        try:
            slot = ledger.start("203.0.113.7", "probe run", ("probe", i), 5, 2, now=float(i))
        except BudgetRefused:
            continue
        try:
            ran += 1
            raise BertScopeError("A probe needs at least two different labels.")  # after the extraction
        except BertScopeError:
            pass
        finally:
            slot.release()
    assert ran == 5 and ledger.spent("203.0.113.7", now=7.0) == 5 and ledger.running == 0
    assert "refund" not in ast.unparse(ast.parse(Path(kit.__file__).read_text()))


def test_a_probe_task_whose_second_label_lies_past_the_cut_is_refused_before_any_work(tiny_bert):
    """The audit's file: the second tag sits past the model's maximum length. The size check says so before the
    job starts (nothing charged, nothing extracted)."""
    from bertscope.analysis.hidden_cache import task_size
    from bertscope.corpora.probe_tasks import read_csv_task

    words = " ".join(["the"] * 60 + ["dog"])  # the tiny model reads 40 tokens
    tags = " ".join(["DET"] * 60 + ["NOUN"])
    task = read_csv_task(f"tokens,tags\n{words},{tags}\n")
    size = task_size(tiny_bert, task)
    assert size.labels == {"DET"} and size.cut_words > 0
    with pytest.raises(BertScopeError, match=r"at least 2 different labels .* 1 \(.* past the model's maximum length"):
        size.check_labels()


# -- disk filled without bound; memory through the cross-lingual upload ---------------------------------------------

def test_the_audits_upload_of_500_lines_of_499_words_is_refused_by_its_word_pieces(demo, tmp_path):
    """Row 2's file: 998,012 bytes, under the demo's byte and line caps; at a model's real length of 512 tokens it
    is ~250,000 word pieces (10.7 MB of states per 2 sentences on bundled). Refused by its word pieces."""
    from transformers import BertModel

    from bertscope.analysis.hidden_cache import task_size
    from bertscope.app.kit.limits import Limits, check_pieces
    from bertscope.core.models import load_model
    from bertscope.corpora.probe_tasks import read_csv_task
    from tests.conftest import bert_tokenizer, save_model, tiny_bert_config

    lm = load_model(str(save_model(BertModel(tiny_bert_config(max_position_embeddings=512)), bert_tokenizer(),
                                   tmp_path / "long")))

    line = " ".join(["a"] * 499) + "," + " ".join(["X", "Y"] * 249 + ["X"])  # the audit's 998,012 bytes
    text = "tokens,tags\n" + "\n".join([line] * 500) + "\n"
    assert len(text.encode()) < Limits.upload_bytes  # it passed the demo's byte cap, and its line cap
    size = task_size(lm, read_csv_task(text))
    with pytest.raises(BertScopeError, match=r"^This probe run has [\d,]+ word pieces; this app runs up to 30,000"):
        check_pieces(size.pieces, "this probe run")


def test_a_hundred_distinct_uploads_stay_within_the_disk_quota(tiny_bert, tmp_path, monkeypatch):
    """Row 2: each upload's digest got its own hidden-state folder, with no quota. Under a quota of 256 KiB the
    least recently used go; the states of the last upload stay readable."""
    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
    from bertscope.corpora.probe_tasks import read_csv_task
    from bertscope.runtime import disk_quota

    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))
    quota = disk_quota.DiskQuota(tmp_path, 256 * 1024)
    disk_quota.set_disk_quota(256 * 1024)
    try:
        cache = HiddenStateCache()
        for i in range(100):
            task = read_csv_task(f"sentence,label\nthe dog {i} sat .,a\nthe cat ate {i} .,b\n", f"upload{i}")
            states = hidden_states(tiny_bert, task, "mean", cache)
            assert quota.used() <= quota.limit
        assert states.layer(0).shape == (2, tiny_bert.hidden_size) and 10 < len(quota.entries()) < 100
    finally:
        disk_quota.set_disk_quota(None)


def test_a_job_larger_than_the_quota_is_refused_and_a_running_jobs_folder_is_never_removed(tmp_path):
    from bertscope.runtime.disk_quota import DiskQuota, pinned

    quota = DiskQuota(tmp_path, 64 * 1024)
    with pytest.raises(BertScopeError, match="would write about 1 MiB; this server keeps 0 MiB for its visitors"):
        quota.make_room(2**20)
    (tmp_path / "training").mkdir()
    run = tmp_path / "training" / "run"
    run.mkdir()
    (run / "weights").write_bytes(b"x" * 40_000)
    with pinned(run), pytest.raises(BertScopeError, match="taken by jobs still running"):
        quota.make_room(40_000)
    assert run.is_dir()
    assert quota.make_room(40_000) == [run]  # once the run ended, it can go


def test_the_audits_990_language_columns_are_refused_before_any_embedding(demo):
    """Row 3: rows and cell length were capped, languages were not (494,010 texts: ~19.7 GB of states at mBERT's
    size). The selection is refused by rows x languages before the job (the page's upload: the browser test)."""
    from bertscope.app.kit.limits import check_texts
    from bertscope.corpora.parallel import read_parallel_tsv

    codes = [f"l{i:03d}" for i in range(990)]
    rows = "\n".join("\t".join(["word"] * len(codes)) for _ in range(499))
    text = "\t".join(codes) + "\n" + rows + "\n"
    assert len(text.encode()) < 3_000_000
    data = read_parallel_tsv(text)
    assert (data.n_items, len(data.languages)) == (499, 990)
    with pytest.raises(BertScopeError, match=r"^499 rows × 990 languages = 494,010 texts; this app embeds up to 2,000"):
        check_texts(data.n_items, len(data.languages))
    check_texts(209, 9)  # the shipped words: 1,881 texts


# -- identity -------------------------------------------------------------------------------------------------------

def test_one_client_with_fifty_forwarded_for_values_runs_five_jobs():
    budget, ran = CostBudget(), 0
    for i in range(50):
        who = client_address("X-Forwarded-For", [f"198.51.100.{i}, 203.0.113.7"], 1)
        try:
            budget.start(who, "probe run", i, 5, None, now=float(i)).release()
            ran += 1
        except BudgetRefused:
            pass
    assert ran == 5


def test_the_dockerfile_and_the_hosting_page_name_the_trusted_header():
    root = APP_DIR.parents[1]
    docker = (root / "Dockerfile").read_text()
    assert "BERTSCOPE_VISITOR_HEADER=X-Forwarded-For" in docker and "BERTSCOPE_TRUSTED_PROXIES=1" in docker
    hosting = (root / "docs" / "hosting.md").read_text()
    assert "BERTSCOPE_TRUSTED_PROXIES" in hosting and "rightmost" in hosting and "BERTSCOPE_DISK_MB" in hosting


# -- training held no slot; model loads were not metered ------------------------------------------------------------

def test_a_training_run_holds_its_slot_and_a_model_place_until_its_thread_ends(demo, tmp_path):
    from bertscope.app.kit import training
    from bertscope.app.kit.budget import cost_budget
    from bertscope.app.kit.resident import resident_models

    ended: list = []
    lm = SimpleNamespace(model=SimpleNamespace(parameters=lambda: []))
    training.start_training("fine-tuning run", tmp_path / "run", lm, lambda done: ended.append(done) or "job")
    assert cost_budget().running == 1 and resident_models().held == 1  # the page has returned; the run goes on
    ended[0]()  # the job's thread ends
    assert cost_budget().running == 0 and resident_models().held == 0


def test_switching_among_allowlisted_models_is_metered(demo, monkeypatch, tiny_bert_dir, tiny_mlm_dir):
    """The last row: switching models evicted other visitors' models for free. A load is now a costly job (the
    startup default's excepted): a visitor who keeps switching is refused in one line."""
    at = _demo_app(monkeypatch, str(tiny_bert_dir), (str(tiny_mlm_dir),))
    monkeypatch.setenv("BERTSCOPE_MAX_MODELS", "1")  # every switch evicts: every load is a real one
    refused = []
    for i in range(11):  # six loads of the other model (back to the default is free)
        at.selectbox(key="model_choice").set_value(str(tiny_mlm_dir) if i % 2 == 0 else str(tiny_bert_dir)).run()
        assert not at.exception
        refused += [e for e in texts(at.error) if "costly jobs per visitor" in e]
    assert refused and refused[0].startswith("This demo runs 5 costly jobs per visitor in 10 minutes; the next "
                                             "model load is possible in")


# -- a visitor's text rendered as text ----------------------------------------------------------------------------

def _shown(at: AppTest) -> tuple[list[str], list[str]]:
    """(the Markdown sources of the page's text elements, its HTML elements' bodies)."""
    markdown = [str(e.value) for kind in ("markdown", "caption", "info", "warning", "error", "success", "title",
                                          "subheader", "header") for e in at.get(kind)]
    return markdown, [e.proto.body for e in at.get("html")]


def _as_text(body: str) -> str:
    """An HTML view's text as a reader sees it (each chip's tag label left out)."""
    return html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<sup[^>]*>.*?</sup>", "", body)))


def _renders(markdown: list[str], bodies: list[str]) -> list[str]:
    """What of the payload would render as an image, a link, a heading or a tag."""
    live = [m for m in markdown if re.search(r"(?<!\\)!(?<!\\)\[x|(?<!\\)\]\(https://example|^#\s|<img", m, re.M)]
    return live + [b for b in bodies if "<img" in b or "<a " in b]


def test_a_shared_links_markdown_renders_as_text_on_a_tagger_and_a_question_answerer(demo, monkeypatch,
                                                                                     tiny_bert_dir, tmp_path):
    """Row 6: HTML was escaped, Markdown was not, and a blank line ended the ``<div>``: the link's text rendered
    an image, a link and a heading."""
    tagger = task_checkpoint(tiny_bert_dir, tmp_path / "tag", "AutoModelForTokenClassification", 6, num_labels=3,
                             **labels(["O", "B-LOC", "I-LOC"]))
    reader = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 3)
    for model in (tagger, reader):
        at = _demo_app(monkeypatch, str(model), text=PAYLOAD)
        at.switch_page(str(page("predictions.py").path)).run()
        assert not at.exception
        markdown, bodies = _shown(at)
        assert not _renders(markdown, bodies)  # nothing of the text renders as Markdown or HTML...
        assert any("https://example.invalid/login" in _as_text(b) for b in bodies)  # ...and the text is there


@pytest.mark.parametrize(("script", "query"), [
    ("attention.py", {"text": PAYLOAD}), ("masked.py", {"text": PAYLOAD.replace("Paris.", "Paris [MASK].")}),
    ("shift.py", {"word": PAYLOAD[:60]}),
])
def test_link_values_render_as_text_on_every_page_that_takes_text(demo, monkeypatch, tiny_bert_dir, script, query):
    at = _demo_app(monkeypatch, str(tiny_bert_dir), **query)
    at.switch_page(str(page(script).path)).run()
    assert not at.exception
    assert not _renders(*_shown(at))


def test_no_page_renders_markdown_with_html_allowed():
    for path in APP_DIR.rglob("*.py"):
        assert "unsafe_allow_html" not in path.read_text(), path


# -- names and paths ------------------------------------------------------------------------------------------------

def test_an_uploads_name_never_reaches_a_path(demo):
    from bertscope.app.kit.uploads import keep_upload, shown_name

    for name in ("../../etc/passwd.csv", "a/b.csv", "x" * 300 + ".csv", "con.csv\x00.txt"):
        upload = SimpleNamespace(name=name, size=12, getvalue=lambda: b"text,label\na,b\n")
        kept = keep_upload(upload)
        assert kept.parent.name == "uploads" and re.fullmatch(r"[0-9a-f]{32}(\.csv|\.txt)?", kept.name), kept
        assert kept.read_bytes() == b"text,label\na,b\n" and len(shown_name(upload)) <= 80


def test_demo_downloads_name_the_servers_folders_instead_of_showing_them(demo):
    import json

    from bertscope.app.kit.chrome import shareable
    from bertscope.features.shipped import sae_folder, shipped_saes
    from bertscope.runtime.user_cache import user_cache_dir

    folder = sae_folder(shipped_saes("bundled-mlm"), 1)
    text = json.dumps({"sae": {"path": str(folder)}, "cache": str(user_cache_dir() / "hidden" / "abc")})
    safe = shareable(text)
    assert str(folder) not in safe and str(user_cache_dir()) not in safe and "<bertscope>/" in safe


def test_every_download_goes_through_the_one_helper():
    for path in APP_DIR.rglob("*.py"):
        if path.name == "chrome.py":
            continue
        tree = ast.parse(path.read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "download_button"], path


# -- weights a reader trips on: one line, and a pickle is never opened ----------------------------------------------

def test_pickled_weights_are_refused_unopened_and_truncated_ones_are_one_line(tmp_path, tiny_bert_dir, tiny_saes_dir):
    import shutil

    import torch

    from bertscope.core.models import load_model
    from bertscope.features.sae import WEIGHTS_FILE, load_sae
    from bertscope.features.shipped import sae_folder

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_bert_dir, pickled)
    (pickled / "model.safetensors").unlink()
    torch.save({"ran": "a pickle"}, pickled / "pytorch_model.bin")
    opened = []
    real_load = torch.load
    torch.load = lambda *a, **k: opened.append(a) or real_load(*a, **k)
    try:
        with pytest.raises(BertScopeError, match="no safetensors weights .* never opens pickled weights"):
            load_model(str(pickled))
    finally:
        torch.load = real_load
    assert not opened
    cut = tmp_path / "cut"
    shutil.copytree(tiny_bert_dir, cut)
    weights = cut / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(BertScopeError, match="its weights file cannot be read .* cut short") as err:
        load_model(str(cut))
    assert "\n" not in str(err.value)
    sae = tmp_path / "sae"
    shutil.copytree(sae_folder(tiny_saes_dir, 0), sae)
    (sae / WEIGHTS_FILE).write_bytes((sae / WEIGHTS_FILE).read_bytes()[:100])
    with pytest.raises(BertScopeError, match="Could not read the SAE in"):
        load_sae(sae)


def test_a_learning_rate_of_nan_is_refused(capsys):
    from bertscope.cli import main
    from bertscope.training.config import FinetuneConfig, RecipeConfig

    for cfg in (RecipeConfig(lr=float("nan")), FinetuneConfig(lr=float("inf"))):
        with pytest.raises(BertScopeError, match="give a finite number"):
            cfg.check()
    with pytest.raises(SystemExit) as ended:
        main(["pretrain", "bundled", "--out", "x", "--lr", "nan"])
    assert ended.value.code == 2 and capsys.readouterr().err.count("\n") == 1
