"""A real browser: start ``streamlit run app.py`` offline, open each page, screenshot it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from bertscope.app.kit.pages import PAGES
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_app(log: Path, model: str | None = None, cache: Path | None = None, extra: dict | None = None):
    """``streamlit run app.py`` on a free port, offline; default model unless one is given; ``cache``:
    a fresh BERTSCOPE_CACHE (nothing computed before: models converted again, no hidden states kept);
    ``extra``: more of the server's environment (BERTSCOPE_DEMO=1: the hosted demo)."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(extra or {})}
    if cache is not None:
        env["BERTSCOPE_CACHE"] = str(cache)
    env.pop("BERTSCOPE_MODEL", None)  # the offline default: the bundled model
    if model:
        env["BERTSCOPE_MODEL"] = model
    with open(log, "w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true"],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(url + "/_stcore/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start:\n{Path(log).read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)


@pytest.fixture(scope="module")
def app_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with running_app(log) as url:
        yield url, log


@pytest.fixture(scope="module")
def app_url(app_server):
    return app_server[0]


@pytest.fixture
def server_log(app_server):
    """What the shared server writes to its log during one test (``server_log()``): tracebacks the
    browser never shows (a table Arrow could not convert) land there."""
    log = app_server[1]
    start = log.stat().st_size
    return lambda: log.read_bytes()[start:].decode("utf-8", errors="replace")


def block_outside(page, sink: list[str] | None = None) -> list[str]:
    """Abort every request that leaves this machine; returns the list they are recorded in
    (``sink`` when given, as "outside request: URL")."""
    outside: list[str] = sink if sink is not None else []

    def route(r):
        host = urlparse(r.request.url).hostname or ""
        if r.request.url.startswith(("data:", "blob:", "about:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            outside.append(f"outside request: {r.request.url}" if sink is not None else r.request.url)
            r.abort()

    page.route("**/*", route)
    return outside


def open_page(browser, url, height: int = 1000):
    """A page with outside requests blocked: a script error or a request that would leave this
    machine (a CDN, a font server) lands in ``problems``, which every test asserts empty."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    block_outside(page, problems)
    page.goto(url, wait_until="domcontentloaded")
    return page, problems


def test_make_run_prints_only_the_local_url(tmp_path):
    """`make run`'s own command line: no outside service is asked for this machine's address."""
    import re as regex
    import shlex

    recipe = regex.search(r"^run:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), regex.M).group(1)
    args = shlex.split(recipe.replace("$(BIN)/python", sys.executable))
    port = free_port()
    log = tmp_path / "run.log"
    with open(log, "w") as sink:
        server = subprocess.Popen([*args, "--server.port", str(port)], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        deadline = time.monotonic() + 60
        while "URL" not in log.read_text() and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.2)
        time.sleep(1.0)  # anything printed after the URL (an address lookup's complaint) lands too
    finally:
        server.terminate()
        server.wait(timeout=20)
    printed = log.read_text()
    assert f"http://localhost:{port}" in printed, printed
    for unwanted in ("External URL", "Network URL", "Did not auto detect"):
        assert unwanted not in printed, printed


def test_home_is_a_front_door(browser, app_url, artifacts):
    page, problems = open_page(browser, app_url, height=1800)
    page.get_by_text("Heads per layer").wait_for(timeout=60_000)
    body = page.inner_text("body")
    main = page.locator('[data-testid="stMain"]')
    links = main.locator('a[data-testid="stPageLink-NavLink"]')
    names = {links.nth(i).inner_text().strip().splitlines()[-1] for i in range(links.count())}  # after the icon
    assert names == {entry.title for entry in PAGES if not entry.default}  # every page of the one list
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert all(entry.title in nav for entry in PAGES) and "more" not in nav  # none hidden behind "View 4 more"
    assert "Models you can use right now" in body and "python -m bertscope" in body
    assert "Heads per layer" in body and "22,744,506" in body  # bundled-mlm: the encoder and its masked-LM head
    assert "Model: bundled-mlm" in body
    assert "sentence-transformers/all-MiniLM-L6-v2" in body
    assert "using bundled-mlm, the bundled all-MiniLM-L6-v2" in body  # the offline notice
    assert "Traceback" not in body and not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "home.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_probes_page_on_bundled(browser, app_url, artifacts, server_log):
    page, problems = open_page(browser, f"{app_url}/probes", height=1400)
    page.get_by_role("button", name="Extract and probe every layer").wait_for(timeout=60_000)
    page.get_by_role("button", name="Extract and probe every layer").click()
    seen, deadline = [], time.monotonic() + 240  # the bar's text, sampled while the job runs
    while not page.get_by_text("Majority baseline").count() and time.monotonic() < deadline:
        # all_inner_texts reads what is there now and never waits: the bar may go between a count and a read
        texts = page.locator('[data-testid="stProgress"]').all_inner_texts()
        text = texts[0].strip() if texts else ""
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        time.sleep(0.3)
    page.get_by_text("Majority baseline").wait_for(timeout=60_000)
    # every phase moves: the probes' phase (task, then control, at each layer) reports each fit, with the
    # time left measured on this run once a fit is done
    fits = [t for t in seen if t.startswith("Probes (task, then control, per layer), fits")]
    assert len(set(fits)) >= 3, seen
    assert any("left" in t for t in fits), seen
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert "Cache:" in page.inner_text("body") and not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "probes.png"), full_page=True)
    # what a score hides: single test examples (the errors) and the confusion matrix
    page.get_by_text("Confusion matrix at layer", exact=False).first.wait_for(state="attached", timeout=60_000)
    page.get_by_text("Errors only").click()
    page.get_by_text("(the errors)", exact=False).first.wait_for(timeout=60_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts / "probes-examples.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]  # e.g. Arrow refusing a column of mixed types
    page.close()


def pick_model(page, option: str) -> None:
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Encoder").click()
    page.get_by_role("option", name=option, exact=True).click()


def test_model_picker_bad_id_then_recovers(browser, app_url, artifacts):
    page, problems = open_page(browser, app_url)
    page.get_by_text("Heads per layer").wait_for(timeout=60_000)  # the default model's card
    pick_model(page, "Other (hub id or local folder)…")
    box = page.get_by_label("Hub id or local folder")
    # a prompt, not an error (its own words: the home page's caption also says "type a hub id")
    page.get_by_text("Type a hub id (org/name) or a local model folder", exact=False).wait_for(timeout=60_000)
    box.fill("nobody-xyz/no-such-model")
    box.press("Enter")
    error = page.locator('[data-testid="stAlertContentError"]')
    error.wait_for(timeout=60_000)
    assert "hub is unreachable" in error.inner_text()
    assert not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "home-bad-model.png"), full_page=True)
    pick_model(page, "bundled")
    page.get_by_role("heading", name="Model: bundled", exact=True).wait_for(timeout=60_000)
    outputs = page.locator("tr", has_text="Pretraining outputs")  # the card's row: bundled has none
    outputs.get_by_text("none (encoder only)").wait_for(timeout=60_000)
    assert not page.locator('[data-testid="stAlertContentError"]').count()
    assert not problems, problems
    page.close()


def test_params_page(browser, app_url, artifacts):
    page, problems = open_page(browser, f"{app_url}/params")
    page.get_by_text("22,713,216").first.wait_for(timeout=60_000)  # bundled, the offline default
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "params.png"), full_page=True)
    page.get_by_role("tab", name="Compare").click()
    panel = page.get_by_role("tabpanel", name="Compare")
    panel.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    panel.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
    page.screenshot(path=str(artifacts / "params-compare.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_params_headline_metrics_are_not_cut_off(browser, app_url, artifacts):
    """bert-large with MLM + NSP heads: the widest counts; each tile shows its whole value."""
    page, problems = open_page(browser, f"{app_url}/params?model=bert-large-uncased&count=pretraining")
    page.get_by_text("Exact: total 336,", exact=False).wait_for(timeout=60_000)
    page.get_by_text("336.2 M").first.wait_for(timeout=60_000)  # the tiles, drawn before the line
    values = page.locator('[data-testid="stMetricValue"]')
    deadline = time.monotonic() + 30
    while values.count() < 6 and time.monotonic() < deadline:  # total + five groups
        page.wait_for_timeout(200)
    assert values.count() >= 6
    for i in range(values.count()):
        fits = values.nth(i).evaluate("e => [e.scrollWidth, e.clientWidth, e.innerText]")
        inner = values.nth(i).locator("div").first
        inner_fits = inner.evaluate("e => [e.scrollWidth, e.clientWidth]") if inner.count() else fits[:2]
        assert fits[0] <= fits[1] and inner_fits[0] <= inner_fits[1], fits
    assert page.get_by_text("336.2 M").count()
    page.screenshot(path=str(artifacts / "params-bert-large.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_cold_deep_link_runs_through_the_entry_point(browser, tmp_path, artifacts):
    """The first request to a fresh server is a deep link: app.py must still run."""
    with running_app(tmp_path / "server.log") as url:
        page, problems = open_page(browser, f"{url}/params")
        page.get_by_text("22,713,216").first.wait_for(timeout=60_000)
        sidebar = page.locator('[data-testid="stSidebar"]')
        assert sidebar.get_by_text("Encoder").count()  # the shared model picker
        assert not sidebar.get_by_text("shared", exact=True).count()  # no auto-listed files
        page.screenshot(path=str(artifacts / "params-cold-deep-link.png"), full_page=True)
        assert not problems, problems
        page.close()


def test_attention_page_offline(browser, app_url, artifacts):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    failed: list[str] = []
    page.on("requestfailed", lambda req: failed.append(req.url))
    outside = block_outside(page)
    page.goto(f"{app_url}/attention", wait_until="domcontentloaded")
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "attention.png"), full_page=True)
    # every head of the layer: token names along the left column and the bottom row of the small multiples
    page.get_by_role("tab", name="All heads of the layer").click()
    grid = page.get_by_role("tabpanel", name="All heads of the layer").locator(".js-plotly-plot")
    grid.wait_for(timeout=60_000)
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts / "attention-all-heads.png"), full_page=True)
    ticks = grid.first.locator("svg text").all_text_contents()
    assert ticks.count("animal") >= 6 and ticks.count("street") >= 4, ticks  # 3 rows at left, 4 columns below
    # bertviz with the network blocked: the app serves require.js, d3 and jQuery itself
    for tab, shot in (("bertviz head view", "attention-bertviz-offline.png"),
                      ("bertviz model view", "attention-bertviz-model-offline.png")):
        page.get_by_role("tab", name=tab).click()
        frame = page.get_by_role("tabpanel", name=tab).frame_locator("iframe").first
        frame.locator("svg text").first.wait_for(timeout=60_000)  # tokens drawn by d3
        assert not frame.get_by_text("could not load require.js").is_visible()
        page.wait_for_timeout(500)
        page.screenshot(path=str(artifacts / shot), full_page=True)
    assert not outside, outside  # nothing left the machine: no CDN, no font server
    assert not failed, failed
    # head statistics over the shipped corpus; clicking a cell picks that head
    page.get_by_role("tab", name="Head statistics").click()
    page.get_by_role("button", name="Compute head statistics").click()
    panel = page.get_by_role("tabpanel", name="Head statistics")
    panel.locator(".js-plotly-plot").first.wait_for(timeout=120_000)  # drawn once the corpus has run
    page.screenshot(path=str(artifacts / "attention-head-stats.png"), full_page=True)
    # click the cell of layer 3, head 7: the layer and head pickers follow
    area = panel.locator(".nsewdrag").first
    area.scroll_into_view_if_needed()
    box = area.bounding_box()
    layers, heads = 6, 12
    page.mouse.click(box["x"] + (7 + 0.5) / heads * box["width"],
                     box["y"] + (3 + 0.5) / layers * box["height"])
    # the Head tab now draws that head (and the URL says so)
    page.wait_for_url("**layer=3**", timeout=30_000)
    page.get_by_role("tab", name="Head", exact=True).click()
    page.get_by_text("Layer 3, head 7").first.wait_for(state="attached", timeout=30_000)
    assert not page.locator(".stException").count()
    assert not outside, outside
    assert not problems, problems
    page.close()


def test_masked_page_without_head_on_bundled(browser, app_url, artifacts):
    page, problems = open_page(browser, f"{app_url}/masked?model=bundled", height=1400)
    page.get_by_text("no masked-LM head").wait_for(timeout=60_000)
    page.get_by_text("Corrupted input (▸ = in the loss)", exact=False).wait_for(timeout=60_000)  # the recipe still shows
    page.get_by_role("button", name="Switch to bundled-mlm", exact=False).wait_for(timeout=30_000)
    page.screenshot(path=str(artifacts / "masked-bundled.png"), full_page=True)
    # the offline way on: bundled-mlm, the bundled encoder with the head BertScope trained
    page.get_by_role("button", name="Switch to bundled-mlm", exact=False).click()
    page.locator(".js-plotly-plot").first.wait_for(timeout=180_000)
    page.get_by_text("bank").first.wait_for(state="attached", timeout=30_000)  # He deposited the money in the [MASK].
    # bundled-mlm is the offline default, which a link leaves unsaid
    assert "model=bundled" not in page.url and not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "masked-bundled-mlm.png"), full_page=True)
    # why "paris"? integrated gradients and the other methods for the mask
    page.get_by_role("tab", name="Why this prediction?").click()
    panel = page.get_by_role("tabpanel", name="Why this prediction?")
    panel.get_by_text("completeness error", exact=False).wait_for(timeout=180_000)
    assert panel.locator(".js-plotly-plot").count() == 2  # the IG strip and the gradient x input strip
    panel.get_by_text("Agreement between methods").wait_for(timeout=30_000)
    assert not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "masked-why.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_attention_beyond_raw_attention_on_bundled(browser, app_url, artifacts):
    page, problems = open_page(browser, f"{app_url}/attention?att_tab=Beyond+raw+attention", height=1500)
    panel = page.get_by_role("tabpanel", name="Beyond raw attention")
    panel.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    panel.get_by_text("Spearman rank correlation", exact=False).wait_for(timeout=60_000)
    # add attention flow: one layer, computed on request with a progress bar
    methods = panel.locator('[data-testid="stMultiSelect"]').first
    methods.click()
    page.get_by_role("option", name="attention flow").click()
    page.keyboard.press("Escape")
    panel.get_by_role("button", name="Compute flow after layer 0", exact=False).click()
    panel.get_by_text("attention flow").first.wait_for(state="attached", timeout=120_000)
    page.wait_for_timeout(1000)
    assert not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "attention-beyond-raw.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_masked_page_with_heads(browser, tiny_bert_dir, tmp_path, artifacts):
    with running_app(tmp_path / "server.log", model=str(tiny_bert_dir)) as url:
        page, problems = open_page(browser, f"{url}/masked", height=1400)
        page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
        assert not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "masked.png"), full_page=True)
        page.get_by_role("tab", name="Pretraining recipe (80/10/10)").click()
        page.get_by_text("Mean MLM loss (nats)").wait_for(timeout=30_000)
        page.screenshot(path=str(artifacts / "masked-recipe.png"), full_page=True)
        page.get_by_role("tab", name="Next sentence").click()
        page.get_by_text("B then A: IsNext").wait_for(timeout=30_000)
        # bad inputs for fill-mask: no mask, only masks (too many), another family's mask token
        page.get_by_role("tab", name="Fill mask").click()
        box = page.get_by_label("Text (up to 20 masks", exact=False)
        for text, message in (("no mask here", "no mask"), ("[MASK] " * 25, "at most 20"),
                              ("the <extra_id_0> river", "not a mask token here")):
            box.fill(text)
            box.press("Control+Enter")
            page.get_by_text(message).first.wait_for(timeout=30_000)
        assert not page.locator(".stException").count()
        assert not problems, problems
        page.close()


def test_shift_page_bank_on_bundled(browser, app_url, artifacts):
    page, problems = open_page(browser, f"{app_url}/shift", height=1500)
    page.get_by_text("22 occurrences of").wait_for(timeout=120_000)  # the bank preset
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "shift.png"), full_page=True)
    page.get_by_role("tab", name="Across layers").click()
    page.get_by_text("Best layer for the senses").wait_for(timeout=30_000)
    page.screenshot(path=str(artifacts / "shift-layers.png"), full_page=True)
    page.get_by_role("tab", name="2-D map").click()
    page.get_by_role("tabpanel", name="2-D map").locator(".js-plotly-plot").wait_for(timeout=60_000)
    page.screenshot(path=str(artifacts / "shift-map.png"), full_page=True)
    # the Brown corpus: nearest words at the layer, their tags, and "bank" across genres
    page.get_by_role("tab", name="In the Brown corpus").click()
    panel = page.get_by_role("tabpanel", name="In the Brown corpus")
    panel.get_by_role("button", name="Index the Brown sample").click(timeout=60_000)  # read from disk if kept
    panel.get_by_text("occurrences by genre", exact=False).first.wait_for(state="attached", timeout=180_000)
    assert panel.locator(".js-plotly-plot").count() == 2 and not page.locator(".stException").count()
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts / "shift-brown.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_align_page_on_bundled(browser, app_url, tmp_path, artifacts):
    """Offline, with the English bundled-mlm in the sidebar, the page runs on
    bundled-multilingual and says why; maps, retrieval and token links are drawn; switching to
    the English model shows its weak alignment; a TSV with gaps is used."""
    page, problems = open_page(browser, f"{app_url}/align", height=1500)
    compute = page.get_by_role("button", name="Compute", exact=True)
    compute.click(timeout=240_000)  # converts bundled-multilingual on first use; the texts wait for this
    page.get_by_text("Best layer (centred)").wait_for(timeout=240_000)
    body = page.inner_text("body")
    assert "cannot be had here" in body and "running on bundled-multilingual" in body
    assert "Weak alignment" not in body
    page.locator(".js-plotly-plot").nth(1).wait_for(timeout=60_000)  # raw and centred maps
    page.screenshot(path=str(artifacts / "align.png"), full_page=True)
    page.get_by_text("UMAP", exact=True).click()
    page.get_by_text("UMAP at layer").first.wait_for(timeout=180_000)
    wait_until_idle(page, 120)  # the rerun done: no stale copy of the tabs left on the page
    page.screenshot(path=str(artifacts / "align-umap.png"), full_page=True)
    page.get_by_role("tab", name="Retrieval").first.click()
    page.get_by_text("Retrieval P@1 by layer").first.wait_for(timeout=60_000)
    page.screenshot(path=str(artifacts / "align-retrieval.png"), full_page=True)
    page.get_by_role("tab", name="Token alignment").first.click()
    page.get_by_text("mutual argmax links").first.wait_for(timeout=60_000)
    page.screenshot(path=str(artifacts / "align-tokens.png"), full_page=True)
    page.get_by_text("bundled-mlm (sidebar)").click()
    wait_until_idle(page, 120)
    compute.click()  # another model: its vectors are asked for again (or read back from disk)
    page.get_by_text("Weak alignment").wait_for(timeout=120_000)
    page.screenshot(path=str(artifacts / "align-english-model.png"), full_page=True)
    gaps = tmp_path / "gaps.tsv"
    gaps.write_text("en\tde\tzh\nThe cat sleeps.\tDie Katze schläft.\t猫在睡觉。\n"
                    "It rains.\t\t下雨了。\nI drink tea.\tIch trinke Tee.\t我喝茶。\n", encoding="utf-8")
    page.locator('input[type="file"]').set_input_files(str(gaps))
    page.get_by_text("line 3 (no de)").wait_for(timeout=60_000)
    wait_until_idle(page, 60)
    compute.click()
    page.get_by_text("2 × 3").wait_for(timeout=60_000)
    page.screenshot(path=str(artifacts / "align-upload-with-gaps.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert not problems, problems
    page.close()


def test_align_page_on_the_udhr(browser, app_url, artifacts):
    """The UDHR on bundled-multilingual: 25 versions against English behind the button; every version
    grouped by script, the layer curve, the best and worst aligned."""
    page, problems = open_page(browser, f"{app_url}/align?data=udhr", height=2600)
    page.get_by_text("Press Align the UDHR").wait_for(timeout=240_000)  # nothing costly on arrival
    page.get_by_role("button", name="Align the UDHR").click()
    page.get_by_text("grouped by script").wait_for(timeout=300_000)
    page.get_by_text("Best aligned", exact=True).wait_for(timeout=60_000)
    body = page.inner_text("body")
    assert "Versions against English" in body and "Worst aligned" in body
    page.screenshot(path=str(artifacts / "align-udhr.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert not problems, problems
    page.close()


def test_syntax_tab_trees_and_treebank_labels(browser, tiny_bert_dir, tmp_path, artifacts):
    """The Probes page's Syntax tab (a small random BERT, so the treebank's states take seconds): the
    structural probes by layer, a test sentence's gold and predicted trees, a typed sentence's tree,
    then the dependency-label probe beside its control."""
    with running_app(tmp_path / "server.log", model=str(tiny_bert_dir)) as url:
        page, problems = open_page(browser, f"{url}/probes?probe_tab=Syntax", height=1600)
        page.get_by_role("button", name="Train the probes at every layer").click(timeout=60_000)
        page.get_by_text("against the chain's", exact=False).wait_for(timeout=300_000)
        page.get_by_text("Your sentence, through the probe at", exact=False).wait_for(timeout=60_000)
        box = page.get_by_label("A sentence (words and punctuation", exact=False)
        box.fill("The dog chased the cat across the garden .")
        box.press("Enter")
        wait_until_idle(page, 120)
        page.get_by_text("The probe's tree at ", exact=False).first.wait_for(timeout=60_000)
        page.get_by_text("Labels on the same treebank").scroll_into_view_if_needed(timeout=30_000)
        page.get_by_text("each arc's dependency label, from", exact=False).click()
        page.get_by_role("button", name="Probe every layer", exact=True).click()
        page.get_by_text("ewt-deprel: best at", exact=False).wait_for(timeout=300_000)
        wait_until_idle(page, 120)
        page.screenshot(path=str(artifacts / "probes-syntax.png"), full_page=True)
        body = page.inner_text("body")
        assert "Download this sentence's trees (JSON)" in body and "Download this tree (JSON)" in body
        assert not page.locator(".stException").count()
        assert not problems, problems
        page.close()


def test_erasure_tab_on_bundled_mlm(browser, app_url, artifacts, server_log):
    """The Probes page's tab "Does the model use it?" on the default model (real weights, real EWT text):
    LEACE at the middle layer, the chart against the control, the table, the later layers, the masked LM
    by tag and the words whose prediction changed most."""
    page, problems = open_page(browser, f"{app_url}/probes?probe_tab=Does+the+model+use+it%3F", height=3200)
    page.get_by_text("Press *Erase and measure*", exact=False).or_(
        page.get_by_text("Press Erase and measure", exact=False)).first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Erase and measure").click(timeout=60_000)
    page.get_by_text("Read each change against the control", exact=False).wait_for(timeout=400_000)
    page.get_by_text("The words whose masked prediction changed most", exact=False).wait_for(timeout=60_000)
    wait_until_idle(page, 120)
    page.screenshot(path=str(artifacts / "probes-erasure.png"), full_page=True)
    (artifacts / "pages").mkdir(exist_ok=True)  # the form, the chart and the table: the docs' picture
    page.screenshot(path=str(artifacts / "pages" / "probes-erasure.png"), clip=dict(x=300, y=380, width=1100, height=1370))
    body = page.inner_text("body")
    assert "Can the later layers read it again?" in body and "Masked-LM top-1 by gold label" in body
    assert "Download (JSON)" in body
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_das_tab_on_bundled_mlm(browser, app_url, artifacts, server_log):
    """Interventions → Causal variables (DAS) on bundled-mlm: agreement at layer 1 (the whole search of every layer
    is the AppTest's and the benchmark's: 40 s more here), the controls' bars, the table and the JSON; the map waits
    for its own button."""
    page, problems = open_page(browser, f"{app_url}/interventions?model=bundled-mlm&int_tab=Causal+variables+%28DAS%29",
                               height=2400)
    page.get_by_text("Press *Search*", exact=False).or_(page.get_by_text("Press Search", exact=False)).first.wait_for(
        timeout=120_000)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Layer").click()
    page.get_by_role("option", name="1", exact=True).click()
    page.get_by_role("button", name="Search").click(timeout=60_000)
    page.get_by_text("IIA is the share of held-out pairs", exact=False).wait_for(timeout=400_000)
    wait_until_idle(page, 120)
    page.screenshot(path=str(artifacts / "interventions-das.png"), full_page=True)
    body = page.inner_text("body")
    assert "random rotation" in body and "Download (JSON)" in body and "Map every layer" in body
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_tcav_tab_on_bundled_mlm(browser, app_url, artifacts, server_log):
    """Probes → Concepts (TCAV) on bundled-mlm: the example concept "water" for "river", 20 random sets on Brown
    sentences, the chart with the verdicts and the table."""
    page, problems = open_page(browser, f"{app_url}/probes?model=bundled-mlm&probe_tab=Concepts+%28TCAV%29",
                               height=2400)
    page.get_by_text("Press *Test the concept*", exact=False).or_(
        page.get_by_text("Press Test the concept", exact=False)).first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Test the concept").click(timeout=60_000)
    page.get_by_text("Significant at:", exact=False).wait_for(timeout=400_000)
    wait_until_idle(page, 120)
    page.screenshot(path=str(artifacts / "probes-tcav.png"), full_page=True)
    body = page.inner_text("body")
    assert "random CAVs" in body and "Download (JSON)" in body
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_latents_tab_on_the_shipped_upos_pair(browser, app_url, artifacts, server_log):
    """Compare → Latents with bundled (A) and bundled-upos (B): the shipped crosscoder read on held-out text, the
    histogram, the causal check's table and the fine-tuned-only latents."""
    page, problems = open_page(browser, f"{app_url}/compare?model=bundled&b=bundled-upos&cmp_tab=Latents", height=3000)
    page.get_by_text("Press *Read the crosscoder*", exact=False).or_(
        page.get_by_text("Press Read the crosscoder", exact=False)).first.wait_for(timeout=120_000)
    page.get_by_role("button", name="Read the crosscoder").click(timeout=60_000)
    page.get_by_text("The causal check", exact=False).first.wait_for(timeout=400_000)
    page.get_by_text("fine-tuned-only latents", exact=False).first.wait_for(timeout=60_000)
    wait_until_idle(page, 120)
    page.wait_for_timeout(3000)  # the tables' canvases paint a moment after the page is idle
    page.screenshot(path=str(artifacts / "compare-latents.png"), full_page=True)
    body = page.inner_text("body")
    assert "latents by relative decoder norm" in body and "Look up a latent" in body and "Download (JSON)" in body
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_costly_tabs_wait_for_their_buttons(browser, tmp_path, artifacts):
    """On a fresh cache (nothing kept from earlier tests), the three places that used to compute for minutes
    on opening (cross-lingual: 945 texts at every layer; Compare → Heads: every attention map of 100
    sentences in two models; Embedding shift → Brown: 2,000 sentences) do nothing costly until their button:
    the page settles, shows a line that names the button, and no progress bar."""
    from bertscope.runtime.user_cache import user_cache_dir

    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "corpora").symlink_to(user_cache_dir() / "corpora")  # the installed corpora, read only
    with running_app(tmp_path / "server.log", cache=tmp_path / "cache") as url:
        for path, tab, prompt in (("align", None, "Press Compute"), ("compare", "Heads", "Press Compare heads"),
                                  ("shift", "In the Brown corpus", "Press Index the Brown sample")):
            page, problems = open_page(browser, f"{url}/{path}", height=1200)
            page.locator('[data-testid="stMain"] h1').first.wait_for(timeout=120_000)
            wait_until_idle(page, 120)
            if tab:
                page.get_by_role("tab", name=tab).click()
            page.get_by_text(prompt, exact=False).first.wait_for(timeout=120_000)
            wait_until_idle(page, 60)
            assert not page.locator('[data-testid="stProgress"]').count(), path
            page.screenshot(path=str(artifacts / f"waits-{path}.png"), full_page=True)
            assert not page.locator(".stException").count() and not problems, (path, problems)
            page.close()


def test_a_shared_link_reproduces_the_view(browser, app_url, artifacts):
    page, problems = open_page(browser, f"{app_url}/attention?text=The%20bank%20of%20the%20river.&layer=2&head=5")
    page.get_by_text("Layer 2, head 5").first.wait_for(timeout=60_000)
    assert "The bank of the river." in page.locator("textarea").first.input_value()
    assert "layer=2" in page.url and "head=5" in page.url
    page.screenshot(path=str(artifacts / "attention-from-link.png"), full_page=True)
    assert not problems, problems
    page.close()


def alert_text(page, kind: str = "Error") -> str:
    alert = page.locator(f'[data-testid="stAlertContent{kind}"]').first
    alert.wait_for(timeout=60_000)
    return alert.inner_text()


def run_attention(page, text: str) -> None:
    page.get_by_label("Sentence (segment A)").fill(text)
    page.get_by_role("button", name="Run", exact=True).click()


def upload_bad_file(page, url: str, ready: str, path, content: str) -> None:
    """Open ``url``, wait until ``ready`` shows, then upload ``content`` as ``path``."""
    page.goto(url)
    page.get_by_text(ready).wait_for(timeout=240_000)
    path.write_text(content, encoding="utf-8")
    page.locator('input[type="file"]').set_input_files(str(path))


def test_bad_inputs_in_the_browser(browser, app_url, gpt2_dir, tmp_path, artifacts):
    """Each bad input gives one visible line; the app keeps working for this user and others."""
    page, problems = open_page(browser, f"{app_url}/attention", height=1400)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    # 1. empty text
    run_attention(page, "   ")
    assert "empty" in alert_text(page) and "\n" not in alert_text(page)
    # 2. 20,000 characters: truncated, with one warning
    run_attention(page, "word " * 4000)
    assert "only the first 512" in alert_text(page, "Warning")
    # 3. emoji and right-to-left scripts: no error, the view is drawn
    run_attention(page, "مرحبا بالعالم 👋 שלום עולם")
    page.get_by_text("[UNK]", exact=True).first.wait_for(state="attached", timeout=60_000)  # the emoji
    assert not page.locator('[data-testid="stAlertContentError"]').count()
    # 4. HTML and script text is shown, never run or rendered
    run_attention(page, '<script>alert("x")</script><b id="injected">bold</b> <img src=x onerror=alert(1)>')
    page.get_by_text("script", exact=True).first.wait_for(state="attached", timeout=60_000)  # a token
    page.wait_for_timeout(1000)  # give any injected script time to fire
    assert not dialogs and not page.locator("#injected").count()
    assert not page.get_by_text("&quot;").count() and not page.get_by_text("&lt;").count()  # shown as typed
    page.screenshot(path=str(artifacts / "bad-input-html.png"), full_page=True)
    # 5. a link value that does not fit
    page.goto(f"{app_url}/attention?layer=99&head=x")
    assert "layer=99" in alert_text(page, "Warning")
    # 6-7. an unknown model id and a model that is not an encoder
    for name, message in (("nobody-xyz/no-such-model", "hub is unreachable"),
                          (str(gpt2_dir), "not a BERT-family encoder")):
        page.goto(app_url)
        page.get_by_text("Heads per layer").wait_for(timeout=60_000)  # the default model's card
        pick_model(page, "Other (hub id or local folder)…")
        box = page.get_by_label("Hub id or local folder")
        box.fill(name)
        box.press("Enter")
        text = alert_text(page)
        assert message in text and "\n" not in text
    # 8. a malformed upload, 9. a word that is in no sentence (embedding shift)
    upload_bad_file(page, f"{app_url}/shift", "occurrences of", tmp_path / "bad.csv", "text,sense\na bank,river\n")
    assert "'sentence' column" in alert_text(page)
    page.goto(f"{app_url}/shift")
    page.get_by_text("occurrences of").wait_for(timeout=120_000)
    page.locator('[data-testid="stSelectbox"]').filter(has_text="Word").click()
    page.get_by_role("option", name="Your own word…").click()
    target = page.get_by_label("Target word")
    target.fill("zebra")
    target.press("Enter")
    page.get_by_text("Add sentences that contain", exact=False).wait_for(timeout=60_000)
    assert "Add sentences that contain “zebra”" in alert_text(page, "Info")  # a new word asks first
    page.get_by_role("button", name="Compare").click()  # pressed anyway: one line
    assert "No sentence contains" in alert_text(page)
    # 10. a parallel file that is comma-separated (cross-lingual page)
    # (ready once the uploader is drawn: the vectors computed on arrival only when an earlier test left them on disk)
    upload_bad_file(page, f"{app_url}/align", "Or upload a TSV", tmp_path / "bad.tsv", "en,de\nhello,Hallo\n")
    assert "comma-separated" in alert_text(page)
    # the app still works for this user...
    page.goto(app_url)
    page.get_by_text("Heads per layer").wait_for(timeout=60_000)
    # ...and for another session at the same time
    other, other_problems = open_page(browser, f"{app_url}/params")
    other.get_by_text("22,713,216").first.wait_for(timeout=60_000)
    assert not page.locator(".stException").count() and not other.locator(".stException").count()
    assert not problems and not other_problems, problems + other_problems
    other.close()
    page.close()


def test_attention_page_at_512_tokens_on_bert_base(browser, random_base_dir, tmp_path, artifacts):
    """A BERT-base-sized model and a text past 512 tokens: the Head tab, then every head of a
    layer, drawn from compact arrays (uint16 heatmaps) with the truncation said."""
    import urllib.parse

    from tests.conftest import LONG_TEXT

    with running_app(tmp_path / "server.log", model=str(random_base_dir)) as url:
        page, problems = open_page(browser, f"{url}/attention?{urllib.parse.urlencode({'text': LONG_TEXT})}", 1400)
        page.locator(".js-plotly-plot").first.wait_for(timeout=180_000)
        assert "only the first 512" in page.inner_text("body")
        page.screenshot(path=str(artifacts / "attention-512-head.png"), full_page=True)
        page.get_by_role("tab", name="All heads of the layer").click()
        page.get_by_text("all 12 heads", exact=False).first.wait_for(state="attached", timeout=180_000)
        page.wait_for_timeout(1000)
        assert not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "attention-512-grid.png"), full_page=True)
        assert not problems, problems
        page.close()


