"""TCAV against computations that do not share its code: the directional derivative against a finite
difference along the CAV, the CAV against a separable case, and the whole test against captum's
``TCAV`` on a model wrapped so that its layer is the pooled state (the shared case); bad input in
one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bertscope.attribution.gradients import score_function
from bertscope.causal import cavs as T
from bertscope.cli import main
from bertscope.core.hook_points import state_hook
from bertscope.core.hooked_pass import hooks_on
from bertscope.errors import BertScopeError

CONCEPT = [f"the {w} river flowed past the {v} bank ." for w, v in
           [("wide", "muddy"), ("cold", "steep"), ("slow", "green"), ("long", "low"), ("deep", "high"),
            ("brown", "rocky"), ("quiet", "grassy"), ("old", "sandy"), ("fast", "wet"), ("clear", "soft"),
            ("dark", "flat"), ("small", "far")]]
INPUTS = ["the bank of the [MASK] was muddy .", "she sat by the [MASK] all day .", "a boat on the [MASK] .",
          "the [MASK] flooded the town .", "we swam in the [MASK] ."]


def test_the_directional_derivative_is_the_slope_along_the_cav(tiny_bert):
    items, _ = T.decisions(tiny_bert, "river", INPUTS[:2])
    grads = T.directional_gradients(tiny_bert, items)  # [input, state, dim]
    v = torch.randn(tiny_bert.hidden_size, generator=torch.Generator().manual_seed(1))
    v /= v.norm()
    for i, item in enumerate(items):
        f, _ = score_function(tiny_bert, item.inspection, item.target)
        from bertscope.attribution.gradients import input_embeddings

        x, _ = input_embeddings(tiny_bert, item.inspection)
        for state in (0, 2):
            def moved(eps):
                hook = {state_hook(tiny_bert.model, state): lambda h, p: h + eps * v}  # every position
                with hooks_on(tiny_bert, hook), torch.inference_mode():
                    return float(f(x))
            eps = 2e-2  # float32: a smaller step is lost in rounding, a larger one in curvature
            slope = (moved(eps) - moved(-eps)) / (2 * eps)
            assert float(grads[i, state] @ v.numpy()) == pytest.approx(slope, rel=2e-2, abs=2e-5)


def test_the_cav_points_to_the_concept():
    rng = np.random.default_rng(0)
    direction = rng.normal(size=16)
    concept = rng.normal(size=(30, 16)) + 5 * direction / np.linalg.norm(direction)
    other = rng.normal(size=(30, 16))
    v, accuracy = T.train_cav(concept, other)
    assert accuracy > 0.9 and np.linalg.norm(v) == pytest.approx(1)
    assert v @ direction / np.linalg.norm(direction) > 0.8


class _Pooled(torch.nn.Module):
    """The shared case for captum: ``pool`` outputs a hidden state's mean over the content tokens, and the
    rest of the model reads it back at every position (``h + (p − p̄)``, the same values),
    so captum's layer gradient at ``pool`` is Σ_t ∂f/∂h_t over every position, and its layer activation the
    pooled state."""

    def __init__(self, lm, state: int, token: int):
        super().__init__()
        self.lm, self.state, self.token = lm, state, token
        self.pool = torch.nn.Identity()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: [1, token] -> [1, vocab]
        tok = self.lm.tokenizer  # the tokens the tokenizer added are special ([UNK] is a text's own token)
        special = torch.isin(ids[0], torch.tensor([tok.cls_token_id, tok.sep_token_id, tok.pad_token_id]))
        m = (~special).float()[None, :, None]  # [1, token, 1]

        def reread(h, point):
            p = (h * m).sum(1) / m.sum(1)  # [1, dim] the content tokens' mean
            return h + (self.pool(p) - p.detach())[:, None, :]  # read back at every position

        with hooks_on(self.lm, {state_hook(self.lm.model, self.state): reread}):
            logits = self.lm.model(input_ids=ids, attention_mask=torch.ones_like(ids)).prediction_logits  # [1, token, V]
        where = (ids[0] == self.lm.tokenizer.mask_token_id).nonzero()
        return torch.log_softmax(logits[:, int(where[0]) if len(where) else 0].float(), -1)


def test_the_scores_equal_captums_tcav_on_the_shared_case(tiny_bert, tmp_path):
    from captum.concept import TCAV, Concept
    from captum.concept._utils.classifier import Classifier
    from captum.concept._utils.common import concepts_to_str

    runs, state = T.MIN_RUNS, 2
    result = T.tcav(tiny_bert, CONCEPT, "river", runs=runs, inputs=INPUTS, layers=[state - 1])
    (verdict,) = result.layers
    pool = T.random_pool("brown", len(CONCEPT) * (runs + 1), 0, exclude=CONCEPT)

    class Ours(Classifier):  # captum's pipeline around the same CAV fit (its seed from the random set's number)
        def __init__(self):
            self.v, self.ids = None, None

        def train_and_eval(self, dataloader, **kwargs):
            xs, ys = zip(*dataloader)
            x, y = torch.cat(xs).numpy(), torch.cat(ys).numpy()
            low, high = sorted(set(y.tolist()))
            self.v, _ = T.train_cav(x[y == low], x[y == high], high - 100)
            self.ids = [low, high]
            return {}

        def weights(self):
            return torch.tensor(np.stack([self.v, -self.v]), dtype=torch.float32)

        def classes(self):
            return self.ids

    tok = tiny_bert.tokenizer

    def concept(cid, name, texts):
        rows = [torch.tensor(tok(t, truncation=True, max_length=tiny_bert.max_length)["input_ids"])[None]
                for t in texts]  # one text a batch: lengths differ
        return Concept(cid, name, iter(rows))

    model = _Pooled(tiny_bert, state, tok.convert_tokens_to_ids("river"))
    size = len(CONCEPT)
    mine = concept(0, "mine", CONCEPT)
    randoms = [concept(100 + r, f"random{r}", pool[r * size:(r + 1) * size]) for r in range(runs + 1)]
    sets = [[mine, randoms[r]] for r in range(1, runs + 1)] + [[randoms[r - 1], randoms[r]] for r in range(1, runs + 1)]
    captum = TCAV(model, ["pool"], classifier=Ours(), save_path=str(tmp_path / "cav"))
    signs = []
    for text in INPUTS:
        ids = torch.tensor(tok(text.replace("[MASK]", tok.mask_token))["input_ids"])[None]
        scores = captum.interpret(ids, sets, target=model.token)
        signs.append([float(scores[concepts_to_str(s)]["pool"]["sign_count"][0]) for s in sets])
    per_set = np.mean(signs, axis=0)  # [set] the share of inputs with a positive derivative
    np.testing.assert_allclose(verdict.scores, per_set[:runs], atol=1e-6)
    np.testing.assert_allclose(verdict.random_scores, per_set[runs:], atol=1e-6)


def test_a_random_concept_is_not_significant_at_any_layer(tiny_bert):
    from bertscope.corpora.brown_tasks import brown_texts

    result = T.tcav(tiny_bert, brown_texts(15, seed=7), "river", inputs=INPUTS, random_from="brown", seed=3)
    assert len(result.layers) == tiny_bert.num_layers + 1 and result.layers[0].layer == "embeddings"
    assert not any(v.significant for v in result.layers)
    out = json.loads(json.dumps(result.to_json()))
    assert set(out["layers"][0]) == {"layer", "tcav", "tcav_std", "random_tcav", "cav_accuracy", "p_value",
                                     "cav_p_value", "significant"}
    assert out["corrected_alpha"] == pytest.approx(0.05 / len(out["layers"]))


def test_bad_input_is_one_line(tiny_bert, tiny_bert_dir, tmp_path, capsys):
    with pytest.raises(BertScopeError, match=f"at least {T.MIN_CONCEPT}"):
        T.tcav(tiny_bert, CONCEPT[:3], "river", inputs=INPUTS)
    with pytest.raises(BertScopeError, match="Layer 9 does not exist"):
        T.tcav(tiny_bert, CONCEPT, "river", inputs=INPUTS, layers=[9])
    with pytest.raises(BertScopeError, match="exactly one"):
        T.tcav(tiny_bert, CONCEPT, "river", inputs=["no mask here ."] * 3)
    with pytest.raises(BertScopeError, match="runs"):
        T.tcav(tiny_bert, CONCEPT, "river", inputs=INPUTS, runs=3)
    few, concept, inputs = tmp_path / "few.txt", tmp_path / "concept.txt", tmp_path / "inputs.txt"
    few.write_text("\n".join(CONCEPT[:4]))
    concept.write_text("\n".join(CONCEPT))
    inputs.write_text("\n".join(INPUTS))
    for fmt in ([], ["--json"]):
        assert main(["tcav", str(tiny_bert_dir), "--target", "river", "--concept", str(concept), "--inputs",
                     str(inputs), "--layers", "embeddings,1", *fmt]) == 0
    shown = capsys.readouterr().out
    assert "p (CAV)" in shown and json.loads(shown[shown.index("{"):])["layers"][1]["layer"] == 1
    for bad in (["--concept", str(few)], ["--concept", str(tmp_path / "none.txt")],
                ["--concept", str(concept), "--inputs", str(inputs), "--layers", "7"],
                ["--concept", str(concept), "--inputs", str(inputs), "--random-from", "nowhere"]):  # --runs 2: the
        # option's own type (tests/cli/test_cli_bad_values.py)
        assert main(["tcav", str(tiny_bert_dir), "--target", "river", *bad]) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("bertscope: error: ") and err.count("\n") == 1, err


def test_a_taggers_tag_is_explained_at_the_first_word_tagged_so():
    """bundled-upos's VERB: each input's first word the tagger calls a verb is the decision's position; the test runs
    to its verdicts on held-out Brown sentences."""
    from bertscope import load_model

    lm = load_model("bundled-upos")
    items, name = T.decisions(lm, "VERB", n=4)
    assert name == "tag VERB" and len(items) == 4
    for item in items:
        assert item.target.kind == "tag" and item.target.label == "VERB" and item.target.position >= 1
    result = T.tcav(lm, list(T.EXAMPLES["action"][1]), "VERB", runs=T.MIN_RUNS, n_inputs=4, layers=["embeddings", 2])
    assert [v.layer for v in result.layers] == ["embeddings", 2]
    assert all(0 <= v.tcav <= 1 and 0 <= v.p_value <= 1 for v in result.layers)
    with pytest.raises(BertScopeError, match="no tag 'VERBS'"):
        T.decisions(lm, "VERBS", n=4)


def test_the_inputs_masks_and_the_tests_size_are_read_before_any_pass(tiny_bert, monkeypatch):
    """What the app checks before it charges the job: each input's one [MASK], and the word pieces the test passes
    (the random sets drawn as the test draws them); the job's bar reaches its end through every stage."""
    from bertscope.corpora.brown_tasks import brown_texts

    with pytest.raises(BertScopeError, match="exactly one .* has 2"):
        T.check_masks(tiny_bert, ["the [MASK] and the [MASK] ."])
    assert T.check_masks(tiny_bert, ["by the [MASK] ."]) == [f"by the {tiny_bert.tokenizer.mask_token} ."]
    concept = brown_texts(15, seed=7)
    import bertscope.corpora.brown_tasks as brown
    reads: list[int] = []
    monkeypatch.setattr(brown, "brown_texts", lambda n, seed: reads.append(n) or brown_texts(n, seed))
    T._corpus_texts.cache_clear()
    size = T.tcav_pieces(tiny_bert, concept, "brown", T.MIN_RUNS, INPUTS, len(INPUTS), seed=3)
    pool = T.random_pool("brown", len(concept) * (T.MIN_RUNS + 1), 3, exclude=concept)
    assert len(reads) == 1  # counted, then drawn again for the test: Brown read once
    read = sum(len(tiny_bert.tokenizer(t, truncation=True, max_length=tiny_bert.max_length)["input_ids"])
               for t in [*concept, *pool])
    assert size == read + 3 * sum(len(tiny_bert.tokenizer(t)["input_ids"]) for t in INPUTS)
    reports: list[tuple[int, int]] = []
    T.tcav(tiny_bert, concept, "river", inputs=INPUTS, random_from="brown", seed=3,
           progress=lambda d, t: reports.append((d, t)))
    done = [d for d, _ in reports]
    total = len(INPUTS) + len(concept) + len(pool) + tiny_bert.num_layers + 1  # ... and a CAV fit a state
    assert done == sorted(done) and reports[-1] == (total, total)
