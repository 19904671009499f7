"""Where the graph and the model part: the intervention test taken apart, one frozen thing at a time.

    python benchmarks/graph_gap.py [--prompts 50] [--seed 0] [--head frozen|linear] [--transcoders FOLDER ...]

The graph predicts a switch-off's change of the decision as −(the feature's total effect): exact in the graph's
linear replacement model (patterns, LayerNorm scales and the head's nonlinearity frozen; every later feature moving
one for one with its input; errors held). The model under circuit-tracer's protocol (``switch_off``'s default)
differs from it in four ways: the later feed-forwards are the model's own (their response, not the features'); the
LayerNorm scales and the head move; and the change is the feature's whole activation, not a small step. Each prompt's
5 strongest nodes (by influence, as ``agreement`` picks them) and 5 random active features are switched off under:

- ``frozen norms, transcoders``: the graph's frozen pass (``FrozenModel.forward``) with every feed-forward its
  transcoder on the live input (each TopK choosing again) plus the real run's error there, the feature's write taken
  away at its layer: the graph's own model but for the later features' selection;
- ``frozen norms, model feed-forwards``: the same with every feed-forward the model's own (``feed_forward``): only
  the later feed-forwards' response differs from the graph's;
- ``frozen norms, model feed-forwards, the head's GELU / LayerNorm / both live``: the same with the masked-LM head's
  own GELU, its LayerNorm, or both, live;
- ``live norms (circuit-tracer)``: ``switch_off`` at its defaults: every LayerNorm and the head move too;
- each with a tenth of the activation taken away (``scale=0.9``), the change times 10: the first order.

It prints the sign agreement with the graph's prediction for each, and the correlation of the predicted with the
measured change (top-5 nodes). Same prompts as ``benchmarks/graphs.py`` (``--seed`` the draw).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.graphs import prompts  # noqa: E402

SCALES = (0.0, 0.9)  # the whole activation away, a tenth of it


def frozen_pass(lm, graph, transcoders):
    """(the prompt's embeddings [1, P, d], {protocol: its writes [l][1, P, d] → the decision's value}): the graph's
    frozen pass (float64) with each feed-forward the transcoder (TopK live, the real run's error added) or the
    model's own, and the latter with the head's LayerNorm and GELU live."""
    from bertscope.graphs.build import _real_run
    from bertscope.graphs.frozen import freeze, mlm_head
    from bertscope.graphs.interventions import ordinary, transcoder_write

    tokens, _, cache = _real_run(lm, graph.text)  # the run the graph was built from
    target = graph.target
    ids = lm.tokenizer.convert_tokens_to_ids
    contrast = None if target["contrast"] is None else ids(target["contrast"])
    head = mlm_head(lm, cache[f"blocks.{lm.num_layers - 1}.hook_resid_post"][0], target["position"],
                    ids(target["token"]), contrast, torch.float64)
    frozen = freeze(lm, cache, dict(transcoders), head, torch.float64)
    blocks = lm.model.bert.encoder.layer
    weights = [(b.intermediate.dense.weight.double(), b.intermediate.dense.bias.double(),
                b.output.dense.weight.double(), b.output.dense.bias.double(), b.intermediate.intermediate_act_fn)
               for b in blocks]

    def feed_forward(layer: int, mid: torch.Tensor) -> torch.Tensor:  # [B, P, d] -> [B, P, d]
        w1, b1, w2, b2, act = weights[layer]
        return act(mid @ w1.T + b1) @ w2.T + b2

    carries = ordinary(lm, torch.tensor(tokens))  # [P]: as the graph, features everywhere but the special tokens

    def written(layer: int, mid: torch.Tensor) -> torch.Tensor:  # [B, P, d]: the transcoder, TopK on ``mid``
        return transcoder_write(transcoders[layer], mid, carries).double()

    errors = [cache[f"blocks.{ly}.hook_mlp_out"].double().cpu() - written(ly, cache[f"blocks.{ly}.hook_resid_mid"]
                                                                          .double().cpu())
              for ly in range(lm.num_layers)]

    def by_transcoders(layer: int, mid: torch.Tensor) -> torch.Tensor:
        return written(layer, mid) + errors[layer]

    embed = cache["embed"].detach().double().cpu()
    transform = lm.model.cls.predictions.transform
    last = frozen.layers[-1]

    def live_head(gelu: bool, norm: bool):
        """The block norms frozen; the head's GELU and LayerNorm each live or held."""
        def value(writes: list[torch.Tensor]) -> float:
            mids, _ = frozen.forward(embed, writes, feed_forward=feed_forward)
            out = writes[-1] + feed_forward(len(mids) - 1, mids[-1])
            y = mids[-1] + out
            h = ((y - y.mean(-1, keepdim=True)) / last.sigma2 * last.g2 + last.b2)[0, head.position]  # [d]
            u = h @ head.W1.T + head.b1
            g = transform.transform_act_fn(u) if gelu else u * head.ratio
            if norm:
                n = torch.nn.functional.layer_norm(g, g.shape, head.gamma, head.beta, transform.LayerNorm.eps)
            else:
                n = (g - g.mean()) / head.sigma * head.gamma + head.beta
            return float(n @ head.readout + head.offset)
        return value

    def frozen_value(ff):
        return lambda writes: float(frozen.forward(embed, writes, feed_forward=ff)[1][0])

    return embed, {"transcoders": frozen_value(by_transcoders), "model feed-forwards": frozen_value(feed_forward),
                   "model feed-forwards, the head's GELU live": live_head(True, False),
                   "model feed-forwards, the head's LayerNorm live": live_head(False, True),
                   "model feed-forwards, the head live": live_head(True, True)}


@torch.no_grad()
def frozen_norms_change(value_of, embed, layers: int, node, tc, scale: float, base: float) -> float:
    """The decision's change in a frozen pass (``value_of``: its writes [l][1, P, d] to the value, ``layers`` of
    them) with the node's activation times ``scale``."""
    writes = [torch.zeros_like(embed) for _ in range(layers)]
    writes[node.layer][0, node.position] = -(1 - scale) * node.activation * tc.W_dec[node.feature].detach().double()
    return value_of(writes) - base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled-mlm")
    parser.add_argument("--prompts", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--head", default="frozen", help="the graph's head: frozen (default) or linear")
    parser.add_argument("--transcoders", nargs="*", default=[None], help="train-transcoders folders (default: the "
                        "shipped set)")
    args = parser.parse_args()
    from bertscope.core.models import load_model
    from bertscope.features.shipped import transcoder_set
    from bertscope.graphs.build import attribution_graph
    from bertscope.graphs.influence import node_influence
    from bertscope.graphs.interventions import real_patterns, switch_off, total_effects

    lm = load_model(args.model)
    texts = prompts(lm, args.prompts, args.seed)
    for folder in args.transcoders:
        tcs = transcoder_set(lm, folder)
        rows: dict[str, list] = {"top": [], "random": []}  # (predicted, {protocol: measured})
        for text in texts:
            graph = attribution_graph(lm, text, tcs, head=args.head)
            effects = total_effects(graph)
            influence = node_influence(graph.adjacency)[:graph.n_features]
            strongest = np.argsort(-influence, kind="stable")[:5]
            rest = np.setdiff1d(np.arange(graph.n_features), strongest)
            drawn = np.random.default_rng(0).choice(rest, min(5, len(rest)), replace=False)
            embed, passes = frozen_pass(lm, graph, tcs)
            nothing = [torch.zeros_like(embed) for _ in range(lm.num_layers)]
            with torch.no_grad():
                bases = {how: value_of(nothing) for how, value_of in passes.items()}
            patterns = real_patterns(lm, text)
            base = switch_off(lm, graph, tcs, [], patterns=patterns)
            for kind, picked in (("top", strongest), ("random", drawn)):
                for r in picked:
                    node = graph.nodes[int(r)]
                    measured = {}
                    for scale in SCALES:
                        step = 1 - scale
                        for how, value_of in passes.items():
                            measured[f"frozen norms, {how}", scale] = frozen_norms_change(
                                value_of, embed, lm.num_layers, node, tcs[node.layer], scale, bases[how]) / step
                        measured["live norms", scale] = (switch_off(
                            lm, graph, tcs, [(node.layer, node.position, node.feature)], patterns=patterns,
                            scale=scale) - base) / step
                    rows[kind].append((-float(effects[r]), measured, max(abs(b - graph.value) for b in bases.values())))
        report(f"{folder or 'shipped'}, the graph's head {args.head}", len(texts), rows)


def report(name: str, n: int, rows: dict) -> None:
    drift = max(abs(d) for _, _, d in rows["top"])
    print(f"{name}: {n} prompts; the frozen passes give the real value to {drift:.1e}")
    for norms in ("frozen norms, transcoders", "frozen norms, model feed-forwards",
                  "frozen norms, model feed-forwards, the head's GELU live",
                  "frozen norms, model feed-forwards, the head's LayerNorm live",
                  "frozen norms, model feed-forwards, the head live", "live norms"):
        for scale in SCALES:
            label = f"{norms}, {'the whole activation' if scale == 0 else 'a tenth of it (x10)'}"
            cells = []
            for kind in ("top", "random"):
                predicted = np.array([p for p, _, _ in rows[kind]])
                measured = np.array([m[norms, scale] for _, m, _ in rows[kind]])
                agree = np.sign(predicted) == np.sign(measured)
                cells.append(f"{kind} {agree.mean():.3f} ({agree.sum()}/{len(agree)})")
                if kind == "top":
                    r = np.corrcoef(predicted, measured)[0, 1]
                    ratio = np.median(np.abs(measured) / np.maximum(np.abs(predicted), 1e-12))
                    cells.append(f"r {r:.3f}, median |measured|/|predicted| {ratio:.2f}")
            print(f"  {label}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
