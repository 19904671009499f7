"""The intervention commands: ablate, head-importance, patch — JSON as documented, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertscope import inspect, load_model
from tests.cli.test_cli import run_cli

SENTENCES = ["the bank of the river was muddy .", "she deposited the money in the bank .",
             "a man is eating food .", "the dog sat in the boat .", "he rode a horse to the river ."]


def test_ablate_json(capsys, tiny_mlm_dir):
    code, out, err = run_cli(capsys, "ablate", str(tiny_mlm_dir), "the bank of the [MASK] was [MASK] .",
                             "--heads", "1:2,0:1", "--top-k", "3", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "zero" and data["heads"] == [[0, 1], [1, 2]]
    assert [m["position"] for m in data["masks"]] == [5, 7]
    lm = load_model(str(tiny_mlm_dir))
    own = inspect(lm, "the bank of the [MASK] was [MASK] .", with_attentions=False, with_hidden_states=False,
                  logit_positions="masks").logits_at(5)
    p = np.exp(own - np.logaddexp.reduce(own))
    best = int(np.argmax(p))
    first = data["masks"][0]
    assert first["before"][0]["token"] == lm.tokenizer.convert_ids_to_tokens(best)
    assert first["before"][0]["probability"] == pytest.approx(float(p[best]), rel=1e-5)
    assert len(first["after"]) == 3


def test_ablate_mean_over_a_file_and_an_nsp_target(capsys, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "reference.txt"
    corpus.write_text("\n".join(SENTENCES))
    code, out, err = run_cli(capsys, "ablate", str(tiny_bert_dir), "the man sat .", "--pair", "he ate food .",
                             "--heads", "0:0,0:1,0:2,0:3", "--mode", "mean", "--reference", str(corpus),
                             "--target", "nsp", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["reference"] == "5 sentences given" and "masks" not in data
    assert 0 < data["decision"]["before"] < 1 and data["decision"]["after"] != data["decision"]["before"]


def test_head_importance_json_with_pruning(capsys, tiny_mlm_dir, tmp_path):
    fit, held = tmp_path / "fit.txt", tmp_path / "held.txt"
    fit.write_text("\n".join(SENTENCES))
    held.write_text("\n".join(SENTENCES[:3]))
    code, out, err = run_cli(capsys, "head-importance", str(tiny_mlm_dir), "--corpus", str(fit), "--prune",
                             "--held-out", str(held), "--json")
    assert code == 0, err
    data = json.loads(out)
    importance = np.array(data["importance"])
    assert importance.shape == (2, 4) and np.allclose(np.linalg.norm(importance, axis=1), 1, atol=1e-5)
    pruning = data["pruning"]
    assert pruning["fraction"][0] == 0 and pruning["fraction"][-1] == 1 and len(pruning["fraction"]) == 11
    assert len(pruning["random_orders"]) == 3 and len(pruning["importance_order"]) == 11


def test_patch_json(capsys, tiny_mlm_dir):
    args = ["patch", str(tiny_mlm_dir), "--clean", "the river was [MASK] .", "--corrupt", "the money was [MASK] .",
            "--target", "muddy,good"]
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["metric"] == "logit_diff" and data["layers"] == ["embeddings", 0, 1]
    assert data["tokens"] == ["[CLS]", "the", "money", "was", "[MASK]", ".", "[SEP]"]
    assert np.array(data["recovered"]).shape == (3, 7)
    assert data["recovered"][-1][4] == pytest.approx(1.0, abs=1e-3)  # the last state at the mask
    code, out, err = run_cli(capsys, *args, "--what", "heads", "--json")
    assert code == 0 and np.array(json.loads(out)["recovered"]).shape == (2, 4) and json.loads(out)["layers"] == [0, 1]
    code, out, err = run_cli(capsys, *args, "--positions", "2,4", "--json")
    grid = json.loads(out)["recovered"]
    assert code == 0 and grid[0][0] is None and grid[0][2] is not None
    code, out, err = run_cli(capsys, *args)  # the text table names the rows as every command does
    assert code == 0 and out.splitlines()[2].split()[0] == "embeddings"


def test_patch_a_question_answering_model_on_two_spans_of_a_context(capsys, tiny_bert_dir, tmp_path):
    from tests.conftest import task_checkpoint

    qa = task_checkpoint(tiny_bert_dir, tmp_path / "qa", "AutoModelForQuestionAnswering", 4, num_labels=2)
    context = "the man sat by the river and the dog was by the bank ."
    args = ["patch", str(qa), "--clean", "who sat by the river ?", "--corrupt", "what was by the river ?",
            "--target", "the man,the dog"]
    code, out, err = run_cli(capsys, *args, "--context", context, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["metric"] == "span_score_diff" and data["reads"] == "span" and data["context"] == context
    from bertscope import load_model
    from bertscope.interventions.patching import patch

    grid = patch(load_model(str(qa)), *args[3:6:2], ("the man", "the dog"), context=context)  # the library's
    assert (data["m_clean"], data["m_corrupt"]) == pytest.approx((grid.m_clean, grid.m_corrupt), abs=1e-6)
    assert np.allclose(np.array(data["recovered"], float), grid.recovered, atol=1e-5, equal_nan=True)
    code, out, err = run_cli(capsys, *args, "--context", context)
    assert code == 0 and out.startswith("score(the man) - score(the dog)")
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and "give the context both questions ask of" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["patch", "{mlm}", "--clean", "the river [MASK] .", "--corrupt", "the river bank [MASK] .", "--target",
          "is,was"], "clean text has 6 tokens and the corrupted one 7"),
        (["patch", "{mlm}", "--clean", "the river [MASK] .", "--corrupt", "the money [MASK] .", "--target", "is"],
         "two tokens"),
        (["patch", "{mlm}", "--clean", "the river [MASK] .", "--corrupt", "the money [MASK] .", "--target",
          "is,zebra"], "not one vocabulary item"),
        (["ablate", "{mlm}", "the [MASK] .", "--heads", "2:0"], "Layer 2, head 0 does not exist"),
        (["ablate", "{mlm}", "the [MASK] .", "--heads", "two"], "LAYER:HEAD"),
        (["ablate", "{encoder}", "the [MASK] .", "--heads", "0:0"], "no masked-LM head"),
        (["head-importance", "{encoder}", "--corpus", "brown:4"], "no masked-LM head"),
        (["head-importance", "{mlm}", "--corpus", "brown:x"], "brown:N"),
    ],
)
def test_intervention_bad_input(capsys, tiny_mlm_dir, tiny_encoder_dir, argv, message):
    argv = [a.format(mlm=tiny_mlm_dir, encoder=tiny_encoder_dir) for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err
