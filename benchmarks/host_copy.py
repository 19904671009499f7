"""How ``inspect_batch``'s outputs reach the host from a GPU: the copy strategies, timed in one run.

    python benchmarks/host_copy.py --model random:bert-base-uncased --device cuda --dtype float16

The same padded batches (``forward.py``'s sentences, batches of 32) run once through the model,
then the stacked attentions and hidden states are copied to the host as float32 three ways:
- ``.cpu()``: torch allocates fresh pageable memory, which the copy faults in 4 KiB at a time
  (an H200 trace: 16 such copies of ~10 MB took 69.7 ms, 2.3 GB/s);
- numpy: into an ``np.empty`` array, which numpy backs with huge pages from 4 MiB (what
  ``bertscope.core.forward`` does);
- pinned: a page-locked staging buffer, then a host copy into a fresh array.
Beside them: the bare loop (per-layer ``.float().cpu()`` of tensors dropped at once, so the
allocator hands the same pages back every time), ours whole, the pass alone, and faulting in
the same bytes of fresh memory on the host alone. Prints figures only; needs CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.forward import SENTENCES, to_cpu  # noqa: E402
from benchmarks.timing import add_model_args, bare_forward, describe, interleaved, load  # noqa: E402


def huge_pages() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"


def main() -> None:
    from bertscope import inspect_batch
    from bertscope.core.batch_plan import pad, tokenize
    from bertscope.core.forward import device_pass

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, model="random:bert-base-uncased")
    parser.add_argument("--sentences", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    lm = load(args)
    if lm.device.type != "cuda":
        raise SystemExit("host_copy.py measures copies from a GPU: run it with --device cuda.")
    print(f"{describe(lm)}; transparent huge pages: {huge_pages()}")
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.sentences)]
    tokenized = tokenize(lm, texts, [None] * len(texts))
    batches = [pad(lm, tokenized, range(s, min(s + 32, len(texts)))) for s in range(0, len(texts), 32)]

    def cpu_copy(t: torch.Tensor) -> np.ndarray:
        return t.float().cpu().numpy()

    def numpy_copy(t: torch.Tensor) -> np.ndarray:
        host = np.empty(tuple(t.shape), np.float32)
        torch.from_numpy(host).copy_(t.float())
        return host

    def pinned_copy(t: torch.Tensor) -> np.ndarray:
        staging = torch.empty(t.shape, dtype=torch.float32, pin_memory=True)
        staging.copy_(t.float(), non_blocking=True)
        torch.cuda.current_stream().synchronize()
        return np.array(staging.numpy())

    def passes(copy=None):
        def run() -> None:
            for batch in batches:
                out = device_pass(lm, batch.feed, True, True, with_logits=False)
                if copy is not None:
                    with torch.inference_mode():
                        copy(torch.stack(out.attentions, dim=1)), copy(torch.stack(out.hidden_states, dim=1))
            torch.cuda.synchronize()
        return run

    def bare() -> None:
        for s in range(0, len(texts), 32):
            to_cpu(bare_forward(lm, texts[s:s + 32], output_attentions=True, output_hidden_states=True))

    def ours() -> None:
        for _ in inspect_batch(lm, texts, batch_size=32, sort_by_length=False):
            pass

    def faults() -> None:
        for batch in batches:
            b, t = batch.feed["input_ids"].shape
            np.ones((b, lm.num_layers, lm.num_heads, t, t), np.float32)
            np.ones((b, lm.num_layers + 1, t, lm.hidden_size), np.float32)

    cases = {"bare loop": bare, "inspect_batch": ours, "pass alone": passes(), "pass + .cpu()": passes(cpu_copy),
             "pass + numpy": passes(numpy_copy), "pass + pinned": passes(pinned_copy),
             "fresh host memory alone": faults}
    times = interleaved(cases, args.repeats, lm.device)
    for name, values in times.items():
        print(f"{name:>24}: {statistics.median(values) * 1000:8.1f} ms for {len(texts)} sentences")


if __name__ == "__main__":
    main()
