"""Attribution graphs, measured: time, the graph scores over held-out prompts, and the intervention test.

    python benchmarks/graphs.py [--prompts 50] [--transcoders runs/tc-mlm] [--skip-transcoders runs/tc-mlm-skip]
                                [--seed 0] [--head frozen|linear] [--full-size [--full-size-tokens 128]] [--effects]
                                [--against FOLDER]
                                [--against-revision REV] [--repeats 1]

- prompts: held-out Brown sentences (the SAE/transcoder mixture's held-out side is seeded apart from its training
  side; these come from Brown's held-out documents), one alphabetic word masked at random (seeded), cut to 32 word
  pieces around it; the target is the model's own top prediction, against the mean logit;
- per set of transcoders: seconds a graph, the replacement and completeness scores (mean ± sd), the active features,
  and the intervention test: each prompt's 5 most influential features switched off one at a time in the real model
  (errors kept), the sign of the change against the graph's prediction; beside 5 random active features; under
  each protocol of ``graphs.interventions.switch_off`` (``PROTOCOLS``: circuit-tracer's default first, then the same
  with the LayerNorm scales held as the graph holds them);
- ``--full-size``: a BERT-base-sized random model from ``bertscope/configs/`` with random transcoders at 128 tokens
  (``--full-size-tokens N``: N, at most the model's 512): the graph's time and peak memory within the adjacency's
  byte budget, and the rows a backward pass carried within half of it;
- ``--against FOLDER``: the graphs' time alone, the set against another on the same prompts, interleaved (the order
  alternating a prompt) so that both meet the same machine: seconds mean and most for each, their ratio, and whether
  each prompt's graph had the same active features (a set whose encoders were held, refitted or tuned ``--parts
  writes``, does the same work);
- ``--against-revision REV``: the same, the graph code (``graphs/build.py`` and ``frozen.py``) as it was at a git
  revision against the code now, on the same set; ``--repeats N`` builds each graph N times a side and keeps the
  least (this VM's noise is larger than a code change's gain), and the edges' largest difference is printed;
- ``--effects``: the total effects of a graph at the adjacency's whole budget (a 46-word-piece prompt), as
  ``total_effects`` sums them (the series the layers end, in blocks) against the dense solve it replaced: seconds
  and peak memory (tracemalloc), and the largest difference.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def prompts(lm, n: int, seed: int = 0, tokens: int = 32) -> list[str]:
    from bertscope.corpora.brown_tasks import brown_split_texts

    rng = np.random.default_rng(seed)
    out = []
    for text in brown_split_texts(20 * n, held_out=True, seed=seed):
        words = text.split()
        if len(words) < 8:
            continue
        candidates = [i for i, w in enumerate(words) if w.isalpha() and len(w) > 2]
        if not candidates:
            continue
        at = int(rng.choice(candidates))
        lo = max(0, at - 12)
        words = words[lo:lo + 24]
        words[at - lo] = lm.tokenizer.mask_token
        text = " ".join(words)
        ids = lm.tokenizer(text)["input_ids"]
        if len(ids) > tokens:
            continue
        out.append(text)
        if len(out) == n:
            break
    return out


PROTOCOLS = (("model", "frozen", "live"), ("model", "frozen", "frozen"), ("model", "live", "live"),
             ("replacement", "live", "live"))  # (downstream, attention, norms)


def measure(lm, texts: list[str], transcoders, name: str, head: str = "frozen") -> None:
    from bertscope.graphs.build import attribution_graph
    from bertscope.graphs.interventions import agreement, total_effects

    seconds, replacement, completeness, features, lengths = [], [], [], [], []
    top_agree: dict = {p: [] for p in PROTOCOLS}
    random_agree: dict = {p: [] for p in PROTOCOLS}
    for text in texts:
        t = time.perf_counter()
        graph = attribution_graph(lm, text, transcoders, head=head)
        seconds.append(time.perf_counter() - t)
        r, c = graph.scores
        replacement.append(r)
        completeness.append(c)
        features.append(graph.n_features)
        lengths.append(len(graph.tokens))
        effects = total_effects(graph)  # solved once for every protocol
        for protocol in PROTOCOLS:
            downstream, attention, norms = protocol
            strongest, drawn = agreement(lm, graph, transcoders, 5, 0, downstream, attention, effects, norms)
            top_agree[protocol] += [x.agrees for x in strongest]
            random_agree[protocol] += [x.agrees for x in drawn]
    print(f"{name}, the head {head}: {len(texts)} held-out prompts ({np.mean(lengths):.1f} tokens on average, at most "
          f"{max(lengths)}), {np.mean(features):,.0f} active features a graph")
    print(f"  a graph: {np.mean(seconds):.2f} s mean, {np.max(seconds):.2f} s at most")
    print(f"  replacement score {np.mean(replacement):.3f} ± {np.std(replacement):.3f}; completeness score "
          f"{np.mean(completeness):.3f} ± {np.std(completeness):.3f}")
    for (downstream, attention, norms), top in top_agree.items():
        drawn = random_agree[downstream, attention, norms]
        print(f"  intervention sign agreement, downstream {downstream}, attention {attention}, norms {norms}: top-5 nodes "
              f"{np.mean(top):.3f} ({sum(top)}/{len(top)}); 5 random active features {np.mean(drawn):.3f} "
              f"({sum(drawn)}/{len(drawn)})")


def graph_code_at(revision: str):
    """``attribution_graph`` as ``bertscope/graphs/build.py`` and ``frozen.py`` were at a git ``revision`` (the
    rest of the package as it is now): two versions of the graph code timed in one process."""
    import subprocess
    import types

    def module(name: str, path: str, replace: tuple = ()) -> types.ModuleType:
        done = subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), "show", f"{revision}:{path}"],
                              capture_output=True, text=True)
        if done.returncode:
            print(f"--against-revision {revision}: {done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
            raise SystemExit(2)
        source = done.stdout
        for old, new in replace:
            source = source.replace(old, new)
        mod = types.ModuleType(name)
        sys.modules[name] = mod  # dataclasses look their module up
        exec(compile(source, f"{revision}:{path}", "exec"), mod.__dict__)
        return mod

    module("_graphs_frozen_then", "bertscope/graphs/frozen.py")
    return module("_graphs_build_then", "bertscope/graphs/build.py",
                  (("bertscope.graphs.frozen", "_graphs_frozen_then"),)).attribution_graph


def timed_against(lm, texts: list[str], sides: tuple, names: tuple[str, str], head: str = "frozen",
                  repeats: int = 1, same_set: bool = False) -> None:
    """Two sides' graph time on the same prompts, interleaved: ``sides`` = ((attribution_graph, transcoders), …)
    (two sets, or two versions of the code on ``same_set``: then the edges' largest difference is printed too);
    each graph built ``repeats`` times a side, the least time kept."""
    if not texts:
        raise SystemExit("no held-out prompt was drawn: raise --prompts")
    for build, chosen in sides:  # untimed: each side's first graph's one-time costs
        build(lm, texts[0], chosen, head=head)
    seconds: list[list[float]] = [[], []]
    same, differences = 0, []
    for i, text in enumerate(texts):
        graphs: list = [None, None]
        took = [np.inf, np.inf]
        for which in ((0, 1) if i % 2 == 0 else (1, 0)) * repeats:
            build, chosen = sides[which]
            t = time.perf_counter()
            graphs[which] = build(lm, text, chosen, head=head)
            took[which] = min(took[which], time.perf_counter() - t)
        for which in (0, 1):
            seconds[which].append(took[which])
        features = [[(n.layer, n.position, n.feature) for n in g.nodes[:g.n_features]] for g in graphs]
        same += features[0] == features[1]
        if same_set and features[0] == features[1]:
            differences.append(np.abs(graphs[0].adjacency - graphs[1].adjacency).max() / np.abs(graphs[0].adjacency).max())
    a, b = np.array(seconds[0]), np.array(seconds[1])
    print(f"graph time, {len(texts)} held-out prompts, interleaved{f', the least of {repeats}' if repeats > 1 else ''}: "
          f"{names[0]} {a.mean():.2f} s mean, {a.max():.2f} s at most; {names[1]} {b.mean():.2f} s mean, {b.max():.2f} s "
          f"at most; {names[1]} / {names[0]}: ratio of means {b.mean() / a.mean():.3f}, median of per-prompt ratios "
          f"{np.median(b / a):.3f}; the same active features on {same}/{len(texts)} prompts"
          + (f", their edges apart by {max(differences):.1e} of the largest at most" if differences else ""))


def full_size(tokens: int = 128) -> None:
    import resource
    import tempfile

    import psutil
    import torch

    from bertscope.core.models import load_model
    from bertscope.core.random_models import save_random_model
    from bertscope.features.transcoder import Transcoder, TranscoderInfo
    from bertscope.graphs.build import MAX_GRAPH_BYTES, attribution_graph, rows_at_once

    with tempfile.TemporaryDirectory() as folder:
        save_random_model("bert-base-uncased", folder)
        lm = load_model(folder)
        tcs = {layer: Transcoder(768, 768, 8 * 768, 32, False, TranscoderInfo(lm.name, layer), seed=layer).eval()
               for layer in range(lm.num_layers)}
        text = " ".join(["the bank of the river was muddy after the storm ."] * (tokens // 10 + 1))
        words = text.split()[:tokens - 2]  # every word one piece, [MASK] one too; [CLS] and [SEP]
        words[len(words) // 2] = "[MASK]"
        before = psutil.Process().memory_info().rss
        t = time.perf_counter()
        graph = attribution_graph(lm, " ".join(words), tcs)
        seconds = time.perf_counter() - t
        after = psutil.Process().memory_info().rss
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
        rows = rows_at_once(lm.num_layers, len(graph.tokens), lm.hidden_size, torch.float32, MAX_GRAPH_BYTES // 2)
        print(f"BERT-base size, {len(graph.tokens)} tokens, random transcoders (8x, k=32): {seconds:.1f} s; "
              f"{graph.n_features + graph.dropped_features:,} active features, {graph.n_features:,} kept within "
              f"{MAX_GRAPH_BYTES / 2**20:.0f} MiB ({graph.adjacency.nbytes / 2**20:.0f} MiB adjacency); {rows} rows "
              f"a backward pass within {MAX_GRAPH_BYTES / 2**21:.0f} MiB; resident memory {before / 2**20:.0f} -> "
              f"{after / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB")


def effects(lm, transcoders) -> None:
    import tracemalloc

    from bertscope.graphs.build import attribution_graph
    from bertscope.graphs.interventions import total_effects

    def solved(graph) -> np.ndarray:  # what total_effects did before: the dense system, solved whole
        f = graph.n_features
        a = graph.adjacency.astype(np.float64)
        acts = np.array([n.activation for n in graph.nodes[:f]], np.float64)
        return np.linalg.solve((np.eye(f) - a[:f, :f] / acts[:, None]).T, a[-1, :f])

    text = ("The bank of the river was muddy after the storm, and the children who lived in the small village near "
            "the old mill walked along it every [MASK] to school, talking about the weather and the long winter ahead "
            "of them.")
    graph = attribution_graph(lm, text, transcoders)
    print(f"total effects: {len(graph.tokens)} word pieces, {graph.n_features:,} features, adjacency "
          f"{graph.adjacency.nbytes / 2**20:.0f} MiB")
    found = {}
    for name, fn in (("series", total_effects), ("solve", solved), ("series", total_effects), ("solve", solved)):
        tracemalloc.start()
        t = time.perf_counter()
        found[name] = fn(graph)
        seconds = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"  {name}: {seconds:.2f} s, peak {peak / 2**20:,.0f} MiB")
    print(f"  largest difference / largest effect: "
          f"{np.max(np.abs(found['series'] - found['solve'])) / np.max(np.abs(found['solve'])):.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled-mlm")
    parser.add_argument("--prompts", type=int, default=50, help="held-out prompts (0: the full-size run alone)")
    parser.add_argument("--transcoders", help="a train-transcoders folder (default: the shipped set)")
    parser.add_argument("--skip-transcoders", help="a folder of skip transcoders to measure beside them")
    parser.add_argument("--seed", type=int, default=0, help="the held-out prompts' draw (default 0)")
    parser.add_argument("--head", default="frozen", help="how the graph reads the head: frozen (default) or linear "
                        "(to first order at the real run)")
    against = parser.add_mutually_exclusive_group()
    against.add_argument("--against", help="another set's folder: the graphs' time alone, both sets interleaved "
                         "(instead of the scores and the intervention test; --skip-transcoders is not read)")
    against.add_argument("--against-revision", metavar="REV", help="a git revision: the graphs' time alone, the "
                         "graph code (graphs/build.py, frozen.py) at REV against the code now, interleaved (a "
                         "revision from before attribution_graph took head=, f12c355, cannot be timed)")
    parser.add_argument("--repeats", type=int, default=1, help="with --against or --against-revision: each graph "
                        "built this many times a side, the least time kept (default 1)")
    parser.add_argument("--full-size", action="store_true")
    parser.add_argument("--full-size-tokens", type=int, default=128, metavar="N", help="with --full-size: the "
                        "prompt's word pieces, [CLS] and [SEP] in (default 128, at most 512)")
    parser.add_argument("--effects", action="store_true", help="the total effects' time and memory on a graph at "
                        "the whole budget, against the solve they replaced")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: build each graph at least once")
    if not 8 <= args.full_size_tokens <= 512:
        parser.error(f"--full-size-tokens {args.full_size_tokens}: between 8 and BERT-base's 512 word pieces")
    from bertscope.core.models import load_model
    from bertscope.features.shipped import transcoder_set

    if args.prompts > 0 and (args.against or args.against_revision):
        from bertscope.graphs.build import attribution_graph

        then = graph_code_at(args.against_revision) if args.against_revision else None  # before the model loads
        lm = load_model(args.model)
        ours = transcoder_set(lm, args.transcoders)
        if args.against:
            sides = ((attribution_graph, ours), (attribution_graph, transcoder_set(lm, args.against)))
            names = (args.transcoders or "the shipped set", args.against)
        else:
            sides = ((then, ours), (attribution_graph, ours))
            names = (f"the code at {args.against_revision}", "the code now")
        timed_against(lm, prompts(lm, args.prompts, args.seed), sides, names, args.head, args.repeats,
                      same_set=not args.against)
    elif args.prompts > 0:
        lm = load_model(args.model)
        texts = prompts(lm, args.prompts, args.seed)
        measure(lm, texts, transcoder_set(lm, args.transcoders), "transcoders", args.head)
        if args.skip_transcoders:
            measure(lm, texts, transcoder_set(lm, args.skip_transcoders), "skip transcoders", args.head)
    if args.effects:
        lm = load_model(args.model)
        effects(lm, transcoder_set(lm, args.transcoders))
    if args.full_size:
        full_size(args.full_size_tokens)


if __name__ == "__main__":
    main()
