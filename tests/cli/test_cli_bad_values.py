"""Bad values of the commands' options: one line and exit 2, before any model loads (the model named here does not
exist, so a check that ran after the load would say so instead), and every ``--seed`` checked by one type."""

from __future__ import annotations

import pytest

from bertscope.cli import build_parser, main
from bertscope.cli.common import seed_int

NO_MODEL = "no-such-model-here"


@pytest.fixture(scope="module")
def concept(tmp_path_factory):
    path = tmp_path_factory.mktemp("tcav") / "concept.txt"
    path.write_text("\n".join(f"a sentence about the sea, number {i}" for i in range(30)), encoding="utf-8")
    return str(path)


CASES = [  # (argv with CONCEPT for the concept file, what the line says)
    (["faithfulness", NO_MODEL, "--seed", "-1"], "a seed is a whole number from 0"),
    (["mlm-recipe", NO_MODEL, "--seed", "-1"], "a seed is a whole number from 0"),
    (["train-tuned-lens", NO_MODEL, "--seed", "x"], "is not a whole number"),
    (["tcav", NO_MODEL, "--concept", "CONCEPT", "--target", "sea", "--seed", "-2"], "a seed is a whole number"),
    (["tcav", NO_MODEL, "--concept", "CONCEPT", "--target", "sea", "--layers", ","], "names no layer"),
    (["das", NO_MODEL, "--task", "agreement", "--map", "--dim", "0"], "--map trains a subspace of one width"),
    (["das", NO_MODEL, "--task", "agreement", "--map", "--epochs", "0"], "give a whole number from 1"),
    (["das", NO_MODEL, "--task", "agreement", "--dim", "-1"], "0 learns the width (boundless DAS)"),
    (["das", NO_MODEL, "--task", "agreement", "--map", "--pairs", "1"], "pairs; 1 was asked"),
    (["search", NO_MODEL, "--query", "rivers", "--limit", "0"], "give a whole number from 1"),
    (["search", NO_MODEL, "--query", "rivers", "--data", ""], "''"),
    (["retrieval-eval", NO_MODEL, "--limit", "-5"], "give a whole number from 1"),
    (["patch", NO_MODEL, "--clean", "a b", "--corrupt", "a c", "--top", "0"], "give a whole number from 1"),
    (["query-key", NO_MODEL, "the bank", "--layer", "0", "--head", "0", "--query", "1", "--top", "-3"],
     "give a whole number from 1"),
    (["train-tuned-lens", NO_MODEL, "--out", " "], "--out is empty"),
    (["erase", NO_MODEL, "--batch-size", "0"], "give a whole number from 1"),
    (["search", NO_MODEL, "--query", "rivers", "--top-k", "0"], "give a whole number from 1"),
    (["search", NO_MODEL, "--query", "rivers", "--explain", "--steps", "0"], "give a whole number from 1"),
    (["similarity", NO_MODEL, "--a", "a river", "--b", "the bank", "--steps", "0"], "give a whole number from 1"),
    (["rerank", NO_MODEL, "--query", "q", "--passages", "p", "--explain", "--steps", "-3"], "give a whole number"),
    (["tuned-lens", NO_MODEL, "the [MASK] ran", "--mask", "0"], "give a whole number from 1"),
    (["tuned-lens", NO_MODEL, "the [MASK] ran", "--top-k", "0"], "give a whole number from 1"),
    (["train-tuned-lens", NO_MODEL, "--steps", "0"], "give a whole number from 1"),
    (["train-tuned-lens", NO_MODEL, "--batch", "0"], "give a whole number from 1"),
    (["tcav", NO_MODEL, "--concept", "CONCEPT", "--target", "sea", "--runs", "1"], "at least 20 random sets"),
    (["tcav", NO_MODEL, "--concept", "CONCEPT", "--target", "sea", "--n", "0"], "give a whole number from 1"),
    (["tcav", NO_MODEL, "--concept", "CONCEPT", "--target", "sea", "--alpha", "1.5"], "between 0 and 1"),
    (["tcav", NO_MODEL, "--concept", "CONCEPT", "--target", "sea", "--alpha", "nan"], "is not a finite number"),
    (["head-importance", NO_MODEL, "--batch-size", "0"], "give a whole number from 1"),
]


@pytest.mark.parametrize("argv, said", CASES, ids=[" ".join(a[:1] + a[2:])[:60] for a, _ in CASES])
def test_a_bad_value_is_one_line_before_the_model_loads(argv, said, concept, capsys):
    try:
        code = main([concept if a == "CONCEPT" else a for a in argv])
    except SystemExit as exit_:  # argparse's own refusals (a type's) exit from the parser, in one line too
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1 and NO_MODEL not in err, err


def test_every_seed_option_is_checked_by_one_type():
    parser = build_parser("*")
    commands = next(a for a in parser._actions if a.dest == "command").choices
    seeds = {name: action for name, sub in commands.items() for action in sub._actions
             if "--seed" in action.option_strings}
    assert len(seeds) >= 15 and {name for name, a in seeds.items() if a.type is not seed_int} == set()
