# %% [markdown]
# # One prediction as a graph of features: attribution graphs for an encoder
#
# Each feed-forward of `bundled-mlm` is replaced by a **skip transcoder** (shipped: 48 of 3,072 features a token, and a
# linear path). With the attention patterns and LayerNorm scales frozen from the real run, the prediction at
# `[MASK]` splits into a graph: the transcoders' active features at (layer, position), error nodes (what the
# transcoders miss) and the input embeddings, each edge a direct effect (Ameisen et al. 2025; circuit-tracer's
# pruning and scores). Then the graph is put to the test: a feature switched off in the real model moves the
# prediction as the graph says? Runs offline on the CPU in seconds.

# %%
import numpy as np

from bertscope import load_model
from bertscope.features.shipped import transcoder_set
from bertscope.graphs import attribution_graph

lm = load_model("bundled-mlm", device="cpu")
transcoders = transcoder_set(lm)  # the shipped set: bertscope/data/bundled_mlm_transcoders
graph = attribution_graph(lm, "The bank of the [MASK] was muddy after the storm.", transcoders, target="river")
print(f"'river' against the mean logit: {graph.value:+.3f}; {graph.n_features:,} active features, "
      f"{len(graph.nodes):,} nodes, traced in {graph.seconds:.1f} s")
print(f"replacement score {graph.replacement_score:.3f}, completeness score {graph.completeness_score:.3f}")

# %% [markdown]
# ## The identities that make it a graph
# Every node's input is the sum of its incoming edges plus its bias (the biases' share, from the same frozen pass
# with every source at zero), and the target's value too.

# %%
gap = np.abs(graph.adjacency.sum(1) + graph.bias - graph.inputs)[:graph.n_features].max()
print(f"largest gap between a feature's input and its edges + bias: {gap:.2e}")
print(f"the target: edges + bias = {graph.adjacency[-1].sum() + graph.bias[-1]:+.4f}, its value {graph.inputs[-1]:+.4f}")

# %% [markdown]
# ## Pruned to what carries 80 % of the influence

# %%
pruned = graph.to_json(keep=0.8)
strongest = sorted((n for n in pruned["nodes"] if n["kind"] != "target"), key=lambda n: -n["influence"])[:8]
for n in strongest:
    where = graph.tokens[n["position"]]
    print(f"{n['id']:<14} {n['kind']:<9} at {where!r:<10} influence {n['influence']:.3f}")

# %% [markdown]
# ## Does the model agree? Switch the strongest features off
# The real model runs as circuit-tracer's `feature_intervention` runs it: the feature's write leaves its layer's
# feed-forward output at its position (what the transcoder misses stays in), attention patterns held at the real
# run's. The graph predicts minus the feature's total effect.

# %%
from bertscope.graphs.interventions import agreement  # noqa: E402

strongest, drawn = agreement(lm, graph, transcoders, top=5)
for x in strongest:
    print(f"{x.node:<14} graph {x.predicted:+.3f}  model {x.measured:+.3f}  {'agree' if x.agrees else 'differ'}")
print(f"signs agree for {sum(x.agrees for x in strongest)}/5 of the strongest, "
      f"{sum(x.agrees for x in drawn)}/5 of random active features")
