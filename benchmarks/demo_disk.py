"""A hosted demo's disk after many distinct uploads: the hidden states of each upload's probe task, written as the
Probes page writes them, with and without the demo's one quota (``runtime.disk_quota``).

    python benchmarks/demo_disk.py [--uploads 100] [--sentences 40] [--quota-mb 64] [--model bundled]

Each upload is a different file (one word changed: a new digest, a new folder, as the audit found). Prints the
disk the demo's folders take after every tenth upload, without a quota (it grows with every upload) and with one
(it stays under the quota: the least recently used go), and the time an upload took.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def upload(i: int, sentences: int) -> str:
    words = "the bank of the river was muddy and the dog sat by the water".split()
    rows = [" ".join(words[(i + j) % 5:] + [f"w{i}"]) for j in range(sentences)]
    return "tokens,tags\n" + "\n".join(f"{r},{' '.join('NOUN' if k % 2 else 'DET' for k in range(len(r.split())))}"
                                       for r in rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=100)
    parser.add_argument("--sentences", type=int, default=40)
    parser.add_argument("--quota-mb", type=float, default=64.0)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states, task_size
    from bertscope.core.models import load_model
    from bertscope.corpora.probe_tasks import read_csv_task
    from bertscope.runtime import disk_quota

    lm = load_model(args.model, device=args.device)
    for quota_mb in (None, args.quota_mb):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["BERTSCOPE_CACHE"] = cache
            disk_quota.set_disk_quota(None if quota_mb is None else int(quota_mb * 2**20))
            measure = disk_quota.DiskQuota(Path(cache), 1)
            seconds, largest = [], 0
            print(f"{'no quota' if quota_mb is None else f'quota {quota_mb:g} MiB'}:", end="", flush=True)
            for i in range(args.uploads):
                task = read_csv_task(upload(i, args.sentences), f"upload{i}")
                started = time.perf_counter()
                hidden_states(lm, task, "mean", HiddenStateCache(), size=task_size(lm, task))
                seconds.append(time.perf_counter() - started)
                used = measure.used()
                largest = max(largest, used)
                if (i + 1) % 10 == 0:
                    print(f" {i + 1}: {used / 2**20:.1f} MiB", end="", flush=True)
            print(f"\n  largest {largest / 2**20:.1f} MiB over {args.uploads} uploads, "
                  f"{len(measure.entries())} folders kept; an upload took {sorted(seconds)[len(seconds) // 2]:.2f} s "
                  "(median)")
    disk_quota.set_disk_quota(None)


if __name__ == "__main__":
    main()
