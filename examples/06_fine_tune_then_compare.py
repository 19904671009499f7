# %% [markdown]
# # Fine-tune, then compare with the base
#
# BERT's second stage on the bundled encoder: a sentiment head trained on 512 tweets (LoRA adapters, the
# head in full), then what fine-tuning moved: linear CKA between each layer of the base and the same layer
# of the fine-tuned model, over Brown's words (1 = the same representation up to rotation and scale).

# %%
import tempfile

from bertscope import FinetuneConfig, compare_layers, finetune, load_model, load_task_data, shipped_task
from bertscope.core.layers import hidden_label
from bertscope.training.task_metrics import read_task_metrics

run = tempfile.mkdtemp(prefix="bertscope-example-")
data = load_task_data("classify", "sentiment")
cfg = FinetuneConfig(task="classify", lora_rank=16, lr=5e-4, epochs=1, max_examples=512, max_held_out=256, seed=0)
finetune("bundled", data, run, cfg, device="cpu")
m = read_task_metrics(run)
print(f"held-out accuracy {m.before.accuracy:.3f} -> {m.after.accuracy:.3f} over {m.after.count} tweets; "
      f"macro-F1 {m.after.macro_f1:.3f}")

# %% [markdown]
# ## What moved
# The diagonal of the CKA matrix: each hidden state of the base against the same one after fine-tuning.

# %%
base, tuned = load_model("bundled", device="cpu"), load_model(f"{run}/model", device="cpu")
similarity = compare_layers(base, tuned, shipped_task("brown-pos", size=80))
for state in range(len(similarity.cka)):  # 0 = the embeddings, l + 1 = layer l's output
    print(f"{hidden_label(state)!s:>10}: CKA {similarity.cka[state][state]:.3f}")
assert similarity.cka[0][0] > 0.99  # the embeddings were not trained (LoRA wraps the blocks' projections)