def test_probe_trained_here_is_tested_on_an_uploaded_file(browser, app_url, tmp_path, artifacts):
    """Train on a shipped task, score on the user's file (issue: train here, test there)."""
    test_file = tmp_path / "my_questions.csv"
    test_file.write_text("sentence,label\nIs the river deep?,question\nThe river is deep.,statement\n"
                         "Did she sell the boat?,question\nShe sold the boat.,statement\n")
    page, problems = open_page(browser, f"{app_url}/probes?task=question", height=1600)
    page.get_by_role("button", name="Extract and probe every layer").wait_for(timeout=60_000)
    page.locator('[data-testid="stFileUploader"]').nth(1).locator("input[type=file]").set_input_files(str(test_file))
    page.get_by_text("my_questions.csv").wait_for(timeout=30_000)
    page.get_by_role("button", name="Extract and probe every layer").click()
    page.get_by_text("Your test file:", exact=False).wait_for(timeout=180_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    page.get_by_text("Majority baseline").wait_for(timeout=30_000)
    assert "over the layers" in page.inner_text("body") and not page.locator(".stException").count()
    page.screenshot(path=str(artifacts / "probes-test-file.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_pretraining_page_trains_bundled_live(browser, app_url, artifacts):
    page, problems = open_page(browser, f"{app_url}/pretrain", height=1500)
    page.get_by_role("button", name="Train bundled").wait_for(timeout=60_000)
    chunks = page.get_by_label("Chunks to train on", exact=False)
    chunks.fill("48")  # three steps of 16: the page measures the pace after the first
    chunks.press("Tab")
    page.get_by_text("+ next-sentence prediction (BERT)").click()
    page.get_by_role("button", name="Train bundled").click()
    page.get_by_text("step", exact=False).first.wait_for(timeout=60_000)  # the live progress line
    page.get_by_text("left (held-out scoring", exact=False).wait_for(timeout=300_000)  # the pace, measured
    page.screenshot(path=str(artifacts / "pretraining-running.png"), full_page=True)
    page.get_by_text("Predictions before and after").wait_for(timeout=300_000)
    page.locator('[data-testid="stMetricLabel"]').get_by_text("Held-out top-1").wait_for(timeout=30_000)
    page.locator('[data-testid="stMetricLabel"]').get_by_text("Held-out NSP accuracy").wait_for(timeout=30_000)
    assert not page.locator(".stException").count()
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts / "pretraining.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_a_long_job_shows_it_runs_and_stops_on_request(browser, app_url, artifacts):
    """Head statistics over 500 Brown sentences: the header shows Streamlit's running indicator,
    the job's own Stop interrupts it, nothing half-done is kept, and the page stays usable."""
    page, problems = open_page(browser, f"{app_url}/attention?att_tab=Head+statistics", height=1300)
    panel = page.get_by_role("tabpanel", name="Head statistics")
    panel.get_by_text("Brown corpus (all 15 genres)").click(timeout=180_000)
    panel.get_by_role("button", name="Compute head statistics").click()
    stop = page.get_by_test_id("stButton").get_by_role("button", name="Stop")
    stop.wait_for(timeout=120_000)
    page.get_by_test_id("stStatusWidget").wait_for(timeout=30_000)  # "running" in the header while the page works
    page.screenshot(path=str(artifacts / "attention-head-stats-running.png"))
    stop.click()
    page.get_by_text("Stopped (running the corpus through the model)", exact=False).wait_for(timeout=60_000)
    page.get_by_role("button", name="Run it again").wait_for(timeout=30_000)  # drawn right after the notice
    page.screenshot(path=str(artifacts / "attention-head-stats-stopped.png"))
    page.get_by_role("tab", name="Head", exact=True).click()  # the rest of the page still works
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)
    assert not page.locator(".stException").count()
    assert not problems, problems
    page.close()


@pytest.mark.parametrize("width", [1280, 1400])
def test_bertviz_model_view_fits_its_frame(browser, app_url, artifacts, width):
    """bertviz draws the model view 978 px wide; in a narrower frame the page scales itself, so
    the last head is never cut off."""
    page = browser.new_page(viewport={"width": width, "height": 1300})
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    block_outside(page, problems)
    page.goto(f"{app_url}/attention?att_tab=bertviz+model+view", wait_until="domcontentloaded")
    frame = page.locator("iframe").first
    frame.wait_for(timeout=180_000)
    frame.content_frame.locator("svg").first.wait_for(timeout=60_000)
    page.wait_for_function("() => { const d = document.querySelector('iframe').contentDocument;"
                           " return d && d.body && d.body.style.zoom !== '' || d.documentElement.scrollWidth"
                           " <= d.defaultView.innerWidth; }", timeout=30_000)
    frame_width, drawn = page.evaluate(
        "() => { const f = document.querySelector('iframe'), d = f.contentDocument;"
        " const zoom = parseFloat(d.body.style.zoom) || 1;"
        " return [f.clientWidth, Math.max(...[...d.querySelectorAll('svg')].map(s => s.getBoundingClientRect().right))"
        " * zoom]; }")
    assert drawn <= frame_width, (drawn, frame_width)
    page.screenshot(path=str(artifacts / f"attention-bertviz-model-{width}.png"), full_page=True)
    assert not problems, problems
    page.close()


def test_interventions_page_on_bundled_mlm(browser, app_url, artifacts):
    """Click two heads on the board, read the predictions before and after; patch the
    subject-verb example and see both grids."""
    page, problems = open_page(browser, f"{app_url}/interventions", height=1400)
    panel = page.get_by_role("tabpanel", name="Ablate heads")
    layers, heads = 6, 12
    for layer, head, picked in ((3, 1, "1 head(s) removed (zero): 3:1"), (4, 3, "2 head(s) removed (zero): 3:1, 4:3")):
        # each click redraws the grid under a new key: click only the grid of a finished run, found afresh
        area = panel.locator(".nsewdrag").first
        area.wait_for(timeout=120_000)
        wait_until_idle(page, 120)
        box = area.bounding_box()
        page.mouse.click(box["x"] + (head + 0.5) / heads * box["width"], box["y"] + (layer + 0.5) / layers * box["height"])
        page.wait_for_url(f"**{layer}%3A{head}**", timeout=30_000)
        wait_until_idle(page, 120)
        assert panel.get_by_text(picked).count(), (page.url, picked)
    panel.get_by_text("Mask at token 6").wait_for(timeout=60_000)  # drawn just after the line above
    page.screenshot(path=str(artifacts / "interventions-ablate.png"), full_page=True)
    page.get_by_role("tab", name="Patching").click()
    patch = page.get_by_role("tabpanel", name="Patching")
    patch.get_by_role("button", name="Patch").click()
    patch.get_by_text("Recovered fraction when each head's context").wait_for(timeout=180_000)
    wait_until_idle(page, 120)  # the rerun that drew both grids done: no copy of the tab from before it is read
    patch.get_by_text("Difference to recover").wait_for(timeout=60_000)
    body = page.inner_text("body")
    assert "Difference to recover" in body and "2: men→man" in body
    page.screenshot(path=str(artifacts / "interventions-patching.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert not problems, problems
    page.close()


def test_features_page_on_bundled_mlm(browser, app_url, artifacts):
    """The shipped SAE of layer 2: the features on the default sentence, the strongest one opened, Brown
    indexed behind its button, the feature's contexts and label; then it is switched off on the
    Interventions page."""
    page, problems = open_page(browser, f"{app_url}/features", height=1400)
    page.get_by_text("fire hardest on this text").wait_for(timeout=120_000)
    body = page.inner_text("body")
    assert "3,072 features" in body and "of the masked-LM loss recovered" in body
    page.screenshot(path=str(artifacts / "features-text.png"), full_page=True)
    page.get_by_role("button", name="Open this feature").click()
    feature_panel = page.get_by_role("tabpanel", name="Feature")
    feature_panel.get_by_text("Tokens it promotes and suppresses").wait_for(timeout=60_000)
    feature = urllib.parse.parse_qs(urllib.parse.urlparse(page.url).query)["feature"][0]
    assert f"?layer=2&feature={feature}&feat_tab=Feature" in page.inner_text("body")
    feature_panel.get_by_text("Press Index the corpus").wait_for(timeout=30_000)  # nothing costly unasked
    feature_panel.get_by_role("button", name="Index the corpus").click()
    feature_panel.get_by_text("Top contexts").wait_for(timeout=240_000)
    wait_until_idle(page, 120)
    page.screenshot(path=str(artifacts / "features-feature.png"), full_page=True)
    body = page.inner_text("body")
    assert "Fires on" in body and "Best gold-tag label" in body and "firings of" in body
    assert page.locator("mark").count() or "It never fires on these sentences" in body  # pieces highlighted
    other, other_problems = open_page(browser, f"{app_url}/interventions?int_tab=Features&flayer=2&feature={feature}",
                                      height=1400)
    other.get_by_text("feature switched off").first.wait_for(timeout=120_000)
    other.get_by_text("Its label from the Features page's statistics").wait_for(timeout=30_000)
    other.screenshot(path=str(artifacts / "interventions-features.png"), full_page=True)
    assert not page.locator(".stException").count() and not other.locator(".stException").count()
    assert not problems and not other_problems, (problems, other_problems)
    page.close()
    other.close()


def test_faithfulness_page_on_bundled_mlm(browser, app_url, artifacts):
    """Run the test on ten Brown sentences: the table with intervals, the bars, the curves, and a
    disagreeing item that opens on the Masked page's *Why this prediction?*."""
    page, problems = open_page(browser, f"{app_url}/faithfulness?n=10&methods=attention,alti,valuezeroing,grad,"
                                        "random&steps=8", height=1500)
    page.get_by_text("Where the methods disagree most").wait_for(timeout=300_000)  # a link runs on arrival
    page.locator(".js-plotly-plot").nth(2).wait_for(timeout=60_000)
    body = page.inner_text("body")
    assert "10 items (10 Brown sentences)" in body and "random floor" in body
    page.screenshot(path=str(artifacts / "faithfulness.png"), full_page=True)
    href = page.locator('a[href*="mlm_tab=Why"]').first.get_attribute("href")  # the most disagreeing item
    query = urllib.parse.parse_qs(urllib.parse.urlparse(href).query)
    assert "[MASK]" in query["text"][0] and query["model"] == ["bundled-mlm"]
    other, other_problems = open_page(browser, f"{app_url}/masked?{urllib.parse.urlparse(href).query}", height=1400)
    other.get_by_text("Agreement between methods").wait_for(timeout=180_000)
    assert other.get_by_role("tab", name="Why this prediction?").get_attribute("aria-selected") == "true"
    other.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)  # the agreement table
    other.screenshot(path=str(artifacts / "faithfulness-opened.png"), full_page=True)
    assert not page.locator(".stException").count() and not other.locator(".stException").count()
    assert not problems and not other_problems, (problems, other_problems)
    page.close()
    other.close()


def test_compare_page_bundled_against_bundled_mlm(browser, app_url, artifacts):
    """The sidebar's bundled-mlm against bundled over 100 Brown sentences: the CKA heatmap with
    both layer axes named; then both models' predictions (bundled has no head: one line)."""
    page, problems = open_page(browser, f"{app_url}/compare", height=1300)
    page.get_by_role("button", name="Compare").wait_for(timeout=120_000)
    page.get_by_text("Press Compare", exact=False).wait_for(timeout=30_000)  # nothing costly on arrival
    page.goto(f"{app_url}/compare?n=100")  # a link compares on arrival
    page.get_by_text("Same depth: CKA", exact=False).wait_for(timeout=240_000)
    plot = page.locator(".js-plotly-plot").first
    assert plot.locator(".xtitle").text_content() == "bundled (B): hidden state"
    assert plot.locator(".ytitle").text_content() == "bundled-mlm (A): hidden state"
    page.screenshot(path=str(artifacts / "compare.png"), full_page=True)
    page.get_by_role("tab", name="Heads").click()
    page.get_by_role("button", name="Compare heads").click(timeout=60_000)  # nothing runs on opening the tab
    page.get_by_text("heads of A are closest to the same head of B", exact=False).wait_for(timeout=180_000)
    page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)  # heads matched elsewhere
    page.screenshot(path=str(artifacts / "compare-heads.png"), full_page=True)
    page.get_by_role("tab", name="Predictions").click()
    page.get_by_text("no masked-LM head", exact=False).wait_for(timeout=60_000)
    assert not page.locator(".stException").count()
    assert not problems, problems
    page.close()


def test_query_and_key_tab(browser, app_url, artifacts):
    """The neuron view on the default model: q, q ⊙ k of the top keys, the weights, and the gap to
    the model's own attention row stated."""
    page, problems = open_page(browser, f"{app_url}/attention?att_tab=Query+and+key&layer=2&head=3&q=2", height=1200)
    page.get_by_text("model's own attention row", exact=False).wait_for(timeout=120_000)
    page.locator(".js-plotly-plot").first.wait_for(timeout=60_000)  # drawn after the text
    page.screenshot(path=str(artifacts / "attention-query-key.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert not problems, problems
    page.close()


def test_interventions_page_at_512_tokens_on_bert_base(browser, random_base_dir, tmp_path, artifacts):
    """A BERT-base-sized model and inputs of about 500 tokens: ablation answers, patching the
    changed word and the mask shows its progress, and the long head grid can be stopped."""
    import urllib.parse

    sentence = "the bank of the river was muddy after the storm , and the boats stayed in . "
    clean = sentence * 28 + "the bank of the river was [MASK] after the storm ."
    corrupt = clean.replace("river", "money", 1)
    query = urllib.parse.urlencode({"int_tab": "Patching", "clean": clean, "corrupt": corrupt, "a": "muddy",
                                    "b": "steep", "pos": "changed", "heads": "3:7"})
    with running_app(tmp_path / "server.log", model=str(random_base_dir)) as url:
        page, problems = open_page(browser, f"{url}/interventions?{query}", 1400)
        patch = page.get_by_role("tabpanel", name="Patching")  # the link opens it and patches on arrival
        patch.get_by_text("Patching hidden states, cells", exact=False).wait_for(timeout=180_000)  # its progress
        patch.get_by_text("Recovered fraction when each hidden state").wait_for(timeout=300_000)
        stop = page.get_by_test_id("stButton").get_by_role("button", name="Stop")
        patch.get_by_text("Patching heads, cells", exact=False).wait_for(timeout=60_000)
        page.screenshot(path=str(artifacts / "interventions-512-patching.png"), full_page=True)
        stop.click()
        page.get_by_text("Stopped (patching heads", exact=False).wait_for(timeout=120_000)
        page.get_by_role("tab", name="Ablate heads").click()
        page.get_by_text("1 head(s) removed (zero): 3:7").wait_for(timeout=180_000)
        assert not page.locator(".stException").count()
        assert not problems, problems
        page.close()


PAGE_PATHS = [page.url_path for page in PAGES]  # the app's one list of pages


def wait_until_idle(page, timeout_s: float = 180) -> None:
    """Until Streamlit's running indicator has been gone for a second (the page drew itself)."""
    deadline, quiet_since = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        if page.locator('[data-testid="stStatusWidget"]').count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 1.0:
            return
        time.sleep(0.2)
    raise AssertionError(f"{page.url} kept running for {timeout_s} s")


def press_until(page, button, done, shot: Path, timeout_s: float = 400) -> None:
    """Click ``button`` and wait for ``done``. A click that started nothing (no bar and no result 30 s on, the button
    still there: it landed while the page redrew) is clicked once more; a wait that runs out leaves a screenshot
    and the page's text in the failure."""
    button.click()
    try:
        page.locator('[data-testid="stProgress"]').or_(done).first.wait_for(timeout=30_000)
    except PlaywrightTimeout:
        if button.count():
            button.click()
    try:
        done.first.wait_for(timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        page.screenshot(path=str(shot.with_suffix(".timeout.png")), full_page=True)
        raise AssertionError(f"no {done} after {timeout_s:.0f} s: {page.inner_text('body')[-2000:]}") from None


def _fits(page, path: str) -> None:
    overflow = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert overflow[0] <= overflow[1], (path, overflow)
    assert not page.locator(".stException").count(), path
    # a multiselect shows each chosen option whole (not chips scrolled out of a narrow column)
    cut = page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=\"stMultiSelectTagsContainer\"]')]"
        ".filter(c => c.scrollWidth > c.clientWidth + 1)"
        ".map(c => [...c.querySelectorAll('[data-tag]')].map(t => t.getAttribute('aria-label')).join(', '))")
    assert not cut, (path, cut)


@pytest.mark.extended  # every page at two widths (107 s); the docs' screenshots check one
def test_every_page_fits_the_window_at_1280_and_1400_px(browser, app_url, artifacts):
    """Each page as a first visitor opens it at 1400 px, then the window narrowed to 1280 (the layout is the
    browser's: narrowing reruns nothing): nothing wider than the window (no sideways scroll), no error box, no
    script error, nothing fetched from outside; a full-page screenshot at each width (test-output/width-W/PAGE.png),
    looked at by a person. One visit a page for both widths (two visits cost 70 s more)."""
    folders = {width: artifacts / f"width-{width}" for width in (1400, 1280)}
    for folder in folders.values():
        folder.mkdir(exist_ok=True)
    for path in PAGE_PATHS:
        page = browser.new_page(viewport={"width": 1400, "height": 1200})
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        block_outside(page, problems)
        page.goto(f"{app_url}/{path}", wait_until="domcontentloaded")
        page.locator('[data-testid="stMain"] h1').first.wait_for(timeout=120_000)
        wait_until_idle(page)
        for width, folder in folders.items():
            if width != 1400:
                page.set_viewport_size({"width": width, "height": 1200})
                page.wait_for_timeout(500)  # the layout and the charts' resize handlers settle
                wait_until_idle(page)
            _fits(page, path)
            page.screenshot(path=str(folder / f"{path or 'home'}.png"), full_page=True)
        assert not problems, (path, problems)
        page.close()


def test_predictions_page_on_a_classifier_and_a_tagger_of_the_bundled_encoder(browser, tmp_path, artifacts):
    """The bundled encoder under seeded task heads (saved as fine-tuned checkpoints are): the
    classifier's bars, then a labelled CSV uploaded and scored; the tagger's marked entities."""
    from bertscope.sources.resolve import resolve_source
    from tests.conftest import labels, task_checkpoint

    base = Path(resolve_source("bundled")[0])
    classifier = task_checkpoint(base, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=3,
                                 **labels(["negative", "neutral", "positive"]))
    records = tmp_path / "records.csv"
    records.write_text("text,label\n" + "".join(f'"{t}",{g}\n' for t, g in [
        ("What a wonderful day at the beach.", "positive"), ("The service was slow and rude.", "negative"),
        ("The meeting is at ten.", "neutral"), ("I loved every minute of it.", "positive"),
        ("This is the worst film of the year.", "negative"), ("The train leaves from platform two.", "neutral")]))
    with running_app(tmp_path / "server.log", model=str(classifier)) as url:
        page, problems = open_page(browser, f"{url}/predictions", 1400)
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        assert "sequence classification (3 labels: negative, neutral, positive)" in page.inner_text("body")
        page.locator('input[type="file"]').set_input_files(str(records))
        page.get_by_role("button", name="Score the file").click()
        page.get_by_text("Macro-F1").first.wait_for(timeout=120_000)
        page.get_by_text("Confusion matrix (6 records)").first.wait_for(state="attached", timeout=60_000)
        wait_until_idle(page)
        assert "Misclassified" in page.inner_text("body") and not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "predictions-classifier.png"), full_page=True)
        assert not problems, problems
        page.close()
    tagger = task_checkpoint(base, tmp_path / "tag", "AutoModelForTokenClassification", 6, num_labels=5,
                             **labels(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]))
    with running_app(tmp_path / "server-tagger.log", model=str(tagger)) as url:
        page, problems = open_page(browser, f"{url}/predictions", 1200)
        page.locator("mark").first.wait_for(timeout=120_000)
        wait_until_idle(page)
        assert not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "predictions-tagger.png"), full_page=True)
        assert not problems, problems
        page.close()



