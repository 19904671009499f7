"""A torch profiler trace of ``inspect_batch`` against the bare loop it is measured against.

    python benchmarks/trace_forward.py --model random:bert-base-uncased --device cuda --dtype float16 --out results/

Both sides run the same sentences in the same batches (``forward.py``'s: attentions and hidden
states of every layer, copied to the host as float32). Each is traced with CPU and CUDA
activities after a warm-up; the Chrome traces (``trace-bare.json``, ``trace-ours.json``, open
them in chrome://tracing or Perfetto) go to ``--out``, and the operators that cost the most host
time are printed side by side, with the wall time and the time the device was busy, so a gap can
be named: host work on the critical path, synchronisations, copies. Prints figures only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.forward import SENTENCES, to_cpu  # noqa: E402
from benchmarks.timing import add_model_args, bare_forward, describe, load, synchronize  # noqa: E402


def traced(name: str, fn, device: torch.device, out: Path, rows: int) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    fn()  # warm-up
    synchronize(device)
    with profile(activities=activities, record_shapes=False) as prof:
        start = time.perf_counter()
        fn()
        synchronize(device)
        wall = time.perf_counter() - start
    prof.export_chrome_trace(str(out / f"trace-{name}.json"))
    events = prof.key_averages()
    busy = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA") / 1e6 \
        if device.type == "cuda" else float("nan")
    print(f"--- {name}: wall {wall * 1000:.1f} ms for {rows} sentences; device busy {busy * 1000:.1f} ms")
    print(events.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=48))
    if device.type == "cuda":
        print(events.table(sort_by="self_device_time_total", row_limit=10, max_name_column_width=48))


def main() -> None:
    from bertscope import inspect_batch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--out", default="results/trace")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lm = load(args)
    print(describe(lm))
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.sentences)]
    chunks = [texts[s:s + 32] for s in range(0, len(texts), 32)]

    def bare() -> None:
        for chunk in chunks:
            to_cpu(bare_forward(lm, chunk, output_attentions=True, output_hidden_states=True))

    def ours() -> None:
        for _ in inspect_batch(lm, texts, batch_size=32, sort_by_length=False):
            pass

    traced("bare", bare, lm.device, out, len(texts))
    traced("ours", ours, lm.device, out, len(texts))


if __name__ == "__main__":
    main()
