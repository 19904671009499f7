"""The type check with a baseline that only shrinks: mypy over ``bertscope`` (strict for ``core``, ``runtime``,
``sources``: none allowed there), its findings counted per file and error code against
``mypy-baseline.txt``. More findings than the baseline anywhere fail; fewer say so, and
``python tools/mypy_baseline.py --update`` writes the smaller baseline.

    python tools/mypy_baseline.py            # make lint runs this
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "mypy-baseline.txt"
FINDING = re.compile(r"^(bertscope/\S+?\.py):\d+(?::\d+)?: error: .*\[([a-z-]+)\]$")


def findings() -> Counter:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    counts: Counter = Counter()
    for line in done.stdout.splitlines():
        m = FINDING.match(line)
        if m:
            counts[f"{m.group(1)} [{m.group(2)}]"] += 1
    if done.returncode not in (0, 1) or (done.returncode == 1 and not counts):
        sys.exit(f"mypy did not run: {(done.stderr or done.stdout).strip()[-500:]}")
    return counts


def read_baseline() -> Counter:
    counts: Counter = Counter()
    if BASELINE.is_file():
        for line in BASELINE.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                count, key = line.split(" ", 1)
                counts[key] = int(count)
    return counts


def write_baseline(counts: Counter) -> None:
    lines = ["# mypy findings allowed per file and error code (tools/mypy_baseline.py): this list only shrinks"]
    lines += [f"{n} {key}" for key, n in sorted(counts.items())]
    BASELINE.write_text("\n".join(lines) + "\n")


def main() -> int:
    now, allowed = findings(), read_baseline()
    if "--update" in sys.argv:
        grown = {k: n for k, n in now.items() if n > allowed.get(k, 0)}
        if grown and allowed:
            print(f"refused: the baseline only shrinks, and these grew: {grown}", file=sys.stderr)
            return 1
        write_baseline(now)
        print(f"mypy baseline: {sum(now.values())} findings in {len({k.split(' ')[0] for k in now})} files")
        return 0
    over = {k: (n, allowed.get(k, 0)) for k, n in now.items() if n > allowed.get(k, 0)}
    for key, (n, limit) in sorted(over.items()):
        print(f"mypy: {key}: {n} findings, the baseline allows {limit}", file=sys.stderr)
    if over:
        print("Fix them (run mypy for the lines).", file=sys.stderr)
        return 1
    total, limit = sum(now.values()), sum(allowed.values())
    print(f"mypy: {total} findings, within the baseline of {limit}"
          + (" (it shrank: python tools/mypy_baseline.py --update)" if total < limit else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
