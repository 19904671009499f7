"""Attribution methods against independent computations on tiny models (issue 17).

Rollout against a numpy product of the model's own attentions; flow against scipy's max-flow;
norm-based attention and ALTI against loops over the module weights; gradients against finite
differences; integrated gradients against completeness; probe targets against scikit-learn.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.attribution.explain import agreement
from bertscope.attribution.gradients import Target, input_embeddings, parse_target, score_function
from bertscope.attribution.methods import attribute
from bertscope.attribution.registry import METHODS
from bertscope.core.forward import inspect
from bertscope.errors import BertScopeError

TEXT = "the bank of the [MASK] was muddy ."
PAIR = "she sat on the grass ."


def hf_outputs(folder: Path, text: str, pair: str | None = None):
    """The Hugging Face model run directly (eager), not through BertScope."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    enc = tok(text, pair, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True, output_hidden_states=True)
    return model, [a[0].numpy().astype(np.float64) for a in out.attentions], \
        [h[0].numpy().astype(np.float64) for h in out.hidden_states]


def test_rollout_is_the_product_of_the_models_own_attentions(tiny_bert_dir):
    _, attentions, _ = hf_outputs(tiny_bert_dir, TEXT)
    n = attentions[0].shape[-1]
    expected, acc = [], np.eye(n)
    for a in attentions:  # [head, q, k]
        acc = (0.5 * a.mean(axis=0) + 0.5 * np.eye(n)) @ acc
        expected.append(acc)
    got = attribute(load_model(str(tiny_bert_dir)), TEXT, method="rollout")
    assert got.layers == (0, 1)  # encoder blocks, numbered as `attention` numbers them
    np.testing.assert_allclose(got.matrices, np.stack(expected), atol=1e-5)
    np.testing.assert_allclose(got.matrices.sum(-1), 1, atol=1e-5)


def test_flow_equals_networkx_max_flow(tiny_bert_dir):
    """Flow runs in scipy's compiled max-flow on integer capacities; the reference is networkx's
    preflow-push on the float weights (the reference code's choice of graph: samiraabnar/attention_flow)."""
    import networkx as nx

    lm = load_model(str(tiny_bert_dir))
    ins = inspect(lm, "the bank of the river .", with_logits=False)
    got = attribute(lm, "the bank of the river .", method="flow")
    n, layers = ins.n_tokens, ins.n_layers
    weights = [0.5 * a.astype(np.float64).mean(0) + 0.5 * np.eye(n) for a in ins.attentions]
    for block in range(layers):  # the state after block `block`: depth block + 1 in the graph
        graph = nx.DiGraph()
        for d in range(1, block + 2):
            graph.add_edges_from(((d - 1, k), (d, q), {"capacity": float(weights[d - 1][q, k])})
                                 for q in range(n) for k in range(n))
        expected = np.array([[nx.maximum_flow_value(graph, (0, j), (block + 1, i)) for j in range(n)]
                             for i in range(n)])
        expected /= expected.sum(-1, keepdims=True)
        np.testing.assert_allclose(got.at(block), expected, atol=1e-6)
    # one layer: the only path from j to i is the edge itself, so flow is the residual attention
    np.testing.assert_allclose(got.at(0), weights[0], atol=1e-6)


def test_flow_is_capped_with_a_clear_message(tiny_bert):
    from bertscope.attribution.rollout import MAX_FLOW_TOKENS, flow

    n = MAX_FLOW_TOKENS + 1
    with pytest.raises(BertScopeError, match=f"capped at {MAX_FLOW_TOKENS} tokens.*rollout"):
        flow(np.full((2, 2, n, n), 1 / n), [1])
    with pytest.raises(BertScopeError, match="numbered 0 to 1"):
        attribute(tiny_bert, TEXT, method="flow", layers=[2])


def _value_vectors(layer, x: np.ndarray) -> np.ndarray:
    """[head, token, dim]: f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, from the module weights."""
    sa, out = layer.attention.self, layer.attention.output.dense
    w_v, b_v = sa.value.weight.detach().numpy().astype(np.float64), sa.value.bias.detach().numpy()
    w_o = out.weight.detach().numpy().astype(np.float64)
    heads = sa.config.num_attention_heads if hasattr(sa, "config") else 4
    d = w_v.shape[0] // heads
    v = x @ w_v.T + b_v  # [token, dim]
    return np.stack([v[:, h * d:(h + 1) * d] @ w_o[:, h * d:(h + 1) * d].T for h in range(heads)])


