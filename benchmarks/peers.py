"""BertScope's speed beside the tools a user would otherwise pick: ratios measured in one run, interleaved, on the
same inputs and threads (figures only; the peers lane's tests hold the numbers equal).

    .venv-peers/bin/python benchmarks/peers.py [--model bundled-mlm | random:bert-base-uncased] [--repeats 5]
    .venv-saelens/bin/python benchmarks/peers.py --sae [--tokens 65536]
    .venv-peers/bin/python benchmarks/peers.py --crosscoder DL_DIR [--tokens 65536] [--device auto]

Each section runs where its peer is installed (``make test-peers`` builds both environments):

- **run_with_cache** (every hook point, 16 sentences) against TransformerLens 4.3's
  ``TransformerBridge.run_with_cache`` (every hook), beside the bare Hugging Face forward; goal <= 1.0x.
- **Integrated gradients** (50 Gauss-Legendre steps, one [MASK] prediction) against captum's
  ``LayerIntegratedGradients`` on the word embeddings, same steps; goal <= 1.0x.
- **Patching grids** (every hidden state x position, every layer x head) against nnsight 0.8's interventions
  (one trace per row, one invoke per cell: ``peers/references.py``); goal <= 1.0x.
- **SAE training** (``--sae``): ``features.trainer.train_sae`` against SAELens 6.54's ``SAETrainer`` with a
  ``TopKTrainingSAE`` of the same width, k, batch and learning rate, on the same activations (BertScope streams
  its float16 cache from disk; SAELens is handed every row in memory as float32, its cheapest data); tokens per
  second, goal >= 1.0x.
- **Crosscoder training** (``--crosscoder DL_DIR``): ``features.crosscoder_trainer.train_crosscoder`` against the
  reference's ``BatchTopKCrossCoderTrainer`` (science-of-finetuning/dictionary_learning, not on PyPI: DL_DIR is its
  ``dictionary_learning`` folder, e.g. ``git archive HEAD dictionary_learning | tar -x -C /tmp/dl``), the same
  BatchTopK crosscoder of two models' rows, k, batch and learning rate. The reference's ``update`` is called over
  every batch, the rows in memory as float32 (its cheapest data); BertScope's whole call streams its two float16
  caches from disk and saves. Tokens per second, goal >= 1.0x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.timing import add_model_args, interleaved, load, synchronize  # noqa: E402

SENTENCES = ["The bank of the river was muddy after the rain.", "She deposited the money at the bank.",
             "The keys to the cabinet are on the table.", "A dog slept under the old oak tree."] * 4


def _ratio(name: str, times: dict[str, list[float]], ours: str, theirs: str, goal: str, extra: str = "") -> None:
    o, t = statistics.median(times[ours]), statistics.median(times[theirs])
    print(f"{name}: BertScope {o * 1000:.1f} ms, {theirs} {t * 1000:.1f} ms, ratio {o / t:.2f} ({goal}){extra}")


def run_with_cache(lm, repeats: int) -> None:
    from transformer_lens.model_bridge import TransformerBridge

    from benchmarks.timing import bare_forward
    from bertscope.interop.hook_names import SAME, at

    bridge = TransformerBridge.boot_transformers(str(lm.source), device=str(lm.device), dtype=lm.dtype)
    feed = {k: v.to(lm.device) for k, v in lm.tokenizer(SENTENCES, return_tensors="pt", padding=True).items()}
    ids, mask = feed["input_ids"], feed["attention_mask"]
    layers = range(lm.num_layers)
    ours = [at(n, layer) for n in SAME for layer in (layers if "{l}" in n else [0])]
    theirs = [at(SAME[n], layer) for n in SAME for layer in (layers if "{l}" in n else [0])]
    ours, theirs = list(dict.fromkeys(ours)), list(dict.fromkeys(theirs))

    def bridge_cache(names=None):
        with torch.inference_mode():
            bridge.run_with_cache(ids, attention_mask=mask, names_filter=names)

    times = interleaved({"BertScope": lambda: lm.run_with_cache(feed, names=ours),
                         "TransformerLens": lambda: bridge_cache(theirs),
                         "BertScope, every hook point": lambda: lm.run_with_cache(feed, names=lambda n: True),
                         "TransformerLens, every hook": lambda: bridge_cache(),
                         "bare forward": lambda: bare_forward(lm, SENTENCES, heads=True)}, repeats, lm.device)
    bare = statistics.median(times["bare forward"])
    each = ", ".join(f"{k} {statistics.median(v) / bare:.2f}x" for k, v in times.items() if k != "bare forward")
    _ratio(f"run_with_cache, the {len(ours)} tensors both name ({lm.name}, {len(SENTENCES)} sentences)", times,
           "BertScope", "TransformerLens", "goal <= 1.0")
    _ratio("run_with_cache, each tool's whole cache (BertScope's every name, attn.hook_result included; every hook of the bridge)",
           times, "BertScope, every hook point", "TransformerLens, every hook", "for information",
           f"; against the bare forward ({bare * 1000:.1f} ms): {each}")


def integrated_gradients(lm, repeats: int) -> None:
    from captum.attr import LayerIntegratedGradients

    from bertscope import inspect
    from bertscope.attribution.gradients import integrated_gradients as ig
    from bertscope.attribution.targets import Target
    from peers.references import ANSWER, MASKED, captum_setup

    ins = inspect(lm, MASKED)
    target = Target("token", list(ins.tokens).index(lm.tokenizer.mask_token), ANSWER)
    _, f, ids, base_ids, _ = captum_setup(lm)
    _, f_at, _, _, _ = captum_setup(lm, head_at_position=True)
    lig = LayerIntegratedGradients(f, lm.model.get_input_embeddings())
    lig_at = LayerIntegratedGradients(f_at, lm.model.get_input_embeddings())
    times = interleaved({"BertScope": lambda: ig(lm, ins, target, steps=50),
                         "captum": lambda: lig.attribute(ids, baselines=base_ids, n_steps=50, method="gausslegendre"),
                         "captum, head at [MASK]": lambda: lig_at.attribute(
                             ids, baselines=base_ids, n_steps=50, method="gausslegendre",
                             return_convergence_delta=True)},  # BertScope reports completeness too
                        repeats, lm.device)
    _ratio(f"integrated gradients, 50 steps ({lm.name}, {ins.n_tokens} tokens), captum's forward as its tutorials "
           "write it", times, "BertScope", "captum", "goal <= 1.0")
    _ratio("integrated gradients, captum given the same forward (the head at [MASK] alone) and asked for its "
           "convergence delta (BertScope's completeness gap)", times, "BertScope",
           "captum, head at [MASK]", "goal <= 1.0")


def patching(lm, repeats: int) -> None:
    from bertscope import patch
    from peers.references import CANDIDATES, CLEAN, CORRUPT, nnsight_head_grid, nnsight_hidden_grid, wrapped

    model = wrapped(lm)
    for what, grid in (("hidden", nnsight_hidden_grid), ("heads", nnsight_head_grid)):
        times = interleaved({"BertScope": lambda: patch(lm, CLEAN, CORRUPT, list(CANDIDATES), what=what),
                             "nnsight": lambda: grid(lm, model)}, repeats, lm.device)
        cells = (lm.num_layers + 1) * len(lm.tokenizer(CLEAN)["input_ids"]) if what == "hidden" else \
            lm.num_layers * lm.num_heads
        _ratio(f"patching grid, {what} ({lm.name}, {cells} cells)", times, "BertScope", "nnsight", "goal <= 1.0")


def in_memory(rows: np.ndarray, batch: int):
    """SAELens's data at its cheapest: every row already in memory as float32, shuffled batches (SAELens's own
    ActivationsStore reads and mixes a buffer; this gives its trainer the fastest data it could have)."""
    x = torch.from_numpy(np.asarray(rows, dtype=np.float32))
    while True:
        order = torch.randperm(len(x))
        for start in range(0, len(x) - batch + 1, batch):
            yield x[order[start:start + batch]]


def sae_training(tokens: int, repeats: int, d_in: int = 384, expansion: int = 8, k: int = 32, batch: int = 2048
                 ) -> None:
    from sae_lens import TopKTrainingSAE, TopKTrainingSAEConfig
    from sae_lens.config import SAETrainerConfig
    from sae_lens.training.sae_trainer import SAETrainer

    from bertscope.features.activations import ActivationSet
    from bertscope.features.sae import SaeInfo
    from bertscope.features.trainer import SaeTrainConfig, train_sae

    d_sae = expansion * d_in
    cfg = SaeTrainConfig(expansion=expansion, k=k, epochs=1, batch_tokens=batch)
    lr = cfg.rate(d_sae)
    steps = tokens // batch
    rng = np.random.default_rng(0)
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "rows.npy", rng.normal(size=(tokens, d_in)).astype(np.float16))
        rows = np.load(Path(tmp) / "rows.npy", mmap_mode="r")  # BertScope's activation cache: float16 on disk
        acts = ActivationSet(Path(tmp), 0, rows, np.zeros((tokens, 2), np.int32), ())
        for r in range(repeats + 1):  # the first round warms both up
            start = time.perf_counter()
            _, state = train_sae(acts, cfg, Path(tmp) / f"run{r}", SaeInfo("synthetic", "blocks.0.hook_resid_post"),
                                 resume=False)  # the whole call: setup, the epoch, its checkpoint and the save
            ours_seconds = time.perf_counter() - start
            sae = TopKTrainingSAE(TopKTrainingSAEConfig(d_in=d_in, d_sae=d_sae, k=k, dtype="float32", device="cpu"))
            trainer_cfg = SAETrainerConfig(total_training_samples=steps * batch, train_batch_size_samples=batch,
                                           lr=lr, lr_end=lr)
            trainer = SAETrainer(cfg=trainer_cfg, sae=sae, data_provider=in_memory(rows, batch))
            start = time.perf_counter()
            trainer.fit()
            seconds = time.perf_counter() - start
            if r:  # tokens each trained on: BertScope's epoch is every whole batch, SAELens counts samples
                ours.append(state.step * batch / ours_seconds)
                theirs.append(trainer.n_training_samples / seconds)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"SAE training, TopK {d_in} -> {d_sae} (k={k}), {steps * batch:,} tokens in batches of {batch} "
          f"({torch.get_num_threads()} threads): train_sae {o:,.0f} tokens/s, SAELens SAETrainer {t:,.0f} tokens/s, "
          f"ratio {o / t:.2f} (goal >= 1.0)")


def reference_crosscoder_trainer(folder: Path, into: Path):
    """The reference's ``BatchTopKCrossCoderTrainer`` imported from its source, without the package's ``__init__``
    (which imports nnsight 0.3, datasets and wandb): ``dictionary.py``, ``trainers/trainer.py`` and
    ``trainers/crosscoder.py`` as they are, ``utils.py`` cut to the two functions they import from it."""
    import ast
    import shutil

    package = into / "dl_reference"
    (package / "trainers").mkdir(parents=True)
    for name in ("dictionary.py", "trainers/trainer.py", "trainers/crosscoder.py"):
        shutil.copy(folder / name, package / name)
    (package / "__init__.py").write_text("")
    (package / "trainers" / "__init__.py").write_text("")
    source = (folder / "utils.py").read_text()
    kept = [ast.get_source_segment(source, node) for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
            and node.name in ("set_decoder_norm_to_unit_norm", "remove_gradient_parallel_to_decoder_directions")]
    (package / "utils.py").write_text("import torch as th\nimport einops\n\n\n" + "\n\n\n".join(kept) + "\n")
    sys.path.insert(0, str(into))
    from dl_reference.trainers.crosscoder import BatchTopKCrossCoderTrainer

    return BatchTopKCrossCoderTrainer


def crosscoder_training(reference: Path, tokens: int, repeats: int, device: str = "auto", d_in: int = 384,
                        expansion: int = 4, k: int = 32, batch: int = 2048) -> None:
    from bertscope.features.activations import ActivationSet
    from bertscope.features.crosscoder import CrosscoderInfo
    from bertscope.features.crosscoder_trainer import CrosscoderTrainConfig, train_crosscoder
    from bertscope.runtime.devices import resolve_device

    d_sae = expansion * d_in
    lr = 2e-3  # what ``bertscope train-crosscoder`` passes
    on = str(resolve_device(device))  # both trainers on it
    cfg = CrosscoderTrainConfig(expansion=expansion, k=k, epochs=1, batch_tokens=batch, lr=lr)
    rng = np.random.default_rng(0)
    ours, theirs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        Trainer = reference_crosscoder_trainer(reference, Path(tmp))
        sets = []
        for side in ("base", "tuned"):
            np.save(Path(tmp) / f"{side}.npy", rng.normal(size=(tokens, d_in)).astype(np.float16))
            rows = np.load(Path(tmp) / f"{side}.npy", mmap_mode="r")  # BertScope's caches: float16 on disk
            sets.append(ActivationSet(Path(tmp), 0, rows, np.zeros((tokens, 2), np.int32), ()))
        both = torch.from_numpy(np.stack([np.asarray(s.rows, np.float32) for s in sets], axis=1))  # [tokens, 2, d_in]
        info = CrosscoderInfo(("base", "tuned"), "blocks.0.hook_resid_post")
        for r in range(repeats + 1):  # the first round warms both up
            start = time.perf_counter()
            _, state = train_crosscoder(*sets, cfg, Path(tmp) / f"run{r}", info, device=on,
                                        resume=False)  # the whole call
            ours_seconds = time.perf_counter() - start
            steps = tokens // batch
            start = time.perf_counter()
            trainer = Trainer(steps=steps, activation_dim=d_in, dict_size=d_sae, k=k, layer=0, lm_name="synthetic",
                              lr=lr, warmup_steps=max(1, int(cfg.warmup * steps)), threshold_start_step=0, seed=r,
                              device=on)
            order = torch.randperm(tokens)
            for step in range(steps):  # the reference's training loop calls update() batch by batch
                trainer.update(step, both[order[step * batch:(step + 1) * batch]].to(on))  # a copy: it normalises in place
            synchronize(on)  # its steps queued on a GPU: done before the clock stops
            seconds = time.perf_counter() - start
            if r:
                ours.append(state.step * batch / ours_seconds)
                theirs.append(steps * batch / seconds)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(f"Crosscoder training, BatchTopK 2 x {d_in} -> {d_sae} (k={k}), {tokens:,} tokens in batches of {batch} "
          f"(on {on}, {torch.get_num_threads()} CPU threads): train_crosscoder {o:,.0f} tokens/s, the reference's "
          f"BatchTopKCrossCoderTrainer {t:,.0f} tokens/s, ratio {o / t:.2f} (goal >= 1.0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser, "bundled-mlm")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sae", action="store_true", help="SAE training against SAELens's trainer (.venv-saelens)")
    parser.add_argument("--crosscoder", type=Path, metavar="DL_DIR",
                        help="crosscoder training against dictionary_learning's (its source folder)")
    parser.add_argument("--tokens", type=int, default=65_536, help="--sae, --crosscoder: activation rows to train on")
    args = parser.parse_args()
    if args.crosscoder:
        crosscoder_training(args.crosscoder, args.tokens, max(1, args.repeats // 2), args.device)
        return
    if args.sae:
        sae_training(args.tokens, max(1, args.repeats // 2))
        return
    lm = load(args, heads="mlm")
    run_with_cache(lm, args.repeats)
    integrated_gradients(lm, args.repeats)
    patching(lm, args.repeats)


if __name__ == "__main__":
    main()
