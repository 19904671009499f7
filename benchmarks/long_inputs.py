"""Full-size inputs: what the attention views cost at 128/256/512 tokens on BERT-base and
BERT-large-sized random models, and what the app sends and keeps.

    python benchmarks/long_inputs.py [--device cuda] [--dtype float16] [--configs bert-base-uncased,...]
                                     [--texts 12] [--no-app]

Library part, per model and length: a bare Hugging Face forward with attentions (the unit),
our lean inspection (float16 attentions, no hidden states or logits: what the app keeps), each
view's build time and JSON bytes, and bertviz's page bytes (whole model, and the subset the
app's 8 MB cap admits). App part (BERT-base, CPU): ``streamlit run app.py`` on that model, one
headless chromium tab: websocket bytes and seconds until the Head tab's and the all-heads tab's
charts are drawn for a 483-token text, and the server's RSS growth after ``--texts`` distinct
~480-token texts (goal: <= +1.5 GiB for any number; the byte budget is BERTSCOPE_CACHE_MB).
Figures only; nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

import psutil
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import bare_forward, describe, random_model_dir, synchronize  # noqa: E402

MiB = 2**20
WORDS = (ROOT / "bertscope" / "data" / "attention_corpus.txt").read_text("utf-8").split()


def text_of(lm, tokens: int, offset: int = 0) -> str:
    """A text from the shipped corpus that tokenises to exactly ``tokens`` (with specials)."""
    offset %= len(WORDS)  # distinct texts for any count: wrap around the corpus
    words = WORDS[offset:] + WORDS[:offset]
    low, high = 1, len(words)
    while low < high:  # the longest prefix that fits
        mid = (low + high + 1) // 2
        n = len(lm.tokenizer(" ".join(words[:mid]))["input_ids"])
        low, high = (mid, high) if n <= tokens else (low, mid - 1)
    return " ".join(words[:low])


def timed(fn, device, repeats: int = 3):
    out = None
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        out = fn()
        synchronize(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), out


def library(args) -> None:
    from bertscope import inspect, load_model
    from bertscope.figures.attention import (
        BERTVIZ_MAX_BYTES,
        bertviz_bytes,
        bertviz_fit,
        bertviz_html,
        head_heatmap,
        layer_grid,
        token_across_layers,
    )

    print("| model | tokens | bare forward | lean inspection (kept MiB) | head view | all heads | token across layers "
          "| bertviz head, all layers (est.) | bertviz model, within 8 MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for config in args.configs.split(","):
        lm = load_model(random_model_dir(config), device=args.device, dtype=args.dtype)
        print(f"<!-- {describe(lm)} -->")
        for tokens in (128, 256, 512):
            text = text_of(lm, tokens)
            bare, _ = timed(lambda: bare_forward(lm, [text], output_attentions=True), lm.device)
            lean, r = timed(lambda: inspect(lm, text, with_logits=False, with_hidden_states=False,
                                            precision="float16"), lm.device)
            cells = []
            for build in (lambda: head_heatmap(r, 0, 0), lambda: layer_grid(r, lm.num_layers - 1),
                          lambda: token_across_layers(r, 5)):
                seconds, payload = timed(lambda: build().to_json(), "cpu")
                cells.append(f"{len(payload) / MiB:.2f} MiB, {seconds:.2f} s ({seconds / bare:.2f}x)")
            whole = bertviz_bytes(r, "head")
            layers, heads = bertviz_fit(r, "model", BERTVIZ_MAX_BYTES)
            if layers:
                page = bertviz_html(r, "model", BERTVIZ_MAX_BYTES, layers, heads)
                subset = f"{len(layers)} layers x {len(heads)} heads: {len(page) / MiB:.1f} MiB"
            else:
                subset = "refused (even 1 layer x 1 head is over the cap)"
            print(f"| {config} | {r.n_tokens} | {bare:.2f} s | {lean:.2f} s ({lean / bare:.2f}x; "
                  f"{r.attentions.nbytes / MiB:.0f}) | {cells[0]} | {cells[1]} | {cells[2]} | "
                  f"{whole / MiB:.1f} MiB | {subset} |")


def app(args) -> None:
    from playwright.sync_api import sync_playwright

    from benchmarks.server import CHROMIUM, CHROMIUM_FLAGS, running_app
    from bertscope import load_model

    folder = random_model_dir("bert-base-uncased")
    lm = load_model(folder)
    texts = [text_of(lm, 483, offset=400 * i) for i in range(args.texts + 3)]  # 2 for typing
    bare = statistics.median(timed(lambda: bare_forward(lm, [texts[0]], output_attentions=True), "cpu")[0]
                             for _ in range(1))
    env = {**os.environ, "BERTSCOPE_MODEL": folder, "HF_HUB_OFFLINE": "1", "BERTSCOPE_WARM_UMAP": "0"}
    with running_app(env) as (url, server), sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        received = [0]

        def watch(ws) -> None:
            ws.on("framereceived", lambda payload: received.__setitem__(
                0, received[0] + len(payload if isinstance(payload, (bytes, str)) else b"")))

        page.on("websocket", watch)
        page.goto(url)  # the home page: loads the model once
        page.get_by_text("Heads per layer").wait_for(timeout=300_000)

        def visit(text: str, tab: str | None) -> tuple[float, int]:
            before = received[0]
            query = {"text": text, **({"att_tab": tab} if tab else {})}
            start = time.perf_counter()
            page.goto(f"{url}/attention?{urllib.parse.urlencode(query)}")
            page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
            drawn = time.perf_counter() - start  # the chart is on screen
            page.wait_for_timeout(300)  # count the frames that arrive after it too (not timed)
            return drawn, received[0] - before

        proc = psutil.Process(server.pid)
        for tab, name in ((None, "Head"), ("All heads of the layer", "All heads of the layer")):
            seconds, sent = visit(texts[0], tab)
            print(f"app, BERT-base random, {lm.tokenizer(texts[0])['input_ids'].__len__()} tokens, {name} tab: "
                  f"{sent / MiB:.2f} MiB over the websocket, {seconds:.1f} s to the chart "
                  f"({seconds / bare:.1f}x a bare forward of {bare:.2f} s; includes page load)")
        seconds, _ = visit(texts[0], None)  # what is left once the pass is cached: page load + drawing
        print(f"app, Head tab again (the inspection cached): {seconds:.1f} s to the chart")
        rss0 = proc.memory_info().rss
        for text in texts[1:-2]:
            visit(text, None)
        rss1 = proc.memory_info().rss
        print(f"server RSS after {args.texts} more distinct ~483-token texts: +{(rss1 - rss0) / MiB:.0f} MiB "
              f"(goal <= +1,536 MiB; budget BERTSCOPE_CACHE_MB={os.environ.get('BERTSCOPE_CACHE_MB', '1024')})")
        # a new text typed into the open page: no page load, the pass and the figure only
        signature = ("() => { const el = document.querySelector('.js-plotly-plot');"
                     " return el && el.layout ? JSON.stringify([el.layout.yaxis, el.data[0].y]) : ''; }")
        visit(texts[0], None)
        for text in texts[-2:]:
            shown = page.evaluate(signature)
            page.locator("textarea").first.fill(text)
            before = received[0]
            start = time.perf_counter()
            page.get_by_role("button", name="Run").click()
            page.wait_for_function(f"({signature})() !== {json.dumps(shown)} && ({signature})() !== ''",
                                   timeout=120_000)
            seconds = time.perf_counter() - start
            page.wait_for_timeout(300)
            print(f"app, Head tab, a new 483-token text run on the open page: {seconds:.1f} s to the new chart "
                  f"({seconds / bare:.1f}x a bare forward of {bare:.2f} s; {(received[0] - before) / MiB:.2f} MiB)")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--configs", default="bert-base-uncased,bert-large-uncased")
    parser.add_argument("--texts", type=int, default=12)
    parser.add_argument("--no-app", action="store_true")
    parser.add_argument("--app-only", action="store_true", help="only the app part")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    if not args.app_only:
        library(args)
    if not args.no_app:
        app(args)


if __name__ == "__main__":
    main()
