"""Circuits' figures (issue 51).

    python benchmarks/circuits.py --speed [--model bundled-mlm | random:bert-base-uncased] [--tokens 512]
                                  [--device auto] [--dtype auto] [--rounds 3] [--skip-exact]
                                  [--circuits-only]
    python benchmarks/circuits.py --tasks [--size 32] [--steps 5]
    python benchmarks/circuits.py --nodes
    python benchmarks/circuits.py --memory [--model random:bert-base-uncased] [--tokens 512] [--pairs 8]
    python benchmarks/circuits.py --transport [--model random:bert-base-uncased] [--tokens 512] [--rounds 3]

``--speed``: on one clean/corrupted pair of ``--tokens`` tokens, each cost as a ratio to the same batch's
plain passes, the median of interleaved rounds in one run: node attribution (AtP over every head × position, hidden state and
feed-forward) against a forward+backward, and exact patching of every head against it; EAP over every
edge and EAP-IG (5 steps) against a forward+backward; evaluating one circuit against a forward, alone and as a pass of a
sweep (``faithfulness.evaluate`` reuses one pass's buffers in the next). With
``random:CONFIG`` a random model of that config's real size (``core.random_models``). Each phase's peak
resident memory above the process's before its first call (sampled every 5 ms; memory the allocator keeps
from an earlier step is not counted again), against the circuit pass's byte budget.

``--tasks``: per built-in task on its shipped model, every method's CPR and CMD (held-out half of the
pairs) beside random circuits, and the smallest share of edges that is 80 % faithful, as Markdown.

``--memory``: ``find_circuit`` (EAP, circuits of 1 %, 10 % and 100 % of the edges) on 2 and then ``--pairs``
pairs of ``--tokens`` tokens, the peak resident memory each call adds and its seconds: a recorded pair's runs are
read when needed and let go after, so the peak stays one pair's, however many pairs there are.

``--transport``: the circuit pass's LayerNorm transport (``circuits.norm_transport``) at the model's size,
alone and with the next block's q, k and v inputs reading 10 % of the carried senders in the same sweep: the
fused kernel against torch's kernels on the same buffers (a quarter, half and all of the senders carried, one
circuit), as a ratio per size in one run, and the largest difference between what the two give.

``--nodes``: attribution patching against exact patching on the three patching examples and a classifier
pair: correlation, top-10 overlap and the cell the estimate misses most, per grid and method.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.timing import add_model_args, describe, interleaved, load  # noqa: E402


class PeakRss:
    """The peak resident memory above the level at entry, sampled every 5 ms (torch's allocations too)."""

    def __enter__(self) -> PeakRss:
        self.base = self.peak = self._rss()
        self.running = True
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    @staticmethod
    def _rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def _watch(self) -> None:
        while self.running:
            self.peak = max(self.peak, self._rss())
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()

    @property
    def mib(self) -> float:
        return (self.peak - self.base) / 2**20


def speed(args) -> None:
    from bertscope.circuits.contributions import Scratch
    from bertscope.circuits.decomposed import run_pass
    from bertscope.circuits.edges import attribute_edges, record_pairs
    from bertscope.circuits.faithfulness import row_bytes
    from bertscope.circuits.graph import CircuitGraph
    from bertscope.circuits.nodes import attribute_nodes
    from bertscope.circuits.pairs import Pair, decision
    from bertscope.circuits.runs import layer_weights
    from bertscope.core.hooked_pass import turn
    from bertscope.interventions.patching import patch

    lm = load(args, heads="mlm")
    words = ("the river bank was steep and the water was cold " * 200).split()
    filler = " ".join(words[: max(0, args.tokens - 8)])
    mask = lm.tokenizer.mask_token
    clean, corrupt = f"The men {filler} [MASK] here.", f"The man {filler} [MASK] here."
    clean, corrupt = (t.replace("[MASK]", mask) for t in (clean, corrupt))
    pair = Pair(clean, corrupt, "were", "was")
    weights = layer_weights(lm)
    where, recorded = record_pairs(lm, [pair], "patch", weights)
    item = recorded[0]
    _ = item.clean  # held here: the timed calls read the recorded runs and never record them
    tokens = item.prepared.length
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    feed = item.prepared.corrupted_feed

    def forward():
        with turn(lm), torch.inference_mode():
            decision(lm, lm.run(feed, encoder_only=where == "mask"), item.prepared, where)

    def forward_backward():
        leaf = {}

        def grab(x, hook):  # a gradient needs something to differentiate: the embeddings
            leaf["x"] = torch.zeros_like(x, requires_grad=True)
            return x + leaf["x"]
        with turn(lm), torch.enable_grad():
            out = lm.run(feed, hooks={"embed": grab}, grad=True, encoder_only=where == "mask")
            decision(lm, out, item.prepared, where).sum().backward()

    print(f"{describe(lm)}; {tokens} tokens, {graph.n_edges:,} edges; medians of {args.rounds} interleaved rounds")
    random_keep = torch.from_numpy(graph.top(torch.randn(graph.real.shape).numpy(), graph.n_edges // 10)[None])
    eap = attribute_edges(lm, method="eap", recorded=(where, recorded))
    ranked_keep = torch.from_numpy(graph.top(eap.scores, graph.n_edges // 10)[None])

    def circuit(keep, scratch=None):
        def run():
            with turn(lm), torch.inference_mode():
                run_pass(lm, graph, weights, item, where, keep=keep.to(lm.device), scratch=scratch)
        return run

    steps = [("node attribution (AtP: every head × position, state, MLP)",
              lambda: attribute_nodes(lm, clean, corrupt, ("were", "was"), "atp"), forward_backward,
              "≤ 2.5x forward+backward"),
             ("EAP over every edge", lambda: attribute_edges(lm, method="eap", recorded=(where, recorded)),
              forward_backward, "≤ 3x forward+backward"),
             ("EAP-IG (inputs, 5 steps)",
              lambda: attribute_edges(lm, method="eap-ig-inputs", steps=5, recorded=(where, recorded)),
              forward_backward, "≤ 8x forward+backward"),
             ("evaluating one circuit (10% of edges, at random)", circuit(random_keep), forward,
              f"≤ 2x a forward; row budget {row_bytes(lm, graph, tokens) / 2**20:.0f} MiB"),
             ("evaluating one circuit (EAP's top 10% of edges)", circuit(ranked_keep), forward, "≤ 2x a forward"),
             ("one circuit of a sweep (EAP's top 10%, the sweep's buffers reused)", circuit(ranked_keep, Scratch()),
              forward, "≤ 2x a forward")]
    if args.circuits_only:
        steps = steps[3:]
    elif not args.skip_exact:
        steps.insert(1, ("exact patching of every head (all positions)",
                         lambda: patch(lm, clean, corrupt, ("were", "was"), what="heads"), forward_backward, ""))
    print("| step | seconds | base seconds | ratio | peak RSS added (MiB) | target |\n|---|---|---|---|---|---|")
    for what, fn, base, target in steps:
        with PeakRss() as mem:
            fn()
        times = interleaved({"base": base, "step": fn}, args.rounds, lm.device)
        seconds, base_seconds = float(np.median(times["step"])), float(np.median(times["base"]))
        ratio = float(np.median(np.array(times["step"]) / np.array(times["base"])))
        name_of = "forward" if base is forward else "fwd+bwd"
        print(f"| {what} | {seconds:.3f} | {base_seconds:.3f} ({name_of}) | {ratio:.2f}x {name_of} | {mem.mib:.0f} | "
              f"{target} |", flush=True)


def memory(args) -> None:
    from bertscope.circuits.find import find_circuit
    from bertscope.circuits.pairs import Pair

    lm = load(args, heads="mlm")
    mask = lm.tokenizer.mask_token
    nouns = "river bank water table house garden road field hill town".split()
    pairs = []
    for i in range(args.pairs):  # pairs of one length that differ in their filler
        filler = " ".join(f"the {nouns[(i + j) % len(nouns)]} was cold" for j in range(args.tokens))
        filler = " ".join(filler.split()[: max(0, args.tokens - 8)])
        pairs.append(Pair(f"The men {filler} {mask} here.", f"The man {filler} {mask} here.", "were", "was"))
    print(f"{describe(lm)}; pairs of {args.tokens} tokens; find_circuit(method='eap', sizes=(0.01, 0.1, 1.0))")
    print("| pairs | seconds | peak RSS added (MiB) |\n|---|---|---|")
    for n in sorted({2, args.pairs}):
        start = time.perf_counter()
        with PeakRss() as mem:
            find_circuit(lm, pairs[:n], "eap", sizes=(0.01, 0.1, 1.0))
        print(f"| {n} | {time.perf_counter() - start:.1f} | {mem.mib:.0f} |", flush=True)


def transport(args) -> None:
    from bertscope.circuits.graph import CircuitGraph
    from bertscope.circuits.norm_transport import carry_through_norm_

    lm = load(args, heads="mlm")
    graph = CircuitGraph(lm.num_layers, lm.num_heads)
    d, pos, senders = lm.model.config.hidden_size, args.tokens, graph.n_senders
    dtype = next(lm.model.parameters()).dtype
    dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # the pass widens half precision
    kept = torch.randn(1, pos, senders, d, dtype=dtype, device=lm.device)  # [rows, pos, sender, d]
    ablated = torch.randn(pos, senders, d, dtype=dtype, device=lm.device)  # [pos, sender, d]
    # scales near 1: the buffers are carried again and again in place, and must neither overflow nor go subnormal
    gamma = 0.1 * torch.rand(d, dtype=dtype, device=lm.device) + 0.95
    sigma_clean, sigma_ablated = (0.1 * torch.rand(pos, 1, dtype=dtype, device=lm.device) + 0.95 for _ in range(2))
    # the next block's q, k and v inputs, read in the same sweep: one circuit's 10 % of edges
    readers = (torch.rand(1, 3 * lm.num_heads, senders, device=lm.device) < 0.1).to(dtype)
    print(f"{describe(lm)}; {pos} positions, {senders} senders of {d} values; medians of {args.rounds} interleaved "
          f"rounds")
    if lm.device.type != "cpu":
        print(f"(on {lm.device.type} both columns run torch's kernels: the fused kernel is the CPU's)")
    print("| senders carried | MiB per buffer | transport alone: fused / torch (ms) | ratio | with the next block's "
          "q, k, v reading: fused / torch (ms) | ratio | largest difference / largest value |\n|---|---|---|---|---|---|---|")
    for n in (senders // 4, senders // 2, senders):
        def step(fused: bool, reading: bool):
            def run():
                with torch.inference_mode():  # as the circuit pass runs
                    carry_through_norm_(kept, ablated, n, gamma, sigma_clean, sigma_ablated,
                                        readers[:, :, :n] if reading else None, fused=fused)
            return run
        cells = []
        for reading in (False, True):
            times = interleaved({"fused": step(True, reading), "torch": step(False, reading)}, args.rounds, lm.device)
            fused_s, torch_s = float(np.median(times["fused"])), float(np.median(times["torch"]))
            ratio = float(np.median(np.array(times["torch"]) / np.array(times["fused"])))
            cells.append(f"{fused_s * 1000:.1f} / {torch_s * 1000:.1f} | {ratio:.2f}x")
        results = []
        for fused in (True, False):  # the same buffers through each: what the two give
            k, a = kept.clone(), ablated.clone()
            with torch.inference_mode():
                read = carry_through_norm_(k, a, n, gamma, sigma_clean, sigma_ablated, readers[:, :, :n], fused=fused)
            results.append((k[:, :, :n], a[:, :n], read))
        gap = max(float((x - y).abs().max() / y.abs().max()) for x, y in zip(*results))  # relative to the largest
        mib = pos * n * d * kept.element_size() / 2**20
        print(f"| {n} | {mib:.0f} | {cells[0]} | {cells[1]} | {gap:.1e} |", flush=True)


def tasks(args) -> None:
    from bertscope import load_model
    from bertscope.circuits.edges import METHODS
    from bertscope.circuits.find import find_circuit
    from bertscope.circuits.tasks import TASKS, task_pairs

    print("| task | model | pairs (kept / tried) | method | CPR | random CPR | CMD | random CMD | 80 % faithful at | s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, task in TASKS.items():
        lm = load_model(task.model)
        found = task_pairs(lm, name, args.size)
        for method in METHODS:
            start = time.perf_counter()
            r = find_circuit(lm, found.pairs, method, args.steps)
            f = r.faithfulness
            share = f.share_reaching(0.8)
            print(f"| {name} | {task.model} | {len(found.pairs)} / {found.tried} | {method} | {f.cpr:.3f} | "
                  f"{f.random_cpr:.3f} | {f.cmd:.3f} | {f.random_cmd:.3f} | "
                  f"{'—' if share is None else f'{share:.1%}'} | {time.perf_counter() - start:.0f} |", flush=True)


def nodes(args) -> None:
    from bertscope import load_model
    from bertscope.circuits.nodes import compare_with_patching
    from bertscope.interventions.examples import PATCH_EXAMPLES

    cases = [("bundled-mlm", name, *example) for name, example in PATCH_EXAMPLES.items()]
    cases.append(("bundled-sentiment", "Negation", "The film was very good.", "The film was not good.", "positive",
                  "negative"))
    print("| model | example | grid | method | correlation | top-10 overlap | worst cell: exact → estimate |")
    print("|---|---|---|---|---|---|---|")
    for model, name, clean, corrupt, a, b in cases:
        lm = load_model(model)
        for g in compare_with_patching(lm, clean, corrupt, (a, b), steps=args.steps):
            w = g.worst
            print(f"| {model} | {name} | {g.grid} | {g.method} | {g.correlation:.3f} | {g.top_overlap:.1f} | "
                  f"({w['row']}, {w['column']}): {w['exact']:.2f} → {w['estimate']:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--speed", action="store_true")
    which.add_argument("--tasks", action="store_true")
    which.add_argument("--nodes", action="store_true")
    which.add_argument("--memory", action="store_true")
    which.add_argument("--transport", action="store_true")
    add_model_args(p, "bundled-mlm")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--pairs", type=int, default=8, help="--memory: the most pairs")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--skip-exact", action="store_true", help="leave out exact patching (slow at 512 tokens)")
    p.add_argument("--circuits-only", action="store_true", help="--speed: only the circuit passes")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per step (medians)")
    args = p.parse_args()
    run = speed if args.speed else tasks if args.tasks else memory if args.memory else \
        transport if args.transport else nodes
    run(args)


if __name__ == "__main__":
    main()
