"""Attribution graphs' influence, pruning and scores against circuit-tracer 0.5.0 (in ``.venv-circuittracer``):
``bertscope.graphs.influence`` held to ``circuit_tracer/graph.py`` (``normalize_matrix``, ``compute_influence``,
``find_threshold``, ``prune_graph``, ``compute_graph_scores``), both ways:

- **circuit-tracer's graph**: a tiny random decoder in its own format (a TransformerLens ``HookedTransformer`` of 2
  layers, width 32, with random ``SingleLayerTranscoder``s, with and without a skip path, wrapped as its
  ``ReplacementModel``), attributed by its ``attribute``; the ``Graph``'s adjacency handed to BertScope;
- **BertScope's graph**: bundled-mlm's [MASK] with its shipped skip transcoders (``attribution_graph``), made a
  circuit-tracer ``Graph`` (the same node order: features by layer, position, feature; errors layer-major;
  embeddings; the target), scored and pruned by circuit-tracer against what BertScope reports (``to_json``).

circuit-tracer pins transformers <= 4.57.3 and huggingface-hub < 1 (the app pins 5.23 and 2.4), so BertScope is not
imported here: its side runs in the app's environment (``BERTSCOPE_PYTHON``, which ``make test-peers`` sets; else the
checkout's ``.venv``), this file run as a script there, the matrices passed in .npz files.

Measured (float64 on both sides): influence within 6e-18, scores within 3e-16; circuit-tracer's float32 against
BertScope's on the same float32 matrix: 2e-9 and 1.1e-7. The pruning masks are equal, node for node and edge for
edge (this test found BertScope scoring edges on Â cut to the kept nodes without normalising each row again, as
circuit-tracer's ``compute_edge_influence`` does; mended in ``graphs.influence.prune_graph``).

One target against circuit-tracer's logits: circuit-tracer weighs each logit node by its probability p_k, BertScope
its one target by 1. With one logit, circuit-tracer's influence is p times BertScope's and the scores and masks are
the same. k logits map onto one target whose row is Σ_k p_k Â_k (Â_k: logit k's row, |A| normalised): BertScope's
influence is then circuit-tracer's over Σ_k p_k, and both scores are circuit-tracer's. (Pruning renormalises each
logit's row on its own, so masks are compared with one logit.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
APP_PYTHON = ROOT / ".venv" / "bin" / "python"  # the app's environment where BERTSCOPE_PYTHON is not set
THRESHOLDS = [(0.8, 0.98), (0.5, 0.9), (0.95, 0.995)]  # (node, edge): circuit-tracer's defaults first
WORDS = ["<unk>", "<bos>", "the", "bank", "of", "river", "was", "muddy", "after", "rain", "money", "she", "a", "dog",
         "sat", "on", "mat", "."]
PROMPT = "the dog sat on the mat after the rain the river was"
TEXT = "The bank of the [MASK] was muddy after the storm."  # bundled-mlm, explained: "river"
# ---- BertScope's side: this file run as a script by the app's environment --------------------------------------

def _influence_side(request: Path, out: Path) -> None:
    """For each matrix ``a{i}`` of ``request``: BertScope's influence, node-threshold masks, pruning and scores."""
    from bertscope.graphs import graph_scores, prune_graph
    from bertscope.graphs.influence import compute_influence, find_threshold, normalize_matrix

    saved = {}
    with np.load(request, allow_pickle=False) as f:
        for i in range(int(f["count"])):
            a, n_features, n_errors = f[f"a{i}"], int(f[f"n_features{i}"]), int(f[f"n_errors{i}"])
            w = np.zeros(len(a))
            w[-1] = 1.0
            influence = compute_influence(normalize_matrix(a), w)
            saved[f"influence{i}"] = influence
            saved[f"scores{i}"] = np.array(graph_scores(a, n_features, n_errors))
            for t, (node, edge) in enumerate(THRESHOLDS):
                saved[f"node_cut{i}_{t}"] = np.array(find_threshold(influence, node))
                pruned = prune_graph(a, n_features, n_errors, node, edge)
                saved[f"node_mask{i}_{t}"], saved[f"edge_mask{i}_{t}"] = pruned.node_mask, pruned.edge_mask
    np.savez(out, **saved)