def test_shipped_task_models_and_the_fine_tuning_page(browser, tmp_path, artifacts):
    """bundled-sentiment's decision on the Predictions page, bundled-upos's tags, and the
    Fine-tuning page with the Table 7 answer opened."""
    with running_app(tmp_path / "server.log", model="bundled-sentiment") as url:
        page, problems = open_page(browser, f"{url}/predictions?text=The+crew+was+wonderful+and+the+flight+early%21",
                                   1400)
        page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
        wait_until_idle(page)
        body = page.inner_text("body")
        assert "3 labels: negative, neutral, positive" in body and not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "predictions-bundled-sentiment.png"), full_page=True)
        page.close()
        page, more = open_page(browser, f"{url}/finetune", 1400)
        page.get_by_text("Feature-based or fine-tuned?").first.click()
        page.get_by_text("weighted sum of every state (learned)").first.wait_for(state="attached", timeout=60_000)
        wait_until_idle(page)
        assert not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "finetune.png"), full_page=True)
        assert not problems and not more, problems + more
        page.close()
    with running_app(tmp_path / "server-upos.log", model="bundled-upos") as url:
        page, problems = open_page(browser, f"{url}/predictions?text=The+old+dog+slept+under+the+table.", 1200)
        page.get_by_text("NOUN").first.wait_for(timeout=120_000)
        wait_until_idle(page)
        assert not page.locator(".stException").count()
        page.screenshot(path=str(artifacts / "predictions-bundled-upos.png"), full_page=True)
        assert not problems, problems
        page.close()


