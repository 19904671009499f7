# %% [markdown]
# # Explain your classifier
#
# **bundled-sentiment** is the bundled encoder fine-tuned by BertScope on tweets (negative, neutral,
# positive). Which words made its decision (integrated gradients), which attribution method deserves
# trust on this model (an erasure test), and where in the network the decision is carried (patching).

# %%
from bertscope import attribute, classify, faithfulness, load_model, patch
from bertscope.attribution import Target
from bertscope.attribution.class_items import class_items

lm = load_model("bundled-sentiment", device="cpu")
text = "What a wonderful day at the beach with friends!"
decided = classify(lm, [text])[0]
print(decided.predicted, dict(zip(lm.task.labels, [round(float(s), 3) for s in decided.scores])))

# %% [markdown]
# ## Integrated gradients for the decision
# Each token's share of log p(label), summing to f(x) − f(x′) (the completeness error says how close).

# %%
ig = attribute(lm, text, method="ig", target=Target("class", label=decided.predicted), steps=32)
ranked = sorted(zip(ig.tokens, ig.scores), key=lambda t: -t[1])
print([(t, round(float(s), 3)) for t, s in ranked[:5]], "completeness error", round(ig.completeness_error, 4))

# %% [markdown]
# ## Which attribution to trust here?
# Remove the tokens each method ranks highest and watch p(y) fall (comprehensiveness); keep only them
# (sufficiency). Random ranking is the floor every method must clear.

# %%
texts = ["I love this so much", "worst service ever, never again", "the meeting is at noon",
         "great game tonight!", "this is awful and sad", "not bad at all", "the bus was late again",
         "what a beautiful song"]
items, skipped = class_items(lm, texts)
board = faithfulness(lm, items, ["ig", "grad", "attention", "rollout", "random"], steps=16)
for method, figures in board.summary().items():
    print(f"{method:>10}: comprehensiveness {figures['comprehensiveness']['mean']:+.3f}, "
          f"sufficiency {figures['sufficiency']['mean']:+.3f}")

# %% [markdown]
# ## Patching the decision
# The clean text's states put into a corrupted one's run, cell by cell: where does "wonderful" carry
# the positive decision?

# %%
result = patch(lm, "What a wonderful day at the beach!", "What a terrible day at the beach!",
               ("positive", "negative"), "hidden")
best = result.recovered.max(axis=1)
print("recovered by the best position at each hidden state:", [round(float(x), 2) for x in best])
assert result.recovered.shape[0] == lm.num_layers + 1