def _graph_side(out: Path) -> None:
    """bundled-mlm's graph of ``TEXT`` for "river", as BertScope reports it."""
    from bertscope import load_model
    from bertscope.features.shipped import transcoder_set
    from bertscope.graphs import attribution_graph

    lm = load_model("bundled-mlm", device="cpu")
    g = attribution_graph(lm, TEXT, transcoder_set(lm), target="river")
    index = {n.id: i for i, n in enumerate(g.nodes)}
    saved = {"adjacency": g.adjacency, "n_features": np.array(g.n_features), "n_errors": np.array(g.n_errors),
             "n_layers": np.array(lm.num_layers), "ids": np.array(lm.tokenizer(TEXT)["input_ids"]),
             "target_id": np.array(lm.tokenizer.convert_tokens_to_ids("river")),
             "vocab_size": np.array(lm.tokenizer.vocab_size), "scores": np.array(g.scores),
             "kinds": np.array([n.kind for n in g.nodes]), "ids_of_nodes": np.array([n.id for n in g.nodes]),
             "features": np.array([[n.layer, n.position, n.feature] for n in g.nodes[:g.n_features]]).reshape(-1, 3),
             "activations": np.array([n.activation for n in g.nodes[:g.n_features]])}
    for t, (node, edge) in enumerate(THRESHOLDS):
        reported = g.to_json(node, edge)
        saved[f"nodes{t}"] = np.array([index[n["id"]] for n in reported["nodes"]])
        saved[f"node_influence{t}"] = np.array([n["influence"] for n in reported["nodes"]])
        saved[f"edges{t}"] = np.array([[index[e["target"]], index[e["source"]]] for e in reported["edges"]]).reshape(-1, 2)
        assert (reported["replacement_score"], reported["completeness_score"]) == g.scores
    np.savez(out, **saved)


def _bertscope(tmp: Path, *args: str) -> dict[str, np.ndarray]:
    python = os.environ.get("BERTSCOPE_PYTHON") or (str(APP_PYTHON) if APP_PYTHON.is_file() else None)
    if not python:
        pytest.fail("BERTSCOPE_PYTHON is not set and there is no .venv: make test-peers points it at the app's "
                    "environment")
    out = tmp / "bertscope.npz"
    done = subprocess.run([python, __file__, *args, str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out, allow_pickle=False) as f:
        return dict(f)


# ---- circuit-tracer's side ----------------------------------------------------------------------------------------

@contextmanager
def _float64():
    """circuit-tracer's functions make their logit weights at torch's default dtype: float64 for a float64 graph."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _as_float64(graph):
    from circuit_tracer.graph import Graph

    return Graph(input_string=graph.input_string, input_tokens=graph.input_tokens,
                 active_features=graph.active_features, adjacency_matrix=graph.adjacency_matrix.double(),
                 cfg=graph.cfg, selected_features=graph.selected_features, activation_values=graph.activation_values,
                 logit_targets=graph.logit_targets, logit_probabilities=graph.logit_probabilities.double(),
                 scan=graph.scan, vocab_size=graph.vocab_size)


def _circuit_tracer(graph) -> dict:
    """circuit-tracer's own numbers for ``graph``: influence (its logit weights), scores, node cuts, pruning."""
    from circuit_tracer.graph import compute_graph_scores, compute_node_influence, find_threshold, prune_graph

    a = graph.adjacency_matrix
    n_logits = len(graph.logit_targets)
    w = torch.zeros(len(a), dtype=a.dtype)
    w[-n_logits:] = graph.logit_probabilities
    influence = compute_node_influence(a, w)
    out = {"influence": influence.numpy(), "scores": np.array(compute_graph_scores(graph)),
           "p": graph.logit_probabilities.double().numpy()}
    for t, (node, edge) in enumerate(THRESHOLDS):
        out[f"node_cut{t}"] = float(find_threshold(influence, node))
        pruned = prune_graph(graph, node, edge)
        out[f"node_mask{t}"], out[f"edge_mask{t}"] = pruned.node_mask.numpy(), pruned.edge_mask.numpy()
    return out


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=words, bos_token="<bos>", unk_token="<unk>")


