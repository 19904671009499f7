"""Distributed alignment search against computations that do not share its code: the interchange's algebra,
the whole embedding output swapped against a run on the hybrid text, a full-width rotation against the whole
state, training that finds subject number in bundled-mlm where a random subspace and neurons do not, the
command's JSON, and bad input in one line. pyvene's interventions are held to these in the peers lane
(``peers/test_pyvene.py``)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from bertscope.causal.alignment import align, iia_map, pairs_for, search_prepared
from bertscope.causal.das import TrainSettings, das
from bertscope.causal.interchange import factual, intervened, prepare_pairs
from bertscope.causal.subspaces import Boundless, FullVector, Neurons, Rotation
from bertscope.causal.variables import MODELS, CausalModel, Counterfactual, draw_pairs, read_counterfactuals
from bertscope.circuits.pairs import MASK
from bertscope.circuits.tasks import brown_nouns
from bertscope.cli import main
from bertscope.errors import BertScopeError

WORDS = ["dog", "cat", "man", "woman", "child", "horse", "fish", "boat"]


def tiny_pairs(n: int = 24, seed: int = 0) -> list[Counterfactual]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = rng.sample(WORDS, 3)
        out.append(Counterfactual(f"the {a} saw the [MASK] .", f"the {b} saw the [MASK] .", c, a))
    return out


def test_the_swap_puts_the_sources_part_in_the_subspace_and_keeps_the_rest():
    rotation = Rotation(16, 3, seed=2)
    r = rotation.weight.detach()  # [16, 3]
    assert torch.allclose(r.T @ r, torch.eye(3), atol=1e-5)
    base, source = torch.randn(5, 16), torch.randn(5, 16)
    new = rotation(base, source).detach()
    assert torch.allclose(new @ r, source @ r, atol=1e-5)  # inside: the source's coordinates
    rest = torch.eye(16) - r @ r.T
    assert torch.allclose(new @ rest, base @ rest, atol=1e-5)  # outside: the base's
    assert torch.allclose(Rotation(16, 16, seed=0)(base, source), source, atol=1e-5)


def test_the_whole_embedding_output_swapped_is_a_run_on_the_hybrid_text(tiny_bert):
    """Swapping the embedding output at position 2 (both texts' word 2) equals reading the base with the source's
    word there: the position and segment embeddings are the same, only the word's differs."""
    pairs = tiny_pairs(6)
    prepared = prepare_pairs(tiny_bert, pairs, positions=[2])
    rows = list(range(len(pairs)))
    swapped = intervened(tiny_bert, prepared, 0, rows, FullVector())
    hybrid = prepare_pairs(tiny_bert, [Counterfactual(p.source, p.source, p.answer, p.foil) for p in pairs],
                           positions=[2])
    direct = intervened(tiny_bert, hybrid, 0, rows, None)
    assert torch.allclose(swapped, direct, atol=1e-5)
    full_rotation = intervened(tiny_bert, prepared, 2, rows, Rotation(tiny_bert.hidden_size, tiny_bert.hidden_size))
    assert torch.allclose(full_rotation, intervened(tiny_bert, prepared, 2, rows, FullVector()), atol=1e-4)
    same = prepare_pairs(tiny_bert, [Counterfactual(p.base, p.base, p.answer, p.foil) for p in pairs], positions=[2])
    assert torch.allclose(intervened(tiny_bert, same, 2, rows, Rotation(tiny_bert.hidden_size, 4)),
                          intervened(tiny_bert, same, 2, rows, None), atol=1e-5)


def test_the_causal_models_answers_follow_the_source_variable():
    for model in MODELS.values():
        pairs = draw_pairs(model, 40, seed=1)
        assert sum(p.same for p in pairs) == 20
        for p in pairs:
            assert {p.answer, p.foil} == set(model.outputs)
    plurals = {plural for _, plural in brown_nouns()}
    for p in draw_pairs(MODELS["agreement"], 40, seed=2):  # the source: the base with another subject
        assert p.base.split()[2:] == p.source.split()[2:]
        assert p.answer == ("were" if p.source.split()[1] in plurals else "was")
        assert p.same == ((p.base.split()[1] in plurals) == (p.source.split()[1] in plurals))


def test_training_finds_subject_number_where_the_controls_do_not():
    """bundled-mlm's subject number at the subject, block 1's output: a 1-dimensional subspace moves agreement
    across the attractor on held-out pairs; a random one and the neurons do not (benchmarks/das.py has the
    figures at every layer)."""
    from bertscope import load_model

    mlm = load_model("bundled-mlm")
    name, prepared = pairs_for(mlm, "agreement", n=400)
    result = das(mlm, prepared, 1, dim=1, task=name)
    assert result.pairs_held_out >= 30
    assert result.iia >= 0.85, result
    assert result.iia_random_rotation <= 0.7 and result.iia_neurons <= 0.75 and abs(result.iia_base - 0.5) < 0.15
    assert result.basis.shape == (mlm.hidden_size, 1)
    again = das(mlm, prepared, 1, dim=1, task=name, controls=False)
    assert again.iia == result.iia and np.allclose(again.basis, result.basis)  # seeded: the same search twice


def test_boundless_and_neurons_learn_their_widths(tiny_bert):
    prepared = prepare_pairs(tiny_bert, tiny_pairs(24), positions=[2])
    result = das(tiny_bert, prepared, 1, dim=None, settings=TrainSettings(epochs=2))
    assert 1 <= result.dim <= tiny_bert.hidden_size and result.basis.shape == (tiny_bert.hidden_size, result.dim)
    boundless = Boundless(8, seed=0)
    assert boundless.dim == 4  # the boundary starts at half the width
    neurons = Neurons(8, 2)
    with torch.no_grad():
        neurons.logits[[3, 6]] = 5.0
    neurons.hard = True
    assert sorted(neurons.chosen().tolist()) == [3, 6] and float(neurons.mask().sum()) == 2


def test_every_layer_and_the_map(tiny_bert):
    pairs = tiny_pairs(20)
    result = align(tiny_bert, data=pairs, positions=[2], layer="all", pairs=40, settings=TrainSettings(epochs=1))
    assert [row["layer"] for row in result.by_layer] == ["embeddings", 0, 1]
    assert result.layer in ("embeddings", 0, 1) and "by_layer" in result.to_json()
    found = iia_map(tiny_bert, prepare_pairs(tiny_bert, pairs, positions=[2]), settings=TrainSettings(epochs=1))
    assert found.iia.shape == (3, len(found.tokens)) and ((found.iia >= 0) & (found.iia <= 1)).all()


def test_every_pass_reports_progress_so_that_stop_never_waits_through_one(tiny_bert, monkeypatch):
    """Each source read, training step and scoring batch reports (done, total): done climbs by one per pass of
    the model and ends at the total, with the controls and in the map alike."""
    import bertscope.causal.das as das_module
    passes = []
    for name in ("source_states", "intervened"):
        real = getattr(das_module, name)
        monkeypatch.setattr(das_module, name, lambda *a, real=real, name=name, **k: passes.append(name) or real(*a, **k))
    prepared = prepare_pairs(tiny_bert, tiny_pairs(40), positions=[2])
    reports: list[tuple[int, int]] = []
    das(tiny_bert, prepared, 1, dim=1, settings=TrainSettings(epochs=2, batch=8),
        progress=lambda d, t: reports.append((d, t)))
    assert [d for d, _ in reports] == list(range(1, len(passes) + 1))  # one report a pass, none skipped
    assert {t for _, t in reports} == {len(passes)} and passes.count("source_states") == 2 * 4  # both trainings
    reports.clear()  # every state searched, then the best again with its controls: one total for the whole search
    search_prepared(tiny_bert, "pairs", prepared, "all", settings=TrainSettings(epochs=1, batch=16),
                    progress=lambda d, t: reports.append((d, t)))
    assert [d for d, _ in reports] == list(range(1, reports[-1][1] + 1)) and len({t for _, t in reports}) == 1
    reports.clear()
    iia_map(tiny_bert, prepared, layers=[0], settings=TrainSettings(epochs=1, batch=16),
            progress=lambda d, t: reports.append((d, t)))
    assert [d for d, _ in reports] == list(range(1, reports[-1][1] + 1)) and len({t for _, t in reports}) == 1
    read: list[tuple[int, int]] = []  # the drawn pairs read before a task's pairs are kept
    factual(tiny_bert, prepare_pairs(tiny_bert, tiny_pairs(40), positions=[2]), lambda d, t: read.append((d, t)))
    assert read == [(1, 2), (2, 2)]  # 40 pairs of one length in batches of 32


def test_the_command_prints_the_issue_s_json(tmp_path, tiny_bert_dir, capsys):
    data = tmp_path / "pairs.csv"
    data.write_text("base,source,answer,foil\n" + "".join(f"{p.base},{p.source},{p.answer},{p.foil}\n"
                                                          for p in tiny_pairs(16)))
    assert main(["das", str(tiny_bert_dir), "--data", str(data), "--layer", "all", "--positions", "2",
                 "--epochs", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"task", "layer", "positions", "dim", "pairs_train", "pairs_held_out", "iia", "iia_random_rotation",
            "iia_neurons", "by_layer"} <= set(out)
    assert out["positions"] == [2] and out["pairs_train"] + out["pairs_held_out"] == 16
    assert main(["das", str(tiny_bert_dir), "--data", str(data), "--map", "--epochs", "1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["layers"] == ["embeddings", 0, 1] and len(found["iia"][0]) == len(found["tokens"]) == 8
    assert main(["das", str(tiny_bert_dir), "--data", str(data), "--map", "--epochs", "1"]) == 0
    assert "IIA of a 1-dimensional subspace" in capsys.readouterr().out


@pytest.mark.parametrize(("rows", "args", "message"), [
    ("the dog saw the [MASK] .,the very big dog saw the [MASK] .,cat,dog", ["--positions", "2"], "base and"),
    ("the dog saw the [MASK] .,the cat saw the [MASK] .,cat,dog", ["--positions", "40"], "past its end"),
    ("the dog saw the [MASK] .,the cat saw the [MASK] .,cat,zzqxv", ["--positions", "2"], "zzqxv"),
    ("the dog saw the [MASK] .,the cat saw the [MASK] .,cat,dog", [], "--positions"),
    ("the dog saw the [MASK] .,the cat saw the [MASK] .,cat,dog", ["--positions", "2", "--layer", "9"], "layers are"),
    ("the dog saw the [MASK] .,the cat saw the [MASK] .,cat,dog", ["--positions", "two"], "token indices"),
    ("the dog saw the [MASK] .,the cat saw the [MASK] .,cat,dog", ["--positions", "2", "--dim", "999"], "width"),
])
def test_bad_input_is_one_line(tmp_path, tiny_bert_dir, capsys, rows, args, message):
    data = tmp_path / "pairs.csv"
    data.write_text("base,source,answer,foil\n" + "\n".join([rows] * 10) + "\n")
    assert main(["das", str(tiny_bert_dir), "--data", str(data), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_bad_tasks_and_files_are_one_line(tmp_path, tiny_bert, tiny_bert_dir, capsys):
    assert main(["das", str(tiny_bert_dir), "--task", "nope"]) == 2
    assert "Unknown causal task" in capsys.readouterr().err
    with pytest.raises(BertScopeError, match="bundled-sentiment"):
        pairs_for(tiny_bert, "negation")
    missing = tmp_path / "pairs.csv"
    missing.write_text("base,source,answer\na,b,c\n")
    with pytest.raises(BertScopeError, match="lacks the column foil"):
        read_counterfactuals(missing)
    odd = CausalModel("odd", "returns what the network cannot output", MASK, "bundled-mlm", "x", 1, ("yes", "no"),
                      lambda rng: {"x": rng.random() < 0.5}, lambda s: "the [MASK] .", lambda s: "maybe")
    with pytest.raises(BertScopeError, match="may return only yes or no"):
        draw_pairs(odd, 4)


def test_too_few_pairs_are_refused_before_any_pass():
    """What the DAS tab reads before it charges a run of your own pairs: 6 pairs hold 2 out and leave 4 to train."""
    from bertscope.causal.das import check_pair_count, split

    assert len(split(6)[0]) == 4 and len(split(8)[0]) >= 5
    with pytest.raises(BertScopeError, match="6 pairs are too few to train on and hold some out: give at least 8"):
        check_pair_count(6)
    check_pair_count(8)
