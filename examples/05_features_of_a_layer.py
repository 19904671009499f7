# %% [markdown]
# # The features of a layer
#
# A TopK sparse autoencoder (Gao et al. 2024) splits layer 2's output of bundled-mlm into 3,072
# features, 32 active per word piece. BertScope ships one per layer, in SAELens's format. Which features
# fire on a text, where one fires hardest over Brown, and what switching it off or steering with it does.

# %%
from bertscope import load_model
from bertscope.corpora.tagged import brown_tagged
from bertscope.features import (
    FeatureEdit,
    active_features,
    edit_features,
    feature_contexts,
    feature_statistics,
    load_sae,
    shipped_saes,
)

lm = load_model("bundled-mlm", device="cpu")
layer = 2
sae = load_sae(shipped_saes("bundled-mlm") / f"layer_{layer:02d}")
text = "You should have seen the bank of the river after the storm."
found = active_features(lm, sae, text, layer)
for row in found["tokens"][1:6]:
    print(f"{row['token']:>8}:", [f["feature"] for f in row["features"][:4]])

# %% [markdown]
# ## One feature over Brown
# One pass over 400 Brown sentences (kept on disk): each feature's top contexts and gold-tag labels.

# %%
corpus = brown_tagged(400, seed=0)
stats = feature_statistics(lm, {layer: sae}, corpus)[layer]
should = next(r for r in found["tokens"] if r["token"] == "should")["features"][0]["feature"]
for context in feature_contexts(lm, sae, stats, corpus, should, layer, top=3):
    print(f"{context.peak:5.2f}  {context.source}: {context.text[:90]}")

# %% [markdown]
# ## Switch it off, or steer with it
# The masked-token prediction with the feature's contribution removed from the layer's output wherever it
# fires ("should"), then with the mask pushed along the feature's direction.

# %%
def top(change) -> list[str]:
    return [f"{p['token']} {p['probability']:.2f}" for p in change["after"][:3]]


masked = "You should have [MASK] the bank of the river after the storm."
off = edit_features(lm, masked, {layer: sae}, [FeatureEdit(layer, should, "remove")]).masks[0].to_json()
print("intact  ", [f"{p['token']} {p['probability']:.2f}" for p in off["before"][:3]])
print("off     ", top(off))
steer = "You [MASK] have seen the bank of the river after the storm."
steered = edit_features(lm, steer, {layer: sae}, [FeatureEdit(layer, should, "steer", strength=8.0)]).masks[0].to_json()
print("steered ", [f"{p['token']} {p['probability']:.2f}" for p in steered["before"][:3]], "->", top(steered))
