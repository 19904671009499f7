# %% [markdown]
# # Is the concept used? TCAV, DAS, the tuned lens, and the peers' attributions
#
# Four ways past "a probe can read it": whether a classifier's decision **moves with** a concept given by examples
# (TCAV, Kim et al. 2018, with its test against random concepts), whether a variable of a causal model is **computed**
# in a subspace whose swap does what swapping the variable does (distributed alignment search, Geiger et al. 2024), what
# each layer **already carries toward the
# answer** (the tuned lens, Belrose et al. 2023, beside the logit lens), and whether the attribution methods users
# run elsewhere (occlusion, LIME, KernelSHAP, SmoothGrad) are **faithful** on this encoder. Runs offline, on
# `bundled-sentiment` (all-MiniLM-L6-v2 fine-tuned on tweets) and `bundled-mlm`.

# %%
from bertscope import load_model
from bertscope.causal.cavs import EXAMPLES, tcav

lm = load_model("bundled-sentiment", device="cpu")
positive = next(label for label in lm.task.labels if label.lower().startswith("pos"))
praise = list(EXAMPLES["praise"][1])
print(f"{len(praise)} examples of praise, e.g. {praise[0]!r}; the decision: {positive}")

# %% [markdown]
# ## TCAV: does the positive decision move with praise?
# One CAV per layer and random set (20 random sets of Brown sentences), and as many CAVs between random sets: the
# t-test (Bonferroni over the layers) tells a concept from chance.

# %%
result = tcav(lm, praise, positive, name="praise", runs=20, n_inputs=30)
for v in result.layers:
    print(f"layer {v.layer!s:>10}: TCAV {v.tcav:.2f} (random CAVs {sum(v.random_scores) / len(v.random_scores):.2f}), "
          f"CAV accuracy {v.cav_accuracy:.2f}, p = {v.p_value:.1e} -> {'significant' if v.significant else 'not'}")

# %% [markdown]
# ## The tuned lens beside the logit lens
# The lens shipped for bundled-sentiment reads each layer through a translator trained so the head reads it as the
# last layer's output; KL to the final decision, layer by layer. On held-out text it is closer to the final layer than
# the logit lens at every layer (BENCHMARKS.md); on one strongly worded sentence its early layers, which carry little
# of this decision, can read as the label's average instead.

# %%
from bertscope.lenses.readings import lens_readings  # noqa: E402
from bertscope.lenses.shipped import find_lens  # noqa: E402

read = lens_readings(lm, find_lens(lm), "What a wonderful evening, thank you all!")
for r in read.layers:
    print(f"{r.layer!s:>10}: tuned {r.tuned[0][0]} ({r.tuned[0][1]:.2f}), KL {r.kl_tuned:.3f}  |  "
          f"logit {r.logit[0][0]} ({r.logit[0][1]:.2f}), KL {r.kl_logit:.3f}")

# %% [markdown]
# ## Which attribution to trust here?
# The faithfulness scoreboard on a few Brown sentences: the peers' methods (captum's occlusion, LIME and
# SmoothGrad, shap's KernelSHAP) beside integrated gradients and the random floor.

# %%
from bertscope.attribution.class_items import brown_class_items  # noqa: E402
from bertscope.attribution.faithfulness import faithfulness  # noqa: E402

board = faithfulness(lm, brown_class_items(lm, 6), ["ig", "occlusion", "lime", "kernelshap", "smoothgrad", "random"],
                     steps=16)
for method, row in board.summary().items():
    print(f"{method:>11}: comprehensiveness {row['comprehensiveness']['mean']:.3f}, "
          f"sufficiency {row['sufficiency']['mean']:.3f}, {row['seconds_per_item']:.2f} s an explanation")

# %% [markdown]
# ## DAS: where does bundled-mlm keep the subject's number?
# Pairs of a base and a source that differ in the subject (*The dogs near the car [MASK] here.*): a one-dimensional
# subspace at the subject, trained so that swapping it moves was/were as swapping the subject's number would; its
# interchange intervention accuracy on held-out pairs beside a random direction and a single neuron.

# %%
from bertscope.causal import align  # noqa: E402

mlm = load_model("bundled-mlm", device="cpu")
found = align(mlm, task="agreement", layer=1, pairs=400)
print(f"layer {found.layer}, a {found.dim}-dimensional subspace at the subject: IIA {found.iia:.2f} | random direction "
      f"{found.iia_random_rotation:.2f} | one neuron {found.iia_neurons:.2f} | the whole state {found.iia_full_vector:.2f}")