def test_norms_equal_the_module_weights_computation(tiny_bert_dir):
    model, attentions, hidden = hf_outputs(tiny_bert_dir, TEXT)
    got = attribute(load_model(str(tiny_bert_dir)), TEXT, method="norm")
    for index, layer in enumerate(model.encoder.layer):
        f = _value_vectors(layer, hidden[index])  # [head, token, dim]
        n = f.shape[1]
        expected = np.array([[np.linalg.norm(sum(attentions[index][h, i, j] * f[h, j] for h in range(f.shape[0])))
                              for j in range(n)] for i in range(n)])
        np.testing.assert_allclose(got.matrices[index], expected, rtol=1e-4, atol=1e-6)


def test_per_head_norms_are_alpha_times_value_norms(tiny_bert_dir):
    from bertscope.attribution.blocks import block_measures

    model, attentions, hidden = hf_outputs(tiny_bert_dir, TEXT)
    m = block_measures(load_model(str(tiny_bert_dir)), TEXT)
    f = _value_vectors(model.encoder.layer[1], hidden[1])
    expected = attentions[1] * np.linalg.norm(f, axis=-1)[:, None, :]  # [head, q, k]
    np.testing.assert_allclose(m.head_norms(1), expected, rtol=1e-4, atol=1e-6)


def test_alti_against_a_hand_computation_on_one_layer(tmp_path):
    from transformers import BertModel

    from tests.conftest import bert_tokenizer, save_model, tiny_bert_config

    torch.manual_seed(11)
    folder = save_model(BertModel(tiny_bert_config(num_hidden_layers=1)), bert_tokenizer(), tmp_path / "one-layer")
    model, attentions, hidden = hf_outputs(folder, TEXT)
    layer = model.encoder.layer[0]
    x, alpha = hidden[0], attentions[0]  # [token, dim], [head, q, k]
    f = _value_vectors(layer, x)
    ln = layer.attention.output.LayerNorm
    gamma, beta = ln.weight.detach().numpy().astype(np.float64), ln.bias.detach().numpy().astype(np.float64)
    b_o = layer.attention.output.dense.bias.detach().numpy().astype(np.float64)
    n = x.shape[0]
    expected = np.zeros((n, n))
    for i in range(n):
        u = [sum(alpha[h, i, j] * f[h, j] for h in range(f.shape[0])) + (x[j] if i == j else 0) for j in range(n)]
        z = sum(u) + b_o  # the LayerNorm's input: attention output + residual
        sigma = np.sqrt(z.var() + ln.eps)
        y = gamma * (z - z.mean()) / sigma + beta  # the LayerNorm's output, by hand
        with torch.no_grad():  # ... and by the module itself
            np.testing.assert_allclose(y, ln(torch.tensor(z, dtype=torch.float32)).numpy(), atol=1e-5)
        t = [gamma * (uj - uj.mean()) / sigma for uj in u]
        np.testing.assert_allclose(sum(t) + gamma * (b_o - b_o.mean()) / sigma + beta, y, atol=1e-6)
        c = np.array([max(0.0, np.abs(y).sum() - np.abs(y - tj).sum()) for tj in t])
        expected[i] = c / c.sum()
    got = attribute(load_model(str(folder)), TEXT, method="alti")
    np.testing.assert_allclose(got.matrices[0], expected, atol=1e-5)


def test_gradient_x_input_against_finite_differences(tiny_bert):
    ins = inspect(tiny_bert, TEXT, with_attentions=False, with_hidden_states=False)
    target = Target("token", 5, "river")
    got = attribute(tiny_bert, TEXT, method="grad", target=target)
    f, _ = score_function(tiny_bert, ins, target)
    x, _ = input_embeddings(tiny_bert, ins)
    eps = 1e-2
    with torch.no_grad():
        for t in range(ins.n_tokens):  # d/dε f(x + ε x_t e_t) at 0 = ∇_t f · x_t = the score of token t
            step = torch.zeros_like(x)
            step[0, t] = x[0, t]
            fd = (f(x + eps * step) - f(x - eps * step)).item() / (2 * eps)
            assert got.scores[t] == pytest.approx(fd, rel=2e-2, abs=2e-4)
    assert got.attribution.f_input == pytest.approx(f(x).item(), abs=1e-5)
    assert got.attribution.f_input < 0  # a log-probability


@pytest.mark.parametrize("fixture", ["tiny_bert_dir", "tiny_roberta_dir", "tiny_albert_dir", "tiny_distilbert_dir",
                                     "tiny_modernbert_dir"])