def test_a_squad_run_on_the_fine_tuning_page(browser, tiny_bert_dir, tmp_path, artifacts):
    """BERT's span task in the browser: SQuAD chosen, small budgets set by keyboard, batches by length,
    the run trained in the background, exact match and F1 with the worst-answered questions drawn, and
    the model opened on the Predictions page as a question answerer."""
    with running_app(tmp_path / "server.log", model=str(tiny_bert_dir)) as url:
        page, problems = open_page(browser, f"{url}/finetune", 1400)
        page.get_by_text("SQuAD v1.1 questions (answer spans)").first.click()
        sliders = page.get_by_role("slider")
        sliders.nth(0).focus()
        page.keyboard.press("Home")  # 256 training questions
        sliders.nth(1).focus()
        page.keyboard.press("Home")  # 256 held-out questions
        by_length = page.locator("label", has_text="Batch inputs of like length")
        by_length.click()
        assert by_length.locator("input").is_checked()
        page.get_by_role("button", name=f"Fine-tune {tiny_bert_dir}").click()
        page.get_by_text("Held-out questions answered worst").first.wait_for(timeout=300_000)
        wait_until_idle(page)
        body = page.inner_text("body")
        assert "Held-out exact match" in body and "Held-out F1" in body and not page.locator(".stException").count()
        assert "256 training and 256 held-out questions" in body
        page.screenshot(path=str(artifacts / "finetune-squad.png"), full_page=True)
        page.get_by_role("button", name="Open it on the Predictions page").click()
        page.get_by_text("The three best spans").first.wait_for(timeout=120_000)
        wait_until_idle(page)
        assert not page.locator(".stException").count() and "Where was the corpus compiled?" in page.content()
        page.screenshot(path=str(artifacts / "predictions-squad-run.png"), full_page=True)
        assert not problems, problems
        page.close()


