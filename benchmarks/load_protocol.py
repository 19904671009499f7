"""Load at the protocol level: many sessions of the hosted demo over Streamlit's own websocket, from one process.

    python benchmarks/load_protocol.py [--sessions 40] [--rounds 5] [--demo]

Ten browsers saturate this 2-core machine before the server does (``benchmarks/load.py`` measures that path); this
client speaks what the browser speaks instead: it opens ``/_stcore/stream``, sends a ``BackMsg`` asking for a page
(its query string, as a shared link carries it) and reads ``ForwardMsg``s until the script finishes, counting the
exceptions the page rendered. Every session asks for a page ``--rounds`` times, all sessions at once (asyncio, one
thread). Reports sessions held, the time to a finished render (p50 / p95 / max), errors (exception elements, failed
connections), and the server's resident memory before, at its peak and after. Only loopback traffic.
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
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.load import TEXTS, WORDS  # noqa: E402
from benchmarks.server import running_app  # noqa: E402


def page_for(session: int, step: int) -> tuple[str, str]:
    """(page name, query string) for one request of one session: the pages a shared link opens."""
    k = session * 7 + step
    kind = (session + step) % 5
    if kind == 0:
        return "attention", urllib.parse.urlencode({"text": TEXTS[k % len(TEXTS)], "layer": k % 6, "head": k % 12})
    if kind == 1:
        return "shift", urllib.parse.urlencode({"word": WORDS[k % len(WORDS)], "layer": k % 7})
    if kind == 2:
        return "params", urllib.parse.urlencode({"model": "bert-base-uncased", "count": ["none", "mlm"][k % 2]})
    if kind == 3:
        return "masked", urllib.parse.urlencode({"text": "The [MASK] of the river was muddy.", "k": 3 + k % 5})
    return "", ""  # home


class Peak:
    """The server's resident memory (with its children), sampled every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.process, self.peak, self.stop = psutil.Process(pid), 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def rss(self) -> int:
        return sum(p.memory_info().rss for p in [self.process, *self.process.children(recursive=True)])

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.rss())
            except psutil.Error:
                return
            time.sleep(0.05)


async def render(ws, page: str, query: str, timeout: float) -> tuple[float, int]:
    """Ask for a page over an open session; (seconds to the script's end, failures: exception elements, a page not
    found, a render that drew almost nothing)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = BackMsg()
    msg.rerun_script.query_string = query
    msg.rerun_script.page_name = page
    msg.rerun_script.widget_states.SetInParent()
    started = time.perf_counter()
    await ws.send(msg.SerializeToString())
    errors = elements = 0
    while True:
        raw = await asyncio.wait_for(ws.recv(), timeout)
        forward = ForwardMsg()
        forward.ParseFromString(raw)
        kind = forward.WhichOneof("type")
        if kind == "page_not_found":
            errors += 1
        elements += kind == "delta"
        if kind == "delta" and forward.delta.WhichOneof("type") == "new_element" and \
                forward.delta.new_element.WhichOneof("type") == "exception":
            errors += 1
        if kind == "script_finished" and forward.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            return time.perf_counter() - started, errors + (elements < 5)  # a page draws more than its frame


async def session(url: str, number: int, rounds: int, timeout: float, times: list, failures: list) -> None:
    import websockets

    try:
        async with websockets.connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"],
                                      max_size=None, open_timeout=timeout) as ws:
            for step in range(rounds):
                page, query = page_for(number, step)
                seconds, errors = await render(ws, page, query, timeout)
                times.append(seconds)
                failures.extend([f"session {number}, {page or 'home'}: an exception on the page"] * errors)
    except Exception as err:  # noqa: BLE001 - a dropped session is a measured failure, not a crash of the test
        failures.append(f"session {number}: {type(err).__name__}: {err}")


def run(sessions: int, rounds: int, demo: bool, timeout: float) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "BERTSCOPE_WARM_UMAP": "0"}
    env.pop("BERTSCOPE_MODEL", None)
    if demo:
        env["BERTSCOPE_DEMO"] = "1"
    with running_app(env) as (url, server):
        warm_times: list[float] = []
        warm_failures: list[str] = []
        asyncio.run(session(url, 0, 5, timeout, warm_times, warm_failures))  # the model loaded, every page once
        memory = Peak(server.pid)
        before = memory.rss()
        memory.thread.start()
        times: list[float] = []
        failures: list[str] = []
        started = time.perf_counter()

        async def everyone() -> None:
            await asyncio.gather(*(session(url, n, rounds, timeout, times, failures) for n in range(1, sessions + 1)))

        asyncio.run(everyone())
        wall = time.perf_counter() - started
        memory.stop.set()
        memory.thread.join()
        after = memory.rss()
    times.sort()
    return {"sessions": sessions, "renders": len(times), "failures": warm_failures + failures, "wall_s": wall,
            "p50_s": statistics.median(times) if times else None,
            "p95_s": times[min(len(times) - 1, int(0.95 * len(times)))] if times else None,
            "max_s": times[-1] if times else None, "rss_before_mib": before / 2**20,
            "rss_peak_mib": memory.peak / 2**20, "rss_after_mib": after / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5, help="pages each session asks for, one after another")
    parser.add_argument("--demo", action="store_true", help="the hosted demo's mode (BERTSCOPE_DEMO=1)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one render may take")
    args = parser.parse_args()
    out = run(args.sessions, args.rounds, args.demo, args.timeout)
    print(f"{out['sessions']} sessions at once over the websocket, {out['renders']} renders in {out['wall_s']:.1f} s "
          f"({out['renders'] / out['wall_s']:.1f} renders/s)")
    if out["p50_s"] is not None:
        print(f"time to a finished render: p50 {out['p50_s']:.2f} s, p95 {out['p95_s']:.2f} s, max {out['max_s']:.2f} s")
    print(f"server RSS: {out['rss_before_mib']:.0f} MiB before, peak {out['rss_peak_mib']:.0f} MiB, "
          f"after {out['rss_after_mib']:.0f} MiB")
    print(f"errors: {len(out['failures'])}" + "".join(f"\n  {f}" for f in out["failures"][:10]))


if __name__ == "__main__":
    main()