def test_every_method_on_every_family(fixture, request):
    from bertscope.attribution.registry import matrix_methods
    from bertscope.core.block_modules import reads_blocks

    lm = load_model(str(request.getfixturevalue(fixture)))
    text = TEXT.replace("[MASK]", lm.tokenizer.mask_token)
    for method in [m for m in matrix_methods(lm) if m != "valuezeroing"]:
        m = attribute(lm, text, method=method)
        assert m.matrices.shape == (lm.num_layers, len(m.tokens), len(m.tokens))
        assert np.isfinite(m.matrices).all() and (m.matrices >= 0).all()
        if METHODS[method].rows_sum_to_one:
            np.testing.assert_allclose(m.matrices.sum(-1), 1, atol=1e-4)
    from bertscope.attribution.blocks import block_measures

    if reads_blocks(lm):
        assert block_measures(lm, text).alti_error < 1e-4  # y_i = Σ_j T_i(x_j) + terms of no token
    position = m.tokens.index("[MASK]") if "[MASK]" in m.tokens else [i for i, t in enumerate(m.tokens) if "mask" in t][0]
    ig = attribute(lm, text, method="ig", target=Target("token", position))
    a = ig.attribution  # complete: relatively, or absolutely where f(x) - f(x') is itself ~0 (a near-uniform random model)
    assert ig.completeness_error < 0.01 or abs(a.scores.sum() - (a.f_input - a.f_baseline)) < 1e-4
    grad = attribute(lm, text, method="grad", target=ig.attribution.target)
    assert grad.scores.shape == ig.scores.shape == (len(m.tokens),)


def test_albert_shares_one_layer_but_measures_each_call(tiny_albert_dir):
    from bertscope.attribution.blocks import block_measures

    lm = load_model(str(tiny_albert_dir))
    m = block_measures(lm, TEXT)
    assert m.norms.shape[0] == 3
    assert not np.allclose(m.norms[0], m.norms[1])  # same weights, different inputs


def test_ig_completeness_for_nsp_and_a_token(tiny_bert):
    ig = attribute(tiny_bert, "the man sat .", PAIR, method="ig", target=Target("nsp"))
    assert ig.completeness_error < 0.01
    assert ig.attribution.f_input == pytest.approx(
        float(torch.log_softmax(torch.tensor(inspect(tiny_bert, "the man sat .", PAIR).nsp_logits), -1)[0]), abs=1e-4)
    many = attribute(tiny_bert, TEXT, method="ig", target=Target("token", 5, "river"))
    assert many.completeness_error < 0.01
    assert many.attribution.f_baseline < 0 and many.scores[0] == 0  # [CLS] is kept in the baseline


def _save_probe_run(folder: Path, model: str, kind: str, classes: int, dim: int, layer: int, level: str):
    from bertscope.analysis.probe_store import save_probe
    from bertscope.analysis.probing import make_probe

    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, dim)).astype(np.float32)
    y = np.array([f"c{i % classes}" for i in range(60)])
    probe = make_probe(kind).fit(x + (np.arange(60) % classes)[:, None] * 0.5, y)
    (folder / "weights").mkdir(parents=True)
    save_probe(probe, folder / "weights", f"layer_{layer:02d}")
    (folder / "results.json").write_text(json.dumps({"model": model, "task": "t", "level": level,
                                                     "pooling": "mean", "probe": kind, "layers": []}))
    return probe, x


@pytest.mark.parametrize("kind,classes", [("logreg", 2), ("logreg", 3), ("mlp", 3)])
def test_probe_target_reproduces_sklearn_and_is_complete(tiny_bert, tmp_path, kind, classes):
    from bertscope.analysis.probe_store import load_probe

    probe, x = _save_probe_run(tmp_path, tiny_bert.name, kind, classes, tiny_bert.hidden_size, 1, "sentence")
    loaded = load_probe(tmp_path, 1)
    np.testing.assert_allclose(loaded.log_probs(torch.tensor(x)).numpy(), np.log(probe.predict_proba(x)), atol=1e-4)
    target = Target("probe", layer=0, label="c1", probe_dir=str(tmp_path))  # layer 0 = hidden state 1 (file layer_01)
    # a ReLU MLP's kinks need more steps than the default: the result says so
    steps = 800 if kind == "mlp" else 50
    ig = attribute(tiny_bert, "the man sat on the grass .", method="ig", target=target, steps=steps)
    assert ig.completeness_error < 0.01 and not ig.warnings
    if kind == "mlp":
        few = attribute(tiny_bert, "the man sat on the grass .", method="ig", target=target, steps=4)
        assert few.completeness_error > 0.01 and "raise the steps" in few.warnings[-1]
    ins = inspect(tiny_bert, "the man sat on the grass .", with_logits=False)
    pooled = ins.hidden_states[1][~ins.special_mask].mean(0)[None]  # the pooling the probe run used
    assert ig.attribution.f_input == pytest.approx(float(np.log(probe.predict_proba(pooled)[0, 1])), abs=1e-4)


