# %% [markdown]
# # Probe a layer, with its control task
#
# A linear probe per hidden state, trained on Brown's parts of speech (real text, split by document).
# Hewitt & Liang (2019)'s control task gives each word type a random label: a probe that scores well
# there is memorising words, so *selectivity* (task accuracy − control accuracy) is what the layer offers.

# %%
from bertscope import HiddenStateCache, hidden_states, load_model, probe_layers, shipped_task

lm = load_model("bundled", device="cpu")
task = shipped_task("brown-pos", size=400)  # 400 Brown sentences over all 15 genres
states = hidden_states(lm, task, "mean", HiddenStateCache())  # every layer's word vectors, cached on disk
result = probe_layers(states, task.name, "mean", steps=60)
print(f"{result.n_train} training and {result.n_test} test words; majority baseline {result.majority_baseline:.3f}")
for layer in result.layers:
    print(f"{layer.name:>10}: accuracy {layer.accuracy:.3f}  control {layer.control_accuracy:.3f}  "
          f"selectivity {layer.selectivity:+.3f}")

# %% [markdown]
# The embeddings already know many parts of speech (a word's usual tag); the middle layers add the rest,
# and selectivity shows how much of that is more than memorised word types.

# %%
best = max(result.layers, key=lambda x: x.selectivity)
print("most selective:", best.name)
assert best.accuracy > result.majority_baseline
