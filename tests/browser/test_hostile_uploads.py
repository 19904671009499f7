"""The hosted-demo audit's upload rows, replayed in a real browser against ``BERTSCOPE_DEMO=1`` (AppTest cannot fill
an uploader): each hostile file is refused in one line before any work runs, and nothing is written to the disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.test_browser import alert_text, open_page, running_app, wait_until_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("demo")
    cache = folder / "cache"
    corpora = Path.home() / ".cache" / "bertscope" / "corpora"
    cache.mkdir()
    if corpora.is_dir():
        (cache / "corpora").symlink_to(corpora)
    with running_app(folder / "server.log", cache=cache, extra={"BERTSCOPE_DEMO": "1"}) as url:
        yield url, cache


def _written(cache: Path) -> list[str]:
    """What the demo wrote for its visitors (hidden states, vectors, uploads)."""
    return sorted(str(p.relative_to(cache)) for kept in ("hidden", "align", "uploads") if (cache / kept).is_dir()
                  for p in (cache / kept).iterdir())


def _probe_upload(page, path: Path) -> str:
    page.get_by_role("button", name="Extract and probe every layer").wait_for(timeout=240_000)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Task").click()
    page.get_by_role("option", name="Your own file…").click()
    page.locator('[data-testid="stFileUploader"]').first.locator("input[type=file]").set_input_files(str(path))
    page.get_by_text(path.name).wait_for(timeout=30_000)
    page.get_by_role("button", name="Extract and probe every layer").click()
    return alert_text(page)


def test_hostile_uploads_are_refused_before_any_work(browser, demo_server, tmp_path, artifacts):
    url, cache = demo_server
    page, problems = open_page(browser, f"{url}/probes", height=1400)
    before = _written(cache)
    # row 1: the second tag past the model's cut (states were extracted, then the charge refunded)
    past = tmp_path / "past-the-cut.csv"
    past.write_text("tokens,tags\n" + " ".join(["the"] * 600 + ["dog"]) + "," + " ".join(["DET"] * 600 + ["NOUN"])
                    + "\n", encoding="utf-8")
    said = _probe_upload(page, past)
    assert "at least 2 different labels" in said and "past the model's maximum length" in said and "\n" not in said
    # row 2: 500 lines of 499 one-letter words, 998,012 bytes: under the byte and line caps (2.7 GB of states)
    wide = tmp_path / "wide.csv"
    line = " ".join(["a"] * 499) + "," + " ".join(["X", "Y"] * 249 + ["X"])
    wide.write_text("tokens,tags\n" + "\n".join([line] * 500) + "\n", encoding="utf-8")
    page.goto(f"{url}/probes")
    said = _probe_upload(page, wide)
    assert "word pieces; this app runs up to 30,000" in said and "\n" not in said
    page.screenshot(path=str(artifacts / "hostile-probe-upload.png"), full_page=True)
    # row 3: 990 language columns x 499 rows on the cross-lingual page (~19.7 GB of states at mBERT's size)
    columns = tmp_path / "columns.tsv"
    codes = [f"l{i:03d}" for i in range(990)]
    columns.write_text("\t".join(codes) + "\n" + "\n".join("\t".join(["w"] * 990) for _ in range(499)) + "\n",
                       encoding="utf-8")
    page.goto(f"{url}/align")
    page.get_by_text("Or upload a TSV").wait_for(timeout=240_000)
    wait_until_idle(page, 120)
    page.locator('input[type="file"]').set_input_files(str(columns))
    try:
        page.get_by_text("494,010 texts").wait_for(timeout=120_000)
    finally:
        page.screenshot(path=str(artifacts / "hostile-align-upload.png"), full_page=True)
    page.screenshot(path=str(artifacts / "hostile-align-upload.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert _written(cache) == before, _written(cache)
    assert not problems, problems
    page.close()