def test_word_level_probe_needs_a_position(tiny_bert, tmp_path):
    _save_probe_run(tmp_path, tiny_bert.name, "logreg", 2, tiny_bert.hidden_size, 2, "token")
    target = Target("probe", layer=1, label="c0", probe_dir=str(tmp_path))  # block 1's output: file layer_02
    with pytest.raises(BertScopeError, match="position of a word"):
        attribute(tiny_bert, "the riverside .", method="grad", target=target)
    ok = attribute(tiny_bert, "the riverside .", method="grad", target=Target(**{**target.__dict__, "position": 2}))
    assert np.isfinite(ok.scores).all()


def test_bad_targets_say_what_to_do(tiny_bert, tiny_mlm_dir, tmp_path):
    mlm = load_model(str(tiny_mlm_dir))
    with pytest.raises(BertScopeError, match="next-sentence head"):
        attribute(mlm, TEXT, PAIR, method="ig", target=Target("nsp"))
    with pytest.raises(BertScopeError, match="needs a pair"):
        attribute(tiny_bert, TEXT, method="ig", target=Target("nsp"))
    with pytest.raises(BertScopeError, match="does not exist"):
        attribute(tiny_bert, TEXT, method="grad", target=Target("token", 99))
    with pytest.raises(BertScopeError, match="give a target"):
        attribute(tiny_bert, TEXT, method="ig")
    with pytest.raises(BertScopeError, match="No results.json"):
        attribute(tiny_bert, TEXT, method="ig", target=Target("probe", layer=1, label="x", probe_dir=str(tmp_path)))
    with pytest.raises(BertScopeError, match="POSITION:TOKEN"):
        parse_target("river")
    assert parse_target("5:river") == Target("token", 5, "river") and parse_target("NSP") == Target("nsp")


def test_agreement_is_spearman_over_tokens():
    names, rho = agreement({"a": np.array([1, 2, 3, 4.0]), "b": np.array([2, 4, 6, 9.0]),
                            "c": np.array([4, 3, 2, 1.0])})
    assert names == ["a", "b", "c"]
    np.testing.assert_allclose(rho, [[1, 1, -1], [1, 1, -1], [-1, -1, 1]])
    names, rho = agreement({"a": np.array([1, 2, 3.0]), "b": np.array([3, 1, 2.0])})
    np.testing.assert_allclose(rho, [[1, -0.5], [-0.5, 1]])


