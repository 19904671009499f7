"""Inspect latency against a bare Hugging Face forward, and the app's cold start.

    python benchmarks/forward.py [--model bundled|random:bert-base-uncased] [--device cuda]
                                 [--dtype float16] [--repeats 15] [--sentences 32] [--no-app]

Both sides start from text and run the same model on its device with ``output_attentions``
and ``output_hidden_states`` on the same sentences (``--sentences``, batches of 32), and both bring every attention and
hidden-state tensor to the CPU as float32; ours also builds readable tokens, word ids and the
result objects. Medians of interleaved runs in one process; goal: ratio <= 1.10. Then hidden
states alone (what probes and shift extract): our pass on the fast kernel (SDPA) against the
same pass forced eager. Prints figures only; nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import add_model_args, bare_forward, describe, forced_kernel, interleaved, load  # noqa: E402

SENTENCES = [
    "The bank of the river was muddy after the storm.",
    "She deposited her wages at the bank on Friday.",
    "A man is eating food.",
    "A man is riding a horse along the beach at sunset.",
    "Attention heads in the middle layers often track syntax.",
    "Colorless green ideas sleep furiously.",
    "The keys to the cabinet are on the table.",
    "Nobody expected the committee to approve the proposal so quickly, least of all the chair.",
    "It rained.",
    "Can you pass the salt, please?",
    "The old man the boats.",
    "Time flies like an arrow; fruit flies like a banana.",
    "Researchers probed each layer with a linear classifier.",
    "The children who the teacher praised were happy.",
    "In 1969, two astronauts walked on the Moon while a third orbited above.",
    "He didn't say that he would not come.",
    "Paris is the capital of France.",
    "The spring in the old mattress squeaked all night.",
    "In spring the cherry trees along the canal bloom for barely two weeks.",
    "The pitcher threw a fast ball.",
    "Pour the lemonade from the pitcher into four glasses.",
    "Unbelievably, the unbreakable vase broke.",
    "Where did you put the report that the manager asked for yesterday?",
    "The cell divided twice under the microscope.",
    "The prisoner paced his narrow cell.",
    "Strike the match gently against the box.",
    "The match ended in a draw after extra time.",
    "A crane lifted steel beams onto the roof.",
    "A crane waded through the shallow marsh looking for fish.",
    "The plant closed after forty years of making tractors.",
    "Water the plant twice a week and keep it out of direct sun.",
    "Language models learn a surprising amount of grammar from raw text alone.",
]


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def to_cpu(out) -> None:
    """What a bare caller does to keep the outputs: every tensor to CPU float32."""
    for t in (*out.attentions, *out.hidden_states):
        t.float().cpu()


def time_forwards(args) -> None:
    from bertscope import inspect, inspect_batch

    lm = load(args)

    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.sentences)]
    chunks = [texts[s:s + 32] for s in range(0, len(texts), 32)]

    def bare_batch() -> None:
        for chunk in chunks:
            to_cpu(bare_forward(lm, chunk, output_attentions=True, output_hidden_states=True))

    def ours_batch() -> None:
        for _ in inspect_batch(lm, texts, batch_size=32, sort_by_length=False):
            pass  # streamed and dropped, as the bare side drops its copies

    def bare_single() -> None:
        for s in SENTENCES:
            to_cpu(bare_forward(lm, [s], output_attentions=True, output_hidden_states=True))

    def ours_single() -> None:
        for s in SENTENCES:
            inspect(lm, s)

    cases = {f"{len(texts)} in batches of 32": (ours_batch, bare_batch), "32 single sentences": (ours_single, bare_single)}
    print(describe(lm))
    for label, (ours, bare) in cases.items():
        times = interleaved({"bare": bare, "ours": ours}, args.repeats, lm.device)
        t_ours, t_bare = times["ours"], times["bare"]
        ratio = statistics.median(t_ours) / statistics.median(t_bare)
        print(f"{label:>20}: ours {median_ms(t_ours):8.1f} ms  bare HF {median_ms(t_bare):8.1f} ms  "
              f"ratio {ratio:.3f} (goal <= 1.10)")

    def hidden_only() -> None:
        list(inspect_batch(lm, texts, batch_size=32, sort_by_length=False, with_attentions=False))

    fast = lm.fast_attention
    times = {}
    for kernel in ("eager", fast) if fast != "eager" else ("eager",):
        with forced_kernel(lm, kernel):
            times[kernel] = statistics.median(interleaved({kernel: hidden_only}, args.repeats, lm.device)[kernel])
    if fast != "eager":
        print(f"hidden states only, {len(texts)} in batches of 32: {fast} {times[fast] * 1000:8.1f} ms  eager "
              f"{times['eager'] * 1000:8.1f} ms  speed-up {times['eager'] / times[fast]:.2f}x (goal on a GPU >= 1.5)")


COLD_START = """
import time, json
t0 = time.perf_counter()
import streamlit, bertscope.core.forward, views.kit.model_picker
t1 = time.perf_counter()
from bertscope import load_model, default_model
name, _ = default_model()
load_model(name)
t2 = time.perf_counter()
print(json.dumps({"imports": t1 - t0, "load": t2 - t1, "model": name}))
"""


def cold_start(runs: int = 3) -> None:
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    results = []
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", COLD_START], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True)
        total = time.perf_counter() - start
        results.append({**json.loads(out.stdout.strip().splitlines()[-1]), "process": total})
    med = {k: statistics.median(r[k] for r in results) for k in ("imports", "load", "process")}
    print(f"cold start ({results[0]['model']}, median of {runs} fresh processes): imports "
          f"{med['imports']:.2f} s + default-model decision and load {med['load']:.2f} s; "
          f"whole process {med['process']:.2f} s")


def app_to_card() -> None:
    """Seconds from `streamlit run app.py` to the model card visible in headless chromium."""
    from playwright.sync_api import sync_playwright

    from benchmarks.server import CHROMIUM, CHROMIUM_FLAGS, running_app

    start = time.perf_counter()
    with running_app() as (url, _):
        served = time.perf_counter() - start
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            page = browser.new_page()
            page.goto(url)
            page.get_by_text("Heads per layer").wait_for(timeout=120_000)
            shown = time.perf_counter() - start
            browser.close()
    print(f"streamlit run -> server answering {served:.2f} s -> model card in chromium "
          f"{shown:.2f} s (goal <= 20 s; includes the browser's own start)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--sentences", type=int, default=32, help="sentences for the batched cases")
    parser.add_argument("--no-app", action="store_true", help="skip the start-up measures (fresh process, browser)")
    args = parser.parse_args()
    time_forwards(args)
    if not args.no_app:
        cold_start()
        app_to_card()


if __name__ == "__main__":
    main()
