"""Two sets of SAEs on one model, scored the same way on every source's held-out text: are the new ones better
everywhere? (Issue 52: the shipped SAEs were trained on Brown alone; ``train-sae`` now trains on the mixture.)

    python benchmarks/sae_domains.py --old bertscope/data/bundled_mlm_saes --new runs/sae-mixture
                                     [--model bundled-mlm] [--layers 0,1,2,3,4,5] [--held-out 300]
                                     [--mean-tokens 200000] [--json FILE]

Both sets read the same held-out texts of each source (``corpora.mixture``, its held-out side, ``--held-out`` texts
a source) and the same mean-ablation reference (the mean output over the mixture's first ``--mean-tokens`` training
word pieces), so the loss recovered compares like with like: each SAE's own ``quality.json`` uses the mean of the
text it was trained on. Per layer and source: FVE, L0, dead latents, the masked-LM loss recovered (the chosen
positions spliced too, and their context only); the last column says whether the new SAE is at least as good on
FVE and on loss recovered. The issue's goal for the middle layers: FVE >= 0.80 and recovered >= 0.90 at L0 <= 64.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--model", default="bundled-mlm")
    p.add_argument("--layers", default=None)
    p.add_argument("--held-out", type=int, default=300)
    p.add_argument("--mean-tokens", type=int, default=200_000)
    p.add_argument("--json", default=None)
    args = p.parse_args()

    from bertscope.cli.sae import parse_layers, texts_for
    from bertscope.core.models import load_model
    from bertscope.features.activations import layers_activations, row_mean
    from bertscope.features.quality import domain_qualities
    from bertscope.features.sae import load_sae
    from bertscope.features.shipped import sae_folder, sae_layers

    lm = load_model(args.model)
    layers = parse_layers(args.layers, lm.num_layers)
    layers = [x for x in layers if x in sae_layers(args.old) and x in sae_layers(args.new)]
    train, held = texts_for("mixture", args.mean_tokens, args.held_out, seed=0)
    means = {layer: row_mean(acts.rows) for layer, acts in
             layers_activations(lm, train.texts, layers, args.mean_tokens).items()}
    print(f"{lm.name}: old {args.old} against new {args.new}; {args.held_out} held-out texts a source; the mean of "
          f"{args.mean_tokens:,} mixture word pieces as the ablation reference")
    print(f"{'layer':<6}{'source':<8}{'tokens':>7}{'FVE old':>9}{'new':>7}{'L0 old':>8}{'new':>6}{'dead old':>9}"
          f"{'new':>7}{'recov. old':>11}{'new':>7}{'ctx old':>8}{'new':>7}  new at least as good")
    rows = []
    held_out = layers_activations(lm, held.texts, layers, max_tokens=10**9)  # one pass: every source's rows in it
    for layer in layers:
        scored = {}
        for which, root in (("old", args.old), ("new", args.new)):
            sae = load_sae(sae_folder(root, layer), lm.device)
            scored[which] = domain_qualities(lm, sae, held_out[layer], held, means[layer])
        for source in scored["new"]:
            o, n = scored["old"][source], scored["new"][source]
            better = n.fve >= o.fve and n.recovered >= o.recovered
            rows.append({"layer": layer, "source": source, "old": o.to_json(), "new": n.to_json(), "better": better})
            print(f"{layer:<6}{source:<8}{n.tokens:>7,}{o.fve:>9.3f}{n.fve:>7.3f}{o.l0:>8.1f}{n.l0:>6.1f}"
                  f"{o.dead_share:>9.1%}{n.dead_share:>7.1%}{o.recovered:>11.3f}{n.recovered:>7.3f}"
                  f"{o.recovered_context:>8.3f}{n.recovered_context:>7.3f}  {'yes' if better else 'NO'}")
    everywhere = all(r["better"] for r in rows)
    print(f"new at least as good on FVE and loss recovered everywhere: {'yes' if everywhere else 'no'} "
          f"({sum(r['better'] for r in rows)}/{len(rows)} layer-source pairs)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "everywhere": everywhere}, indent=1))


if __name__ == "__main__":
    main()