def test_cli_json_formats_and_errors(tiny_bert_dir, capsys):
    from bertscope.cli import main

    assert main(["attribute", str(tiny_bert_dir), TEXT, "--method", "alti", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "alti" and [x["layer"] for x in out["layers"]] == [0, 1]
    matrix = np.array(out["layers"][-1]["matrix"])
    assert matrix.shape == (len(out["tokens"]),) * 2
    np.testing.assert_allclose(matrix.sum(-1), 1, atol=1e-4)
    assert main(["attribute", str(tiny_bert_dir), TEXT, "--method", "ig", "--target", "5:river", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["target"] == {"kind": "token", "position": 5, "token": "river", "token_id": out["target"]["token_id"]}
    assert len(out["scores"]) == len(out["tokens"]) and out["completeness_error"] < 0.01
    assert main(["attribute", str(tiny_bert_dir), TEXT, "--method", "grad", "--target", "5"]) == 0
    out = capsys.readouterr().out
    assert "grad for the top prediction at token 5" in out or "grad for the prediction" in out
    assert "{'kind'" not in out  # a phrase for a person, not a Python dict
    for bad in (["--method", "ig", "--target", "99:river"], ["--method", "rollout", "--target", "5"],
                ["--method", "flow", "--layers", "2"], ["--method", "flow", "--layers", "six"],
                ["--method", "ig", "--target", "5:river", "--steps", "0"]):
        assert main(["attribute", str(tiny_bert_dir), TEXT, *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1


def test_methods_listed():
    assert set(METHODS) == {"attention", "rollout", "flow", "norm", "alti", "valuezeroing", "grad", "ig", "occlusion",
                            "lime", "kernelshap", "smoothgrad", "vargrad", "random"}
    from bertscope.attribution.registry import faithfulness_defaults

    DEFAULT_METHODS = faithfulness_defaults()

    assert DEFAULT_METHODS == tuple(n for n, m in METHODS.items() if m.faithfulness_default) and "random" in DEFAULT_METHODS
    assert "valuezeroing" in DEFAULT_METHODS and "flow" not in DEFAULT_METHODS


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bundled", "bundled-mlm"])
def test_every_method_on_the_bundled_models(name):
    lm = load_model(name)
    text = "The bank of the [MASK] was muddy and steep."
    for method in ("rollout", "norm", "alti"):
        m = attribute(lm, text, method=method)
        assert m.matrices.shape == (6, 12, 12)
    flow = attribute(lm, text, method="flow", layers=[5])
    np.testing.assert_allclose(flow.matrices.sum(-1), 1, atol=1e-4)
    if name == "bundled-mlm":
        few = attribute(lm, text, method="ig", target=Target("token", 5, "river"), steps=4)
        ig = attribute(lm, text, method="ig", target=Target("token", 5, "river"))
        assert ig.completeness_error < 0.01 < few.completeness_error  # the default steps are needed
        assert ig.scores[2] > 0  # "bank" supports "river" in the shipped masked LM


def test_every_registered_method_runs_and_keeps_its_promises(tiny_bert):
    """The registry is what the CLI, figures and pages read: every record runs, returns its kind,
    keeps its rows-sum-to-one promise, and one without a target is refused in one line."""
    from bertscope.attribution.registry import find_method

    position = 5  # the [MASK] of TEXT
    for name, record in METHODS.items():
        assert find_method(name, tuple(METHODS)) is record and record.title and record.cite
        if record.kind == "floor":
            with pytest.raises(BertScopeError, match="Unknown method 'random'"):
                find_method(name)  # attribute explains a decision; the floor explains nothing
            ins = attribute(tiny_bert, TEXT, method="rollout").tokens
            scores = record.compute(inspect(tiny_bert, TEXT), 3)
            assert scores.shape == (len(ins),) and np.array_equal(scores, record.compute(inspect(tiny_bert, TEXT), 3))
        elif record.kind == "matrix":
            m = attribute(tiny_bert, TEXT, method=name, layers=[1] if record.on_request else None)
            assert m.matrices.ndim == 3 and np.isfinite(m.matrices).all()
            if record.rows_sum_to_one:
                np.testing.assert_allclose(m.matrices.sum(-1), 1, atol=1e-4)
        else:
            with pytest.raises(BertScopeError, match="give a target"):
                attribute(tiny_bert, TEXT, method=name)
            s = attribute(tiny_bert, TEXT, method=name, target=Target("token", position))
            assert s.scores.shape == (len(s.tokens),) and record.needs_target
    with pytest.raises(BertScopeError, match="Unknown method 'nope'"):
        find_method("nope")


def test_a_method_registered_later_is_in_every_list_read_after_it(monkeypatch):
    """The registry is open: ``register`` adds a record (built by keyword), every list is derived when read,
    and a block-reading method is offered only to models whose blocks it can read."""
    from bertscope.attribution import registry
    from bertscope.attribution.registry import Method, register

    monkeypatch.setattr(registry, "METHODS", dict(registry.METHODS))
    mine = register(Method(name="uniform", title="uniform rows", kind="matrix", rows_sum_to_one=True,
                           from_attentions=True, cite="a test", compute=lambda lm, ins, layers, progress: np.full(
                               (ins.n_layers, ins.n_tokens, ins.n_tokens), 1 / ins.n_tokens, np.float32)))
    assert "uniform" in registry.matrix_methods() and "uniform" in registry.attribution_methods()
    assert "uniform" in registry.faithfulness_defaults() and registry.find_method("uniform") is mine
    with pytest.raises(BertScopeError, match="registered already"):
        register(mine)
    with pytest.raises(TypeError):
        Method("x", "x", "matrix", lambda: None, "c")  # records are built by keyword
    blockless = [m for m, record in registry.METHODS.items() if record.needs_blocks]
    assert set(blockless) == {"norm", "alti", "valuezeroing"}


def test_block_reading_methods_are_offered_only_where_they_apply(tiny_mlm_dir, tiny_modernbert_dir):
    from bertscope.attribution.registry import faithfulness_defaults, matrix_methods

    bert, modern = load_model(str(tiny_mlm_dir)), load_model(str(tiny_modernbert_dir))
    assert {"norm", "alti"} <= set(matrix_methods(bert))
    assert not {"norm", "alti", "valuezeroing"} & set(matrix_methods(modern) + faithfulness_defaults(modern))
    with pytest.raises(BertScopeError, match="ModernBERT has pre-LayerNorm"):
        attribute(modern, "the bank of the river .", method="alti")
    rollout = attribute(modern, "the bank of the river .", method="rollout")
    np.testing.assert_allclose(rollout.matrices.sum(-1), 1, atol=1e-4)
