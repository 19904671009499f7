"""Attribution patching over nodes: AtP equals the first-order term computed on the Hugging Face model
directly; IG along the embeddings is complete; on the real model both are held to exact patching, and
the case where the linear estimate breaks (the embedding of the very token that differs) is shown."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertscope import load_model
from bertscope.circuits.nodes import attribute_nodes, compare_with_patching
from bertscope.errors import BertScopeError
from bertscope.interventions.examples import PATCH_EXAMPLES

CLEAN, CORRUPT, CANDIDATES = "the man [MASK] here .", "the dog [MASK] here .", ("is", "was")


@pytest.fixture(scope="module")
def lm(tiny_mlm_dir):
    model = load_model(str(tiny_mlm_dir))
    model.model.double()
    return model


def test_atp_is_the_first_order_term_on_the_hugging_face_model(lm):
    scores = attribute_nodes(lm, CLEAN, CORRUPT, CANDIDATES, "atp")
    tok, model = lm.tokenizer, lm.model
    a, b = tok.convert_tokens_to_ids(list(CANDIDATES))
    clean, corrupt = tok(CLEAN, return_tensors="pt"), tok(CORRUPT, return_tensors="pt")
    position = clean["input_ids"][0].tolist().index(tok.mask_token_id)
    with torch.no_grad():
        out = model(**clean, output_hidden_states=True)
        clean_states, m_clean = out.hidden_states, float(out.logits[0, position, a] - out.logits[0, position, b])
    frozen = [p for p in model.parameters() if not p.requires_grad]
    with torch.enable_grad():
        for p in frozen:  # the loader freezes the shared model; the reference needs a graph through it
            p.requires_grad_(True)
        out = model(**corrupt, output_hidden_states=True)
        for h in out.hidden_states:
            h.retain_grad()
        metric = out.logits[0, position, a] - out.logits[0, position, b]
        metric.backward()
        for p in frozen:
            p.requires_grad_(False)
    model.zero_grad(set_to_none=True)
    span = m_clean - float(metric.detach())
    expected = np.stack([((c[0] - h[0].detach()) * h.grad[0]).sum(-1).numpy() / span
                         for c, h in zip(clean_states, out.hidden_states)])
    assert scores.m_clean == pytest.approx(m_clean, abs=1e-9)
    np.testing.assert_allclose(scores.hidden, expected, atol=1e-9)
    assert scores.heads.shape == (lm.num_layers, len(scores.setup.tokens), lm.num_heads)
    assert scores.mlps.shape == (lm.num_layers, len(scores.setup.tokens))


def test_ig_along_the_embeddings_is_complete(lm):
    scores = attribute_nodes(lm, CLEAN, CORRUPT, CANDIDATES, "ig", steps=100)
    assert scores.hidden[0].sum() == pytest.approx(1.0, abs=0.03)  # the whole embedding row recovers it all
    with pytest.raises(BertScopeError, match="Unknown node attribution"):
        attribute_nodes(lm, CLEAN, CORRUPT, CANDIDATES, "acdc")


@pytest.mark.slow
def test_on_bundled_mlm_ig_repairs_where_the_linear_estimate_breaks():
    lm = load_model("bundled-mlm")
    clean, corrupt, a, b = PATCH_EXAMPLES["Subject–verb agreement"]
    grids = {(g.grid, g.method): g for g in compare_with_patching(lm, clean, corrupt, (a, b), steps=10)}
    assert grids[("heads", "atp")].correlation > 0.95 and grids[("heads", "ig")].correlation > 0.95
    assert grids[("hidden", "ig")].correlation > 0.98 > grids[("hidden", "atp")].correlation
    worst = grids[("hidden", "atp")].worst  # the subject's own embedding: patching it recovers everything
    assert worst["row"] == "embeddings" and worst["exact"] == pytest.approx(1.0, abs=0.01) and worst["estimate"] < 0.5


def test_a_question_answering_model_is_patched_and_attributed_on_its_span_score(tiny_bert_dir, tmp_path):
    """Two questions of one context, two spans of it: the metric is the answer span's start + end logits less the
    foil's, read from the Hugging Face model's own outputs; IG along the embeddings recovers all of it."""
    from bertscope.interventions.patching import patch
    from tests.conftest import task_checkpoint

    qa = load_model(str(task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 4,
                                        num_labels=2)))
    qa.model.double()
    context, spans = "the man sat by the river and the dog was by the bank .", ("the man", "the dog")
    clean, corrupt = "who sat by the river ?", "what was by the river ?"
    grid = patch(qa, clean, corrupt, spans, what="hidden", context=context)
    s = grid.setup
    assert s.reads == "span" and s.clean_tokens[s.candidate_ids[0]:s.candidate_ends[0] + 1] == ["the", "man"]

    def by_hand(question: str) -> float:
        with torch.no_grad():
            out = qa.model(**qa.tokenizer(question, context, return_tensors="pt"))
        start, end = out.start_logits[0], out.end_logits[0]
        (a, b), (a_end, b_end) = s.candidate_ids, s.candidate_ends
        return float(start[a] + end[a_end] - start[b] - end[b_end])

    assert grid.m_clean == pytest.approx(by_hand(clean), abs=1e-9)
    assert grid.m_corrupt == pytest.approx(by_hand(corrupt), abs=1e-9)
    assert grid.to_json()["metric"] == "span_score_diff" and grid.to_json()["context"] == context
    # the last hidden state patched at every position is the clean run: each position's share, summed, is not
    # asked of exact patching; IG along the embeddings is complete
    scores = attribute_nodes(qa, clean, corrupt, spans, "ig", steps=100, context=context)
    assert scores.m_clean == pytest.approx(grid.m_clean, abs=1e-9)
    assert scores.hidden[0].sum() == pytest.approx(1.0, abs=0.03)
    with pytest.raises(BertScopeError, match="give the context"):
        patch(qa, clean, corrupt, spans)
    with pytest.raises(BertScopeError, match="'a boat' of this example is not in its context"):
        patch(qa, clean, corrupt, ("the man", "a boat"), context=context)
    long = " ".join([context] * 30)  # cut at the model's maximum: both rows as long, the questions not
    with pytest.raises(BertScopeError, match="This example has .* tokens clean and .* corrupted"):
        patch(qa, "who ?", "who sat ?", spans, context=long)
