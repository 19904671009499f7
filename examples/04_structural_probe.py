# %% [markdown]
# # The structural probe on UD English-EWT
#
# Hewitt & Manning (2019): a linear map under which squared distances between word vectors equal the
# distances between words in the parse tree. UUAS is how many of the gold tree's (undirected) arcs the
# minimum spanning tree of the predicted distances finds; the right-branching chain is the baseline to
# beat. Needs the treebank once: `bertscope corpus install ewt`.

# %%
from bertscope import load_model
from bertscope.analysis.structural_runs import structural_probes

lm = load_model("bundled", device="cpu")
result = structural_probes(lm, layers=[0, 2, 5], what="distance", max_train=300, max_test=100, seed=0)
print(result.counts["train_sentences"], "training,", result.counts["dev_sentences"], "dev,",
      result.counts["test_sentences"], "test sentences")
for row in result.layers:
    print(f"{row['layer']!s:>10}: UUAS {row['uuas']:.3f}  DSpr. {row['dspr']:.3f}")
print("chain baseline UUAS", round(result.baselines["chain"]["uuas"], 3))

# %% [markdown]
# A sentence's predicted tree at the best layer, beside the gold one.

# %%
tree = result.trees[0]
words = tree["words"]
print(" ".join(words))
gold = {tuple(sorted((i + 1, h))) for i, h in enumerate(tree["gold_heads"]) if h}  # words from 1; 0 is the root
predicted = {tuple(sorted(e)) for e in tree["predicted_edges"]}
print(f"{len(gold & predicted)} of {len(gold)} gold arcs found:", sorted(gold & predicted))
assert result.layers[result.best_index]["uuas"] > result.baselines["chain"]["uuas"] - 0.2