def test_every_page_for_the_docs(browser, app_url, artifacts):
    """Every page opened as a first visitor sees it, on the default model, a viewport's worth: the screenshots
    the documentation shows (``make docs-screens`` copies them into docs/assets/screens/)."""
    shots = artifacts / "pages"
    shots.mkdir(exist_ok=True)
    for entry in PAGES:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        problems: list[str] = []
        page.on("pageerror", lambda exc: problems.append(str(exc)))
        block_outside(page, problems)
        page.goto(f"{app_url}/{entry.url_path}", wait_until="domcontentloaded")
        page.locator('[data-testid="stMain"] h1').first.wait_for(timeout=120_000)
        wait_until_idle(page, 90)  # the script ran to its end: every element it drew is in the page
        for chart in page.locator('[data-testid="stPlotlyChart"]:visible').all():  # a chart draws itself after
            chart.locator(".js-plotly-plot").first.wait_for(state="visible", timeout=10_000)  # the script
        page.wait_for_timeout(1000)  # tables' canvases and fonts paint a moment after
        assert "Traceback" not in page.inner_text("body"), entry.title
        page.screenshot(path=str(shots / f"{entry.url_path or 'home'}.png"))
        assert not problems, (entry.title, problems)
        page.close()


def test_circuits_page_on_bundled_mlm(browser, app_url, artifacts, server_log):
    """The Circuits page on the default model and its gender task: EAP over every edge, the circuit drawn layer
    by layer, the faithfulness curve beside random circuits, the strongest edges, a head to open on Attention."""
    page, problems = open_page(browser, f"{app_url}/circuits?method=eap", height=2600)
    page.get_by_text("Press *Find the circuit*", exact=False).or_(
        page.get_by_text("Press Find the circuit", exact=False)).first.wait_for(timeout=60_000)
    page.get_by_role("button", name="Find the circuit").click(timeout=60_000)
    page.get_by_text("The strongest edges of the circuit", exact=False).wait_for(timeout=400_000)
    wait_until_idle(page, 120)
    page.screenshot(path=str(artifacts / "circuits-run.png"), full_page=True)
    (artifacts / "pages").mkdir(exist_ok=True)  # the metrics, the drawn circuit and the curve: the docs' picture
    page.screenshot(path=str(artifacts / "pages" / "circuits-run.png"), clip=dict(x=300, y=620, width=1100, height=1500))
    body = page.inner_text("body")
    assert "CPR (random)" in body and "80 % faithful at" in body and "on the Attention page" in body
    assert page.locator(".js-plotly-plot").count() >= 2
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_circuits_page_attribution_graph(browser, app_url, artifacts, server_log):
    """The Circuits page's Attribution graph tab on bundled-mlm's shipped transcoders: the graph traced, drawn layer
    by layer, its hovers' top contexts read when asked, a feature switched off in the real model beside the graph's
    prediction."""
    page, problems = open_page(browser, f"{app_url}/circuits?model=bundled-mlm&circuit_tab=Attribution+graph",
                               height=2400)
    page.get_by_role("button", name="Trace the graph").wait_for(timeout=120_000)
    page.get_by_role("button", name="Trace the graph").click()
    page.get_by_text("The model gives", exact=False).wait_for(timeout=400_000)
    wait_until_idle(page, 120)
    assert "Hover a feature" not in page.inner_text("body")  # the hovers' contexts: read when asked
    press_until(page, page.get_by_role("button", name="Add where each feature fires to its hover", exact=False),
                page.get_by_text("Hover a feature: where it fires most over", exact=False), artifacts / "circuits-hovers")
    wait_until_idle(page, 120)
    (artifacts / "pages").mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "pages" / "circuits-graph.png"), full_page=True)
    body = page.inner_text("body")
    assert "Replacement score" in body and "Completeness score" in body and "The graph predicts" in body
    assert "Its activation" in body  # steering beside the switch-off
    assert page.locator(".js-plotly-plot").count() >= 1
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_similarity_page_reranks_and_explains(browser, app_url, artifacts, server_log):
    """The Rerank tab: bundled-reranker orders the shipped passages, the first explained (integrated gradients and
    the query-passage word interactions)."""
    page, problems = open_page(browser, f"{app_url}/similarity?model=bundled&sim_tab=Rerank", height=2600)
    page.get_by_role("button", name="Rerank").wait_for(timeout=120_000)
    page.get_by_role("button", name="Rerank").click()
    page.get_by_role("button", name="Explain this passage's relevance").wait_for(timeout=240_000)
    page.get_by_role("button", name="Explain this passage's relevance").click()
    page.get_by_text("how much more the two count together", exact=False).wait_for(timeout=240_000)
    wait_until_idle(page, 120)
    (artifacts / "pages").mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "pages" / "similarity-rerank.png"), full_page=True)
    body = page.inner_text("body")
    assert "log-probability of its label relevant" in body and "Positive: the pair counts for more together" in body
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_similarity_page_terms_and_matches(browser, app_url, artifacts, server_log):
    """The Terms & matches tab on bundled: the sparse reading falls back to bundled-mlm (bundled has no masked-LM
    head) and lists the shared terms; then the token matches of bundled's own vectors."""
    page, problems = open_page(browser, f"{app_url}/similarity?model=bundled&sim_tab=Terms+%26+matches", height=2400)
    page.get_by_role("button", name="Explain the match").wait_for(timeout=120_000)
    page.get_by_role("button", name="Explain the match").click()
    page.get_by_text("strongest terms", exact=False).first.wait_for(timeout=240_000)
    wait_until_idle(page, 120)
    page.locator(".js-plotly-plot").first.wait_for(state="visible", timeout=60_000)  # the map's axis is read below
    (artifacts / "pages").mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "pages" / "similarity-terms.png"), full_page=True)
    body = page.inner_text("body")
    assert "has no masked-LM head: the sparse view reads bundled-mlm" in body and "##iad" in body  # the map's axis
    page.get_by_text("Token matches (late interaction", exact=False).click()
    page.get_by_role("button", name="Explain the match").click()
    page.get_by_text("MaxSim (sum of each query token's best match)", exact=False).wait_for(timeout=240_000)
    wait_until_idle(page, 60)
    assert "BERTScore" in page.inner_text("body")
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_similarity_page_searches_and_explains_a_hit_when_asked(browser, app_url, artifacts, server_log):
    """The Search tab on bundled: EWT's test sentences embedded once, the hits listed, a hit explained only when its
    button is pressed (a pick costs nothing), with the word-pair map."""
    page, problems = open_page(browser, f"{app_url}/similarity?model=bundled&sim_tab=Search+a+corpus", height=2600)
    page.get_by_role("button", name="Search").wait_for(timeout=120_000)
    page.get_by_text("Corpus", exact=True).wait_for(timeout=60_000)
    page.locator("[data-testid='stSelectbox']").filter(has_text="Corpus").click()
    page.get_by_role("option", name="ewt", exact=False).click()
    page.get_by_role("button", name="Search").click()
    page.get_by_text("Press *Explain this hit*".replace("*", ""), exact=False).wait_for(timeout=400_000)
    wait_until_idle(page, 120)
    assert "The strongest word pairs" not in page.inner_text("body")  # nothing explained unasked
    page.get_by_role("button", name="Explain this hit").click()
    page.get_by_text("The strongest word pairs", exact=False).wait_for(timeout=240_000)
    wait_until_idle(page, 120)
    (artifacts / "pages").mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "pages" / "similarity-search.png"), full_page=True)
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()


def test_similarity_page_explains_a_pair_on_bundled(browser, app_url, artifacts, server_log):
    """The Similarity & search page on bundled (all-MiniLM-L6-v2, its own settings read from its folder): the pair
    explained behind its button, the word-pair map and the strongest pairs; the docs' picture."""
    page, problems = open_page(browser, f"{app_url}/similarity?model=bundled", height=2200)
    page.get_by_text("The model's own embedding", exact=False).wait_for(timeout=120_000)
    page.get_by_role("button", name="Explain the similarity").click()
    page.get_by_text("The strongest word pairs", exact=False).wait_for(timeout=240_000)
    wait_until_idle(page, 120)
    (artifacts / "pages").mkdir(exist_ok=True)
    page.screenshot(path=str(artifacts / "pages" / "similarity.png"), clip=dict(x=0, y=0, width=1400, height=1500))
    body = page.inner_text("body")
    assert "mean pooling, normalised, cut at 256 tokens" in body and "bank" in body
    assert not page.locator(".stException").count()
    assert not problems, problems
    assert "Traceback" not in server_log(), server_log()[-3000:]
    page.close()
