"""The feature browser's costs: the corpus pass behind it, and one feature's page read from it.

    python benchmarks/feature_pages.py [--model bundled-mlm] [--sentences 0] [--layers 0,1,2,3,4,5]
                                       [--features 20]
    python benchmarks/feature_pages.py --random bert-base-uncased --sentences 2000 --layers 5,11

``--random CONFIG``: BERT's real operating point without a download (a forward pass costs the same
whatever the weights): a random model from ``bertscope/configs/`` and random TopK SAEs of 8x its
width (6,144 latents for BERT-base, k = 32) at the layers asked; the same two measurements.

1. **The corpus pass** (``features.statistics.feature_statistics``): ``--sentences`` of Brown (0: all
   57,340) through the model, stopped at the highest layer asked, and every layer's SAE; each batch
   reduced on the device into fixed-size tables (top sentences, histograms, tag counts). Wall time,
   word pieces a second, and the process's peak resident memory (``ru_maxrss``), against the bare
   pass of the same sentences to the same layer (``active.layer_outputs``) timed first in the same run
   (the ratio says what the statistics add to reading the activations), and against the bytes the dense
   token x feature matrix would take.
2. **A feature's page from the kept statistics**: read the statistics file (a fresh process would),
   then for ``--features`` features spread over the firing ranks: its summary and labels, its histogram,
   its top 10 contexts run again through the layer, its logit weights and nearest features (what
   ``bertscope/app/features.py`` shows). Median and worst seconds (goal: <= 1 s).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    from bertscope import load_model
    from bertscope.core.passes import batches
    from bertscope.corpora.tagged import brown_tagged
    from bertscope.features.active import layer_outputs
    from bertscope.features.contexts import feature_contexts
    from bertscope.features.directions import logit_weights, nearest_features
    from bertscope.features.sae import load_sae
    from bertscope.features.shipped import sae_folder, shipped_saes
    from bertscope.features.statistics import FeatureStatistics, feature_statistics, statistics_path

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="bundled-mlm")
    p.add_argument("--sentences", type=int, default=0)
    p.add_argument("--layers", default="0,1,2,3,4,5")
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    p.add_argument("--random", help="a config of bertscope/configs (e.g. bert-base-uncased): random weights and SAEs")
    args = p.parse_args()

    layers = [int(x) for x in args.layers.split(",")]
    if args.random:
        from bertscope.core.random_models import save_random_model
        from bertscope.features.activations import resid_post
        from bertscope.features.sae import SaeInfo, TopKSAE

        lm = load_model(str(save_random_model(args.random, tempfile.mkdtemp(prefix="random-model-"))), device=args.device)
        saes = {}
        for layer in layers:
            sae = TopKSAE(lm.hidden_size, 8 * lm.hidden_size, 32, info=SaeInfo(lm.name, resid_post(layer)), seed=layer)
            with torch.no_grad():
                sae.b_enc.normal_(0, 0.1, generator=torch.Generator().manual_seed(layer))
            saes[layer] = sae.to(lm.device)
    else:
        lm = load_model(args.model, device=args.device)
        source = shipped_saes(lm.name)
        saes = {layer: load_sae(sae_folder(source, layer), lm.device) for layer in layers}
    corpus = brown_tagged(args.sentences)
    print(f"{lm.name} on {lm.device}, {corpus.name}: {len(corpus):,} sentences; SAEs of layers {layers} "
          f"({next(iter(saes.values())).d_sae:,} features each)")

    started = time.perf_counter()
    pieces = 0
    with torch.no_grad():
        for _, padded, feed in batches(lm, list(corpus.texts), 32):
            layer_outputs(lm, feed, layers)
            pieces += int((~padded.special).sum())
    bare = time.perf_counter() - started
    root = Path(tempfile.mkdtemp(prefix="feature-stats-"))
    started = time.perf_counter()
    stats = feature_statistics(lm, saes, corpus, root=root)
    full = time.perf_counter() - started
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    d_sae = next(iter(saes.values())).d_sae
    dense_gb = pieces * d_sae * 4 * len(layers) / 2**30
    kept_mb = sum(statistics_path(lm, saes[layer], corpus, layer, root).stat().st_size for layer in layers) / 2**20
    print(f"corpus pass: {full:.1f} s ({pieces / full:,.0f} word pieces/s, {pieces:,} pieces); the bare pass to layer "
          f"{max(layers)}: {bare:.1f} s (statistics / bare = {full / bare:.2f}x)")
    print(f"peak resident memory {peak_gb:.2f} GB; the dense token x feature matrices would be {dense_gb:.1f} GB "
          f"(float32); the kept statistics {kept_mb:.1f} MB on disk")

    layer = layers[len(layers) // 2]
    path = statistics_path(lm, saes[layer], corpus, layer, root)
    order = np.argsort(-stats[layer].fires)
    chosen = [int(order[i]) for i in np.linspace(0, d_sae - 1, args.features).astype(int)]
    times = []
    for feature in [chosen[0], *chosen]:  # the first, untimed: a process's first pass pays one-time costs
        started = time.perf_counter()
        kept = FeatureStatistics.load(path)  # what a fresh server process reads
        kept.summary(feature)
        [kept.labels(feature, ts) for ts in kept.tags]
        kept.histogram[feature].sum()
        feature_contexts(lm, saes[layer], kept, corpus, feature, layer, top=10)
        if "mlm" in lm.outputs:
            logit_weights(lm, saes[layer], feature)
        nearest_features(saes[layer], feature)
        times.append(time.perf_counter() - started)
    cold, times = times[0], times[1:]
    print(f"a feature's page (layer {layer}, {len(chosen)} features over the firing ranks): median "
          f"{statistics.median(times):.3f} s, worst {max(times):.3f} s (goal <= 1 s); the process's first "
          f"{cold:.3f} s")


if __name__ == "__main__":
    main()
