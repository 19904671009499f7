"""Two models side by side: linear CKA with the unbiased minibatch estimator, checked against a
direct computation of Song et al.'s HSIC, the invariances CKA promises, the full-batch formula,
and a model compared with itself."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertscope import BertScopeError, load_model
from bertscope.analysis.compare import (
    CkaAccumulator,
    chunks,
    compare_layers,
    hsic_terms,
    linear_cka,
    text_task,
    word_vectors,
)

SENTENCES = ["the bank of the river was muddy .", "she deposited the money in the bank .",
             "a man is eating food and a woman is riding a horse .", "the dog sat in the boat on the water .",
             "the river bank was steep and the boat was small ."] * 12


def hsic_direct(k: np.ndarray, m: np.ndarray) -> float:
    """Song et al. (2012), eq. 5, written out term by term in numpy."""
    n = len(k)
    k, m = k.copy(), m.copy()
    np.fill_diagonal(k, 0)
    np.fill_diagonal(m, 0)
    one = np.ones(n)
    return float((np.trace(k @ m) + (one @ k @ one) * (one @ m @ one) / ((n - 1) * (n - 2))
                  - 2 / (n - 2) * one @ k @ m @ one) / (n * (n - 3)))


def test_hsic_matches_the_formula_written_out():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 5)), rng.normal(size=(30, 7))
    k, m = x @ x.T, y @ y.T
    got = hsic_terms(torch.from_numpy(k)[None], torch.from_numpy(m)[None])[0, 0].item()
    assert got == pytest.approx(hsic_direct(k, m), rel=1e-10)


def test_cka_invariances_and_its_agreement_with_the_classic_formula():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 16))
    y = x @ rng.normal(size=(16, 12)) + 0.5 * rng.normal(size=(400, 12))
    base = linear_cka(x, y)
    q, _ = np.linalg.qr(rng.normal(size=(16, 16)))  # an orthogonal transform
    assert linear_cka(x @ q, y) == pytest.approx(base, abs=1e-9)
    assert linear_cka(3.7 * x, 0.2 * y) == pytest.approx(base, abs=1e-9)  # isotropic scaling
    assert linear_cka(x, x) == pytest.approx(1, abs=1e-12)
    xc, yc = x - x.mean(0), y - y.mean(0)  # Kornblith et al.'s (biased) linear CKA: close at n = 400
    classic = np.linalg.norm(yc.T @ xc) ** 2 / (np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc))
    assert base == pytest.approx(classic, abs=0.03)
    unrelated = linear_cka(x, rng.normal(size=(400, 12)))
    assert abs(unrelated) < 0.05 and base > 0.5


@pytest.fixture(scope="module")
def mlm(tiny_mlm_dir):
    return load_model(str(tiny_mlm_dir))


def test_streaming_agrees_with_the_full_batch(mlm, tiny_roberta_dir):
    other = load_model(str(tiny_roberta_dir))
    task = text_task(SENTENCES)
    va, vb = word_vectors(mlm, task, "mean"), word_vectors(other, task, "mean")
    shared = sorted(set(va) & set(vb))
    xa, xb = np.stack([va[w] for w in shared]), np.stack([vb[w] for w in shared])  # [word, state, dim]
    full = CkaAccumulator()
    full.add(torch.from_numpy(xa), torch.from_numpy(xb))
    # one minibatch of every word is the full-batch estimator, layer by layer
    result = compare_layers(mlm, other, task, minibatch=len(shared) // 4)
    assert result.minibatches == 4 and result.n_words == 4 * (len(shared) // 4)
    per_layer = np.array([[linear_cka(xa[:, i], xb[:, j]) for j in range(xb.shape[1])] for i in range(xa.shape[1])])
    np.testing.assert_allclose(full.cka(), per_layer, atol=1e-9)
    np.testing.assert_allclose(result.cka, full.cka(), atol=0.1)  # four minibatches estimate the same thing
    assert result.cka.shape == (mlm.num_layers + 1, other.num_layers + 1)


def test_chunks_leave_no_word_unused_but_the_last_minibatchs(mlm, tiny_roberta_dir):
    """Chunks' left-over words join the next chunks' (in chunk order): only fewer than one
    minibatch of the whole corpus goes unused, however small the chunks."""
    other = load_model(str(tiny_roberta_dir))
    task = text_task(SENTENCES * 3)
    va, vb = word_vectors(mlm, task, "mean"), word_vectors(other, task, "mean")
    shared = len(set(va) & set(vb))
    per_word = 4 * max((mlm.num_layers + 1) * mlm.hidden_size, (other.num_layers + 1) * other.hidden_size)
    whole = compare_layers(mlm, other, task, minibatch=16, seed=1)
    assert whole.n_words == shared - shared % 16
    # about 30 words a chunk: every chunk leaves words over for a minibatch of 16
    cut = compare_layers(mlm, other, task, minibatch=16, seed=1, max_chunk_bytes=30 * per_word)
    assert len(chunks(task, per_word, 30 * per_word)) >= 20 and cut.n_words == whole.n_words
    again = compare_layers(mlm, other, task, minibatch=16, seed=1, max_chunk_bytes=30 * per_word)
    np.testing.assert_array_equal(again.cka, cut.cka)  # seeded: the same minibatches
    # chunks of about 20 sentences: minibatches are still random samples, the estimate the same (0.02
    # here; 3-sentence chunks drift by 0.19: a chunk must hold many sentences, CHUNK_SENTENCES 256)
    some = compare_layers(mlm, other, task, minibatch=16, seed=1, max_chunk_bytes=200 * per_word)
    np.testing.assert_allclose(some.cka, whole.cka, atol=0.1)
    assert chunks(task, 1, 10**9, sentences=7) == [(i, min(i + 7, len(task.words)))
                                                    for i in range(0, len(task.words), 7)]


def test_a_model_with_itself_and_the_json(mlm):
    task = text_task(SENTENCES)
    result = compare_layers(mlm, mlm, task, minibatch=64)
    np.testing.assert_allclose(np.diag(result.cka), 1, atol=1e-6)
    assert (result.cka <= 1 + 1e-6).all()
    out = json.loads(json.dumps(result.to_json()))
    assert out["layers_a"] == ["embeddings", 0, 1] and len(out["cka"]) == 3 and out["pool"] == "mean"
    first = compare_layers(mlm, mlm, task, pool="first", minibatch=64)
    assert first.n_words == result.n_words  # every word has a first piece


def test_bad_input_gets_one_line(mlm):
    cases = [(lambda: compare_layers(mlm, mlm, text_task(SENTENCES[:5])), "a stable estimate needs at least 1,024"),
             (lambda: compare_layers(mlm, mlm, text_task(SENTENCES), pool="max"), "Unknown pooling"),
             (lambda: text_task(["", "  "]), "no sentences")]
    for call, message in cases:
        with pytest.raises(BertScopeError, match=message) as err:
            call()
        assert "\n" not in str(err.value)


def test_cli_compare(tiny_mlm_dir, tiny_bert_dir, tmp_path, capsys):
    from bertscope.cli import main

    data = tmp_path / "sentences.txt"
    data.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert main(["compare", str(tiny_mlm_dir), str(tiny_mlm_dir), "--corpus", "brown:60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layers_a"] == ["embeddings", 0, 1] and np.allclose(np.diag(out["cka"]), 1, atol=1e-6)
    assert out["source"] == "brown:60" and out["n_words"] >= 1024
    assert np.allclose(out["heads"]["js_same_head"], 0, atol=1e-5)  # same tokenizer: heads compared too
    assert main(["compare", str(tiny_mlm_dir), str(tiny_bert_dir), "--corpus", "brown:60", "--pool", "first"]) == 0
    text = capsys.readouterr().out
    assert "linear CKA" in text and "heads that moved most" in text
    for bad, message in ((["--data", str(data)], "a stable estimate needs at least 1,024"),
                         (["--corpus", "brown:0"], "use --corpus brown:N"),
                         (["--corpus", "brown:3", "--data", str(data)], "not both"),
                         (["--corpus", "brown:3"], "a stable estimate needs")):
        assert main(["compare", str(tiny_mlm_dir), str(tiny_mlm_dir), *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1 and message in err, err
    assert main(["compare", str(tiny_mlm_dir), str(tmp_path / "nowhere"), "--corpus", "brown:60"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# --- the query/key view ------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["tiny_bert_dir", "tiny_roberta_dir", "tiny_xlmr_dir", "tiny_electra_dir",
                                    "tiny_albert_dir", "tiny_distilbert_dir"])
def test_query_key_softmax_is_the_models_attention(family, request):
    from bertscope import inspect
    from bertscope.analysis.query_key import query_key

    lm = load_model(str(request.getfixturevalue(family)))
    text = "the bank of the river was muddy ."
    r = inspect(lm, text, with_hidden_states=False, with_logits=False)  # [layer, head, query, key]
    for layer, head, query in ((0, 0, 1), (lm.num_layers - 1, lm.num_heads - 1, 3)):
        qk = query_key(lm, text, layer, head, query)
        np.testing.assert_allclose(qk.weights, r.attentions[layer, head, query], atol=1e-5)
        np.testing.assert_allclose(qk.products.sum(-1) / qk.scale, qk.scores, rtol=1e-6)
        assert qk.keys.shape == (r.n_tokens, lm.hidden_size // lm.num_heads)


def test_query_key_cli_and_bad_input(tiny_bert_dir, capsys):
    from bertscope.cli import main

    assert main(["query-key", str(tiny_bert_dir), "the bank of the river .", "--layer", "1", "--head", "2",
                 "--query", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"tokens", "query", "keys", "products", "scores", "weights"} <= set(out)
    assert len(out["keys"]) == len(out["tokens"]) and abs(sum(out["weights"]) - 1) < 1e-5
    for bad, message in ((["--layer", "9", "--head", "0", "--query", "1"], "does not exist"),
                         (["--layer", "0", "--head", "0", "--query", "40"], "out of range")):
        assert main(["query-key", str(tiny_bert_dir), "the bank of the river .", *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


# --- heads ------------------------------------------------------------------------------------------

def test_pairwise_js_matches_scipy():
    from scipy.spatial.distance import jensenshannon

    from bertscope.analysis import compare as cmp

    rng = np.random.default_rng(2)
    p = rng.dirichlet(np.ones(7), size=(3, 5))  # [head_a, row, key]
    q = rng.dirichlet(np.ones(7), size=(4, 5))
    expected = np.array([[sum(jensenshannon(p[a, r], q[b, r]) ** 2 for r in range(5)) for b in range(4)]
                         for a in range(3)])
    got = cmp.pairwise_js(torch.from_numpy(p), torch.from_numpy(q)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    old = cmp.JS_SLAB_BYTES
    cmp.JS_SLAB_BYTES = 1  # a head of A at a time: the same numbers
    try:
        np.testing.assert_allclose(cmp.pairwise_js(torch.from_numpy(p), torch.from_numpy(q)).numpy(), got)
    finally:
        cmp.JS_SLAB_BYTES = old


def test_heads_of_a_model_and_itself_and_of_another(mlm, tiny_bert_dir, tiny_roberta_dir):
    from bertscope.analysis.compare import compare_heads

    texts = SENTENCES[:5]
    same = compare_heads(mlm, mlm, texts)
    np.testing.assert_allclose(same.same_head, 0, atol=1e-5)  # each head matches itself
    assert all(m["layer"] == m["b_layer"] and m["head"] == m["b_head"] for m in same.best_match())
    other = compare_heads(mlm, load_model(str(tiny_bert_dir)), texts)
    assert other.same_head.shape == (mlm.num_layers, mlm.num_heads)
    assert (other.same_head > 10 * same.same_head.max() + 1e-9).all()  # random tiny heads: near-uniform rows
    assert (other.js <= np.log(2) + 1e-9).all()
    out = json.loads(json.dumps(other.to_json()))
    assert len(out["best_match"]) == mlm.num_layers * mlm.num_heads and out["n_sentences"] == 5
    with pytest.raises(BertScopeError, match="share a tokenizer"):
        compare_heads(mlm, load_model(str(tiny_roberta_dir)), texts)


def test_a_fine_tuned_model_beside_its_base(tiny_bert_dir, tmp_path, capsys):
    """A classifier built on a base's encoder (its task head new, the encoder untouched) compares as
    the same model layer by layer: what fine-tuning changed is measured on the encoder alone."""
    from bertscope.cli import main
    from tests.conftest import labels, task_checkpoint

    tuned = task_checkpoint(tiny_bert_dir, tmp_path / "cls", "AutoModelForSequenceClassification", 1, num_labels=2,
                            **labels(["no", "yes"]))
    capsys.readouterr()
    assert main(["compare", str(tiny_bert_dir), str(tuned), "--corpus", "brown:60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert np.allclose(np.diag(out["cka"]), 1, atol=1e-6)
    assert np.allclose(out["heads"]["js_same_head"], 0, atol=1e-6)