def _replacement_model(skip: bool):
    """A 2-layer random decoder in circuit-tracer's format: random ReLU transcoders reading ``mlp.hook_in`` and
    writing ``mlp.hook_out``. Its position embedding is zero, and TransformerLens starts every other bias at zero, so
    a layer-0 feature's input is its edges (all from token embeddings) plus b_enc: an identity held below."""
    import torch.nn.functional as F
    from circuit_tracer import ReplacementModel
    from circuit_tracer.transcoder import SingleLayerTranscoder, TranscoderSet
    from transformer_lens import HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=2, d_model=32, d_head=8, n_heads=4, d_mlp=64, d_vocab=len(WORDS),
                                  n_ctx=16, act_fn="gelu", normalization_type="LN", model_name="tiny-random", seed=0,
                                  device="cpu")
    gen = torch.Generator().manual_seed(1 + skip)
    transcoders = {}
    for layer in range(cfg.n_layers):
        tc = SingleLayerTranscoder(32, 96, F.relu, layer, skip_connection=skip, device=torch.device("cpu"),
                                   dtype=torch.float32)
        with torch.no_grad():
            tc.W_enc.copy_(torch.randn(96, 32, generator=gen) / 32**0.5)
            tc.b_enc.copy_(torch.randn(96, generator=gen) - 1.0)  # ~1 in 5 features fires
            tc.W_dec.copy_(torch.randn(96, 32, generator=gen) * 0.2)
            tc.b_dec.copy_(torch.randn(32, generator=gen) * 0.1)
            if skip:
                tc.W_skip.copy_(torch.randn(32, 32, generator=gen) * 0.1)
        transcoders[layer] = tc
    model = ReplacementModel.from_config(
        cfg, TranscoderSet(transcoders, feature_input_hook="mlp.hook_in", feature_output_hook="mlp.hook_out",
                           scan="tiny-random"))
    # set as is: TransformerLens's set_tokenizer reloads a tokenizer by its hub name to add a BOS, and circuit-tracer
    # prepends the BOS itself (ensure_tokenized: the first special id that is not 0, hence <bos> at 1)
    model.tokenizer = _tokenizer()
    with torch.no_grad():
        model.W_pos.zero_()
    return model


@pytest.fixture(scope="module", params=[False, True], ids=["transcoders", "skip-transcoders"])
def decoder(request, tmp_path_factory):
    """circuit-tracer's graphs of ``PROMPT`` (one logit, and three), both sides' numbers on them."""
    from circuit_tracer import attribute
    from circuit_tracer.graph import normalize_matrix

    model = _replacement_model(request.param)
    one = attribute(PROMPT, model, max_n_logits=1, batch_size=64)
    tokens = model.ensure_tokenized(PROMPT)
    with torch.no_grad():
        top3 = torch.topk(model(tokens[None])[0, -1], 3).indices
    three = attribute(PROMPT, model, attribution_targets=top3, batch_size=64)
    n_errors = model.cfg.n_layers * len(tokens)
    k = len(three.logit_targets)
    # three logits as one target: the row Σ_k p_k Â_k (the module docstring)
    a3 = three.adjacency_matrix.double()
    rows = normalize_matrix(a3)[-k:, :-k]  # [k, nodes before the logits]
    collapsed = np.zeros((len(a3) - k + 1,) * 2)
    collapsed[:-1, :-1] = a3[:-k, :-k].numpy()
    collapsed[-1, :-1] = (three.logit_probabilities.double()[:, None] * rows).sum(0).numpy()
    tmp = tmp_path_factory.mktemp("decoder")
    request_file = tmp / "request.npz"
    np.savez(request_file, count=np.array(3),
             a0=one.adjacency_matrix.double().numpy(), n_features0=np.array(len(one.selected_features)),
             n_errors0=np.array(n_errors),
             a1=one.adjacency_matrix.numpy(), n_features1=np.array(len(one.selected_features)),
             n_errors1=np.array(n_errors),
             a2=collapsed, n_features2=np.array(len(three.selected_features)), n_errors2=np.array(n_errors))
    with _float64():
        theirs64 = _circuit_tracer(_as_float64(one))
        theirs3 = _circuit_tracer(_as_float64(three))
    return {"model": model, "tokens": tokens, "one": one, "three": three, "ours": _bertscope(tmp, "influence",
            str(request_file)), "theirs": _circuit_tracer(one), "theirs64": theirs64, "theirs3": theirs3}


