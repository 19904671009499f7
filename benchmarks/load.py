"""Load: concurrent browser sessions against one app server on localhost.

    python benchmarks/load.py [--sessions 10] [--seconds 60]

Starts ``streamlit run app.py`` in demo mode on 127.0.0.1 (the bundled model when offline),
then drives headless chromium (/usr/bin/chromium, one browser, a separate context per session)
through the pages via shareable links, each session with different inputs, for a bounded
time: first one session alone, then --sessions at once. Reports errors (goal 0), time to
render per page (p50 / p95) and the server's peak RSS with 1 and with N sessions (goal: one
resident copy of each model; RSS(N) <= 1.3 x RSS(1)). Only loopback traffic.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.server import CHROMIUM, CHROMIUM_FLAGS, running_app  # noqa: E402

TEXTS = ["The animal didn't cross the street because it was too tired.",
         "The bank of the river was muddy after the storm.",
         "She deposited the money in the bank on Friday.",
         "Attention heads in the middle layers often track syntax.",
         "The keys to the cabinet are on the table."]
WORDS = ["bank", "bat", "spring", "cell", "plant", "pitch", "crane", "match"]


def scenario(session: int, step: int) -> tuple[str, str, str]:
    """(page name, path with query, text that shows the page is rendered)."""
    k = session * 7 + step
    kind = (step + session) % 6  # sessions start on different pages
    if kind == 0:
        layer, head = k % 6, (k * 5) % 12
        query = urllib.parse.urlencode({"text": TEXTS[k % len(TEXTS)], "layer": layer, "head": head})
        return "attention", f"/attention?{query}", f"Layer {layer}, head {head}"
    if kind == 1:
        return "shift", f"/shift?word={WORDS[k % len(WORDS)]}&layer={k % 7}", "occurrences of"
    if kind == 2:
        count = ["none", "mlm", "pretraining"][k % 3]
        return "params", f"/params?model=bert-base-uncased&count={count}", "Total"
    if kind == 3:
        return "home", "/", "Heads per layer"
    if kind == 4:
        return "align", f"/align?layer={k % 13}&pivot={['de', 'zh', 'ar', 'hi'][k % 4]}", "Best layer (centred)"
    return "masked", "/masked", "no masked-LM head"


class ServerMemory:
    """Peak RSS of the server process tree (sampled every 50 ms), and its CPU time."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()

    def cpu_seconds(self) -> float:
        t = self.process.cpu_times()
        return t.user + t.system

    def rss(self) -> int:
        procs = [self.process, *self.process.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs if p.is_running())

    def __enter__(self):
        self.peak = self.rss()
        self.cpu_start, self.wall_start = self.cpu_seconds(), time.monotonic()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.rss())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join()
        self.cpu = self.cpu_seconds() - self.cpu_start
        self.wall = time.monotonic() - self.wall_start

    @property
    def cores_busy(self) -> float:
        """Server CPU seconds per wall second (2.0 = both cores of this machine)."""
        return self.cpu / self.wall


async def one_session(browser, url: str, number: int, deadline: float, times: dict, errors: list) -> None:
    context = await browser.new_context(viewport={"width": 1300, "height": 1000})
    page = await context.new_page()
    page.on("pageerror", lambda exc: errors.append(f"session {number}: page error {exc}"))
    step = 0
    while time.monotonic() < deadline:
        name, path, marker = scenario(number, step)
        start = time.perf_counter()
        try:
            await page.goto(url + path, wait_until="domcontentloaded")
            await page.get_by_text(marker).first.wait_for(state="attached", timeout=90_000)
            if await page.locator(".stException").count():
                errors.append(f"session {number}: exception on {path}")
            times.setdefault(name, []).append(time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - a timeout or a crash is an error to report
            errors.append(f"session {number}: {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        step += 1
    await context.close()


async def drive(url: str, sessions: int, seconds: float) -> tuple[dict, list]:
    from playwright.async_api import async_playwright

    times: dict[str, list[float]] = {}
    errors: list[str] = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(one_session(browser, url, n, deadline, times, errors) for n in range(sessions)))
        await browser.close()
    return times, errors


def report(label: str, times: dict, errors: list, usage: ServerMemory) -> None:
    total = sum(len(v) for v in times.values())
    print(f"{label}: {total} page renders, {len(errors)} errors, server peak RSS {usage.peak / 2**20:.0f} MiB, "
          f"server busy {usage.cores_busy:.2f} cores of {psutil.cpu_count()} (the browsers use the rest)")
    for name, values in sorted(times.items()):
        values = sorted(values)
        p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
        print(f"   {name:<10} n={len(values):<4} p50 {statistics.median(values):6.2f} s   p95 {p95:6.2f} s")
    for e in errors[:10]:
        print(f"   error: {e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()

    env = {**os.environ, "BERTSCOPE_DEMO": "1", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    with running_app(env) as (url, server):
        asyncio.run(drive(url, 1, 15))  # warm-up: loads the model, compiles, fills caches
        with ServerMemory(server.pid) as one:
            times1, errors1 = asyncio.run(drive(url, 1, args.seconds / 2))
        report("1 session", times1, errors1, one)
        with ServerMemory(server.pid) as many:
            times_n, errors_n = asyncio.run(drive(url, args.sessions, args.seconds))
        report(f"{args.sessions} sessions", times_n, errors_n, many)
        print(f"RSS with {args.sessions} sessions / with 1: {many.peak / one.peak:.2f} (goal <= 1.3); "
              f"errors {len(errors1) + len(errors_n)} (goal 0)")


if __name__ == "__main__":
    main()
