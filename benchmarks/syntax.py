"""Syntax in the vectors on UD English-EWT, at full size: the structural probes' table, their rank curve,
and the label probes (UPOS, dependency labels) with their controls, with what each phase cost.

    python benchmarks/syntax.py [--model bundled] [--max-train 0] [--ranks 1,2,4,8,16,32,64,128,0]
                                [--labels] [--random-baseline] [--device cpu]
    python benchmarks/syntax.py --no-table --layer 2 --max-train 3000 --ranks 1,4,16,64,0 --labels [--label-size 0]

1. **The table** (``analysis.structural_runs.structural_probes``): a distance and a depth probe at every
   hidden state, trained on EWT train (``--max-train`` sentences, 0 = all 12,543) with early stopping
   on dev, scored on all of EWT test: UUAS, DSpr., root accuracy, NSpr., beside the right-branching
   chain (and ``--random-baseline``: a random-weight model of the same config at the best layer).
   The hidden states come from the on-disk cache (the first run builds it: its time is printed); the
   run is then repeated for the states alone to show the second read is a cache hit.
2. **The rank curve** (Hewitt & Manning's Figure 2): the distance probe at the best layer for each of
   ``--ranks`` (0: the model's width), its UUAS and DSpr.
3. **Label probes** (``--labels``; ``analysis.treebank_probes``): ``ewt-upos`` and ``ewt-deprel`` on EWT
   train (``--label-size`` sentences, 0 = all), scored on EWT test, each with its control task.
Wall time of each phase, the cache's bytes and the process's peak resident memory (``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def cell(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "-"


def main() -> None:
    from bertscope import load_model
    from bertscope.analysis.hidden_cache import hidden_states
    from bertscope.analysis.structural_probe import distance_report, train_structural_probe
    from bertscope.analysis.structural_runs import (
        MIN_WORDS,
        probe_sentences,
        random_twin,
        sample_indices,
        sentence_rows,
        structural_probes,
    )
    from bertscope.analysis.treebank_probes import treebank_probe
    from bertscope.core.layers import hidden_index, hidden_label
    from bertscope.corpora.ewt import ewt_task, read_ewt

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="bundled")
    p.add_argument("--max-train", type=int, default=0, help="EWT training sentences (0: all 12,543)")
    p.add_argument("--ranks", default="1,2,4,8,16,32,64,128,0", help="the rank curve at the best layer ('' to skip)")
    p.add_argument("--labels", action="store_true", help="also the UPOS and dependency-label probes")
    p.add_argument("--label-size", type=int, default=0, help="their EWT training sentences (0: all)")
    p.add_argument("--random-baseline", action="store_true")
    p.add_argument("--no-table", action="store_true", help="skip the table (then --layer names the rank curve's layer)")
    p.add_argument("--layer", help="the rank curve's layer without the table: 'embeddings' or a number from 0")
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    args = p.parse_args()

    lm = load_model(args.model, device=args.device)
    print(f"{lm.name} on {lm.device}: {lm.num_layers} layers, width {lm.hidden_size}")
    started = time.perf_counter()
    states = {split: hidden_states(lm, ewt_task(split), "mean") for split in ("train", "dev", "test")}
    built = time.perf_counter() - started
    size = sum(s.size_bytes for s in states.values())
    print(f"hidden states of EWT (train, dev, test): {built:.1f} s ({'cache hit' if all(s.hit for s in states.values()) else 'built now'}), "
          f"{size / 2**30:.2f} GiB on disk, peak RSS {peak_gb():.2f} GB")
    started = time.perf_counter()
    again = {split: hidden_states(lm, ewt_task(split), "mean") for split in ("train", "dev", "test")}
    print(f"read again: {time.perf_counter() - started:.2f} s, cache hit: {all(s.hit for s in again.values())}")

    if args.no_table:
        state = hidden_index(args.layer or "0", lm.num_layers)
    else:
        twin = random_twin(lm) if args.random_baseline else None
        started = time.perf_counter()
        result = structural_probes(lm, max_train=args.max_train or None, random_model=twin)
        took = time.perf_counter() - started
        c = result.counts
        print(f"\nstructural probes ({c['train_sentences']:,} train / {c['dev_sentences']:,} dev / {c['test_sentences']:,} "
              f"test sentences, rank {c['rank']}, {c['left_out_sentences']} left out): {took:.0f} s, peak RSS "
              f"{peak_gb():.2f} GB")
        print("| hidden state | UUAS | DSpr. | root % | NSpr. | epochs (distance / depth) |\n|---|---|---|---|---|---|")
        for row in result.layers:
            print(f"| {row['layer']} | {cell(row['uuas'])} | {cell(row['dspr'])} | {cell(row['root_accuracy'])} | "
                  f"{cell(row['nspr'])} | {row['distance_epochs']} / {row['depth_epochs']} |")
        for name, row in result.baselines.items():
            title = "right-branching chain" if name == "chain" else f"random model at {row['layer']}"
            print(f"| {title} | {cell(row.get('uuas'))} | {cell(row.get('dspr'))} | {cell(row.get('root_accuracy'))} | "
                  f"{cell(row.get('nspr'))} | |")
        print(f"best layer: {result.best_layer}")
        state = result.tree_state

    ranks = [int(r) for r in args.ranks.split(",") if r.strip()]
    if ranks:
        splits = {split: read_ewt(split) for split in ("train", "dev", "test")}
        sents = {}
        for split in splits:  # the table's sentences: the same seeded training sample, all of dev and test
            keep = [i for i, s in enumerate(splits[split]) if len(s) >= MIN_WORDS]
            if split == "train":
                keep = [keep[i] for i in sample_indices(len(keep), args.max_train or None, 0)]
            rows = sentence_rows(states[split], splits[split])
            sents[split] = probe_sentences(states[split], splits[split], state,
                                           [i for i in keep if rows[i] is not None])
        print(f"\nrank curve at {hidden_label(state)} (distance probe, {len(sents['train']):,} training sentences)\n| rank | UUAS | DSpr. | epochs | seconds |\n"
              "|---|---|---|---|---|")
        for rank in ranks:
            started = time.perf_counter()
            trained = train_structural_probe(sents["train"], sents["dev"], "distance", rank or None)
            report = distance_report([trained.predict(s) for s in sents["test"]], sents["test"])
            print(f"| {rank or lm.hidden_size} | {cell(report['uuas'])} | {cell(report['dspr'])} | {trained.epochs} | "
                  f"{time.perf_counter() - started:.0f} |")

    if args.labels:
        for task in ("ewt-upos", "ewt-deprel"):
            started = time.perf_counter()
            out, hit = treebank_probe(lm, task, size=args.label_size)
            print(f"\n{task}: {out.n_train:,} train / {out.n_test:,} test, {len(out.classes)} labels, majority "
                  f"{out.majority_baseline:.3f}; {time.perf_counter() - started:.0f} s (states: "
                  f"{'cache hit' if hit else 'built'}), peak RSS {peak_gb():.2f} GB")
            print("| hidden state | accuracy | control | selectivity |\n|---|---|---|---|")
            for r in out.layers:
                print(f"| {r.name} | {r.accuracy:.3f} | {r.control_accuracy:.3f} | {r.selectivity:+.3f} |")
    print(f"\npeak RSS over the run: {peak_gb():.2f} GB")


if __name__ == "__main__":
    main()