def test_circuit_tracers_graph_is_in_bertscopes_node_order(decoder):
    g = decoder["one"]
    n_pos, n_layers = len(g.input_tokens), decoder["model"].cfg.n_layers
    features = g.active_features[g.selected_features].numpy()  # [F, 3] (layer, position, feature)
    assert len(features) > 20 and len(g.selected_features) == len(g.active_features)  # every active feature a node
    keys = features[:, 0] * 10**6 + features[:, 1] * 10**3 + features[:, 2]
    assert (np.diff(keys) > 0).all()  # by layer, position, feature, as BertScope orders them
    assert not (features[:, 1] == 0).any()  # circuit-tracer's position 0 (the BOS it prepends) has no features
    assert g.adjacency_matrix.shape == (len(features) + n_layers * n_pos + n_pos + 1,) * 2
    a = g.adjacency_matrix.numpy()
    assert not a[len(features):-1].any()  # errors and embeddings have no inputs; the logit is last
    for r, (layer, _, _) in enumerate(features):  # no edge from the same layer's or a later layer's feature or error
        assert not a[r, :len(features)][features[:, 0] >= layer].any()
        assert not a[r, len(features) + layer * n_pos:len(features) + n_layers * n_pos].any()


def test_a_layer_0_features_input_is_its_edges_plus_b_enc(decoder):
    """BertScope's identity (a node's input = its incoming edges + its bias) in circuit-tracer's graph, where it is
    cheap: a layer-0 feature reads the token embeddings alone (every other bias zero, no position embedding)."""
    model, g = decoder["model"], decoder["one"]
    _, pre = model.get_activations(decoder["tokens"], apply_activation_function=False)  # [layer, position, feature]
    features = g.active_features[g.selected_features]
    rows = torch.nonzero(features[:, 0] == 0).squeeze(1)
    assert len(rows) > 5
    b_enc = model.transcoders[0].b_enc.detach()
    edges = g.adjacency_matrix[rows].sum(1) + b_enc[features[rows, 2]]
    torch.testing.assert_close(edges, pre[0, features[rows, 1], features[rows, 2]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(g.activation_values[rows], pre[0, features[rows, 1], features[rows, 2]])


def test_influence_and_scores_equal_circuit_tracers_on_its_graph(decoder):
    ours, p = decoder["ours"], float(decoder["theirs"]["p"][0])
    assert 0 < p < 1
    # float64 on both sides, then circuit-tracer in its float32 against BertScope's numpy on the same float32 matrix
    for theirs, i, rtol, atol in ((decoder["theirs64"], 0, 1e-10, 1e-13), (decoder["theirs"], 1, 1e-4, 1e-6)):
        np.testing.assert_allclose(ours[f"influence{i}"] * p, theirs["influence"], rtol=rtol, atol=atol)
        np.testing.assert_allclose(ours[f"scores{i}"], theirs["scores"], rtol=0, atol=max(atol, 1e-12) * 10)
        assert 0 < theirs["scores"][0] < 1 and 0 < theirs["scores"][1] < 1
    for t in range(len(THRESHOLDS)):  # the node cut (find_threshold on the influence), float64
        assert float(ours[f"node_cut0_{t}"]) * p == pytest.approx(decoder["theirs64"][f"node_cut{t}"], rel=1e-10)


def test_three_logits_as_one_target(decoder):
    ours, theirs = decoder["ours"], decoder["theirs3"]
    k = len(decoder["three"].logit_targets)
    assert k == 3
    total = theirs["p"].sum()
    np.testing.assert_allclose(ours["influence2"][:-1] * total, theirs["influence"][:-k], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(ours["scores2"], theirs["scores"], rtol=0, atol=1e-10)


def test_pruning_equals_circuit_tracers_on_its_graph(decoder):
    """In float64 on both sides, and circuit-tracer's float32 against BertScope on the same float32 matrix."""
    ours = decoder["ours"]
    for i, theirs in ((0, decoder["theirs64"]), (1, decoder["theirs"])):
        for t in range(len(THRESHOLDS)):
            np.testing.assert_array_equal(ours[f"node_mask{i}_{t}"], theirs[f"node_mask{t}"],
                                          err_msg=f"nodes {THRESHOLDS[t]}, run {i}")
            np.testing.assert_array_equal(ours[f"edge_mask{i}_{t}"], theirs[f"edge_mask{t}"],
                                          err_msg=f"edges {THRESHOLDS[t]}, run {i}")


# ---- the other way: BertScope's graph as circuit-tracer's ---------------------------------------------------------

@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from circuit_tracer.attribution.targets import LogitTarget
    from circuit_tracer.graph import Graph
    from transformer_lens import HookedTransformerConfig

    ours = _bertscope(tmp_path_factory.mktemp("encoder"), "graph")
    n_layers = int(ours["n_layers"])
    cfg = HookedTransformerConfig(n_layers=n_layers, d_model=384, d_head=32, n_heads=12, n_ctx=512, act_fn="gelu",
                                  d_vocab=int(ours["vocab_size"]), normalization_type="LN", model_name="bundled-mlm")
    n_features = int(ours["n_features"])
    graph = Graph(input_string=TEXT, input_tokens=torch.from_numpy(ours["ids"]),
                  active_features=torch.from_numpy(ours["features"]),
                  adjacency_matrix=torch.from_numpy(ours["adjacency"]), cfg=cfg,
                  selected_features=torch.arange(n_features),
                  activation_values=torch.from_numpy(ours["activations"]).float(),
                  logit_targets=[LogitTarget("river", int(ours["target_id"]))], logit_probabilities=torch.ones(1),
                  scan="bundled-mlm", vocab_size=int(ours["vocab_size"]))
    return {"ours": ours, "graph": graph, "theirs": _circuit_tracer(graph)}


def test_bertscopes_graph_is_in_circuit_tracers_node_order(encoder):
    ours, graph = encoder["ours"], encoder["graph"]
    n_features, n_pos, n_layers = int(ours["n_features"]), len(ours["ids"]), int(ours["n_layers"])
    assert graph.adjacency_matrix.dtype == torch.float32 and n_features > 500
    assert int(ours["n_errors"]) == n_layers * n_pos  # circuit-tracer's count: n_layers x tokens
    kinds = ["feature"] * n_features + ["error"] * n_layers * n_pos + ["embedding"] * n_pos + ["target"]
    assert ours["kinds"].tolist() == kinds
    errors = ours["ids_of_nodes"][n_features:n_features + n_layers * n_pos].tolist()
    assert errors == [f"E{layer}.{p}" for layer in range(n_layers) for p in range(n_pos)]  # layer-major
    f = ours["features"]
    assert (np.diff(f[:, 0] * 10**8 + f[:, 1] * 10**5 + f[:, 2]) > 0).all()


def test_circuit_tracer_scores_bertscopes_graph_as_bertscope_reports(encoder):
    ours, theirs = encoder["ours"], encoder["theirs"]
    np.testing.assert_allclose(theirs["scores"], ours["scores"], rtol=0, atol=1e-5)
    assert 0 < ours["scores"][0] < 1 and 0 < ours["scores"][1] < 1
    for t in range(len(THRESHOLDS)):  # each kept node's influence, as to_json reports it
        np.testing.assert_allclose(ours[f"node_influence{t}"], theirs["influence"][ours[f"nodes{t}"]], rtol=1e-4,
                                   atol=1e-7)


def test_circuit_tracer_prunes_bertscopes_graph_as_bertscope_reports(encoder):
    ours, theirs = encoder["ours"], encoder["theirs"]
    for t in range(len(THRESHOLDS)):
        assert ours[f"nodes{t}"].tolist() == np.flatnonzero(theirs[f"node_mask{t}"]).tolist(), THRESHOLDS[t]
        assert sorted(map(tuple, ours[f"edges{t}"].tolist())) == sorted(zip(*np.nonzero(theirs[f"edge_mask{t}"]))), \
            THRESHOLDS[t]


if __name__ == "__main__":  # BertScope's side, in the app's environment
    {"influence": _influence_side, "graph": _graph_side}[sys.argv[1]](*map(Path, sys.argv[2:]))
