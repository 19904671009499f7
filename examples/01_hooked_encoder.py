# %% [markdown]
# # The hooked encoder in ten lines
#
# Every activation of a BERT-family encoder has a name (TransformerLens's, on every family). One call runs
# the model and returns what you asked for; a hook reads or edits an activation for one pass. This runs
# offline on **bundled-mlm** (all-MiniLM-L6-v2 with a masked-LM head trained by BertScope on Brown).

# %%
from bertscope import fill_mask, load_model, zero_head

lm = load_model("bundled-mlm", device="cpu")
text = "He wrote a [MASK] to his mother."
print(lm.hook_names[:8], "…", len(lm.hook_names), "names")

# %% [markdown]
# ## Run with a cache
# `run_with_cache` keeps the named activations of one pass, on the model's device.

# %%
out, cache = lm.run_with_cache(text, names=["blocks.3.hook_resid_post", "blocks.3.attn.hook_pattern"])
print(cache["blocks.3.hook_resid_post"].shape)   # [batch, pos, d_model]
print(cache["blocks.3.attn.hook_pattern"].shape)  # [batch, head, query, key]

# %% [markdown]
# ## A hook that edits
# The masked-LM head's answer, then the same pass with the residual stream halved after layer 4.

# %%
before = fill_mask(lm, text, 3).predictions[0]
with lm.hooks({"blocks.4.hook_resid_post": lambda x, hook: x * 0.5}):
    halved = fill_mask(lm, text, 3).predictions[0]
print([p.token for p in before], "->", [p.token for p in halved])

# %% [markdown]
# ## One head zeroed
# `zero_head(h)` zeroes head h's context (`attn.hook_z`) before W_O mixes the heads. Which head of layer 2
# moves the answer's probability most?

# %%
import torch  # noqa: E402

mask = lm.tokenizer(text)["input_ids"].index(lm.tokenizer.mask_token_id)
answer = lm.tokenizer.convert_tokens_to_ids(before[0].token)


def p_answer(hooks=None) -> float:
    logits = lm.run(text, hooks=hooks).logits[0, mask]
    return torch.softmax(logits.float(), -1)[answer].item()


base = p_answer()
effects = {h: base - p_answer({"blocks.2.attn.hook_z": zero_head(h)}) for h in range(lm.num_heads)}
head, drop = max(effects.items(), key=lambda kv: kv[1])
print(f"p({before[0].token}) = {base:.3f}; zeroing layer 2, head {head} takes {drop:+.3f} off it")
assert 0 <= base <= 1 and len(effects) == lm.num_heads
