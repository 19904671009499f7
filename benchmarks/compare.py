"""Two models side by side: what linear CKA over a corpus's words costs beside the two models'
forward passes, the matrix itself, and the peak memory at BERT-base size.

    python benchmarks/compare.py [--a bundled] [--b bundled-mlm] [--sentences 500] [--pool mean]
    python benchmarks/compare.py --a random:bert-base-uncased --b random:bert-base-uncased:1 --sentences 2000

``random:CONFIG[:SEED]`` builds a random model of that config's shapes (seed 0 by default), so two
different random BERT-bases compare. The plain baseline runs each model's encoder over the same
sentences in the same batches with every hidden state returned (``core.forward.device_batches``),
no pooling and no CKA; ours is ``analysis.compare.compare_layers`` from the sentences to the matrix.
The peak is the process's RSS high-water mark (and the GPU's peak allocation on a GPU).
Medians of interleaved runs; figures only, nothing passes or fails on time.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.timing import describe, interleaved  # noqa: E402


def load(name: str, device: str):
    from bertscope import load_model
    from bertscope.core.random_models import save_random_model
    from bertscope.runtime.user_cache import user_cache_dir

    if name.startswith("random:"):
        config, _, seed = name.removeprefix("random:").partition(":")
        folder = user_cache_dir() / "random-models" / f"{config}-none-seed{seed or 0}"
        if not (folder / "config.json").is_file():
            save_random_model(config, folder, heads="none", seed=int(seed or 0))
        name = str(folder)
    return load_model(name, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", default="bundled")
    parser.add_argument("--b", default="bundled-mlm")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--pool", default="mean")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--heads", type=int, default=100, help="sentences for the head comparison (same tokenizer "
                                                              "only; 0: skip)")
    args = parser.parse_args()
    from bertscope.analysis.compare import compare_layers
    from bertscope.core.forward import device_batches
    from bertscope.core.layers import hidden_name
    from bertscope.corpora.brown_tasks import brown_task

    lm_a, lm_b = load(args.a, args.device), load(args.b, args.device)
    print("A:", describe(lm_a))
    print("B:", describe(lm_b))
    task = brown_task("brown-pos", args.sentences)
    texts = task.texts
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    results = []

    def plain():
        for lm in (lm_a, lm_b):
            for _batch, out in device_batches(lm, texts, None, 32, with_attentions=False, with_hidden_states=True):
                del out

    def ours():
        results.append(compare_layers(lm_a, lm_b, task, args.pool))

    times = interleaved({"plain": plain, "ours": ours}, args.repeats, lm_a.device)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    p, o = statistics.median(times["plain"]), statistics.median(times["ours"])
    r = results[-1]
    print(f"{r.n_words:,} words of {r.n_sentences:,} Brown sentences, {r.minibatches} minibatches of {r.minibatch}: "
          f"the two models' passes {p:.2f} s, CKA from the sentences {o:.2f} s ({o / p:.2f}x; goal <= 1.3x); "
          f"RSS high-water mark {before:,.0f} MiB after loading, {after:,.0f} MiB after the runs")
    np.set_printoptions(precision=3, suppress=True, linewidth=200)
    columns = [hidden_name(j)[:5] for j in range(r.cka.shape[1])]
    print("CKA, rows A, columns B:\n" + " " * 11 + "".join(f"{c:>7}" for c in columns))
    for i, row in enumerate(r.cka):
        print(f"{hidden_name(i):>10} " + "".join(f"{v:>7.3f}" for v in row))
    if args.heads:
        import time

        from bertscope.analysis.compare import compare_heads, same_tokenizer

        if same_tokenizer(lm_a, lm_b, texts[: args.heads]):
            start = time.perf_counter()
            heads = compare_heads(lm_a, lm_b, texts[: args.heads])
            seconds = time.perf_counter() - start
            print(f"heads: every head of A against every head of B over {heads.n_sentences} sentences "
                  f"({heads.n_rows:,} attention rows) in {seconds:.1f} s")
            if heads.same_head is not None:
                same = heads.same_head
                moved = np.argsort(-same.ravel())[:8]
                print("JS from the same head, by layer (mean, max):", ", ".join(
                    f"{layer}: {row.mean():.3f} / {row.max():.3f}" for layer, row in enumerate(same)))
                print("most moved:", ", ".join(f"{i // same.shape[1]}:{i % same.shape[1]} {same.ravel()[i]:.3f}"
                                               for i in moved))
            matches = heads.best_match()
            print(f"{sum(m['layer'] == m['b_layer'] and m['head'] == m['b_head'] for m in matches)} of "
                  f"{len(matches)} heads of A are closest to the same head of B")
        else:
            print("heads: not compared (the models do not share a tokenizer)")
    if torch.cuda.is_available() and lm_a.device.type == "cuda":
        print(f"GPU peak {torch.cuda.max_memory_allocated(lm_a.device) / 2**20:,.0f} MiB")


if __name__ == "__main__":
    main()
