"""Property-based fuzzing (Hypothesis) of what a hostile visitor or a careless user hands BertScope: every file
reader gets arbitrary text (and text shaped like its format), every command gets arbitrary arguments drawn from its
own options. The only outcomes allowed are a result or one line (``BertScopeError``; exit status 2 with one line
on stderr): a traceback is a finding.

The figures the hosted-demo issue asks for come from ``python -m pytest tests/test_fuzz.py -s``: each test prints
its number of cases."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertscope.errors import BertScopeError

pytestmark = pytest.mark.slow

# derandomized: the same cases every run, so the suite's time is the same every run (a longer hunt: the environment)
QUICK = settings(max_examples=int(os.environ.get("BERTSCOPE_FUZZ_READS", "200")), deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])

FIELD = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
SHAPED = st.one_of(
    st.text(max_size=300),
    st.lists(st.lists(FIELD, min_size=1, max_size=5).map(",".join), max_size=8).map("\n".join),
    st.lists(st.lists(FIELD, min_size=1, max_size=5).map("\t".join), max_size=8).map("\n".join),
    st.lists(st.recursive(st.none() | st.booleans() | st.integers() | FIELD,
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FIELD, inner, max_size=3),
                          max_leaves=8).map(lambda v: __import__("json").dumps(v)), max_size=6).map("\n".join),
    st.sampled_from(["[" * 100_000, '"' + "a" * 200_000, "\x00\ufeff", "text,label\n\"open", "1\tthe\t_\n\n"]),
)
HEADERS = ["", "sentence,label\n", "tokens,tags\n", "text,label\n", "text,text_pair,label\n", "question,context\n",
           "clean,corrupted,answer,foil\n", "en\tde\tfr\n", "# sent_id = 1\n"]


def _readers():
    from bertscope.circuits.pairs import read_pairs
    from bertscope.corpora.labelled import read_jsonl
    from bertscope.corpora.parallel import read_parallel_tsv
    from bertscope.corpora.probe_tasks import read_conllu, read_csv_task, read_jsonl_task, read_task
    from bertscope.corpora.questions import read_squad_file
    from bertscope.corpora.senses import read_labelled_csv
    from bertscope.tasks.predict import read_records
    from bertscope.training.task_data import read_records_file, read_tagged_file

    return {
        "read_task.csv": lambda t: read_task(t, "x.csv"), "read_task.jsonl": lambda t: read_task(t, "x.jsonl"),
        "read_task.conllu": lambda t: read_task(t, "x.conllu"), "read_conllu": read_conllu,
        "read_csv_task": read_csv_task, "read_jsonl_task": read_jsonl_task, "read_jsonl": lambda t: read_jsonl(t, "x"),
        "read_parallel_tsv": read_parallel_tsv, "read_records.csv": lambda t: read_records(t, "x.csv"),
        "read_records.jsonl": lambda t: read_records(t, "x.jsonl"),
        "read_records_file.tsv": lambda t: read_records_file(t, "x.tsv"),
        "read_records_file.csv": lambda t: read_records_file(t, "x.csv"),
        "read_tagged_file.conllu": lambda t: read_tagged_file(t, "x.conllu"),
        "read_tagged_file.jsonl": lambda t: read_tagged_file(t, "x.jsonl"),
        "read_squad_file.json": lambda t: read_squad_file(t, "x.json"),
        "read_squad_file.jsonl": lambda t: read_squad_file(t, "x.jsonl"),
        "read_pairs.csv": lambda t: read_pairs(t.encode("utf-8", "surrogatepass"), "x.csv"),
        "read_pairs.bytes": lambda t: read_pairs(t.encode("utf-8", "surrogatepass")[::-1], "x.jsonl"),
        "read_labelled_csv": read_labelled_csv,
    }


READERS = sorted(_readers())


@pytest.mark.parametrize("name", READERS)
def test_every_reader_gives_a_result_or_one_line(name):
    reader = _readers()[name]
    cases = []

    @QUICK
    @given(header=st.sampled_from(HEADERS), body=SHAPED)
    def run(header, body):
        cases.append(1)
        try:
            reader(header + body)
        except BertScopeError as err:
            assert "\n" not in str(err) and str(err).strip(), repr(str(err))

    run()
    print(f"{name}: {len(cases)} cases, 0 findings")


# -- every command's arguments -----------------------------------------------------------------------------------

class _Ran(BaseException):
    """An example that ran past its time: it did the work it was given (no traceback so far). A BaseException, as
    KeyboardInterrupt is: a library's ``except Exception`` that rewraps what it caught (transformers' tensor
    conversion does) must not turn the alarm into a finding."""


EXAMPLES = int(os.environ.get("BERTSCOPE_FUZZ_EXAMPLES", "10"))  # per command; more for a longer hunt
RAN_S = 3  # an example still running after this has got past its arguments: what the fuzzer looks for is earlier
SKIP = {"app"}  # starts a server (tests/cli/test_app_command.py)
VALUES = st.one_of(
    st.sampled_from(["nan", "inf", "-1", "0", "1", "2", "99", "10000000", "-0", "1e309", "0.5", "", " ", "x",
                     "all", "embeddings", "bert-base-uncased", "/nonexistent/file.csv", "[MASK]", "a [MASK] b",
                     "5:river", "0-0", "2.5", "ray", "cuda", "mps", "float16", "brown", "squad", "pos", "--json"]),
    st.text(max_size=12),
)


def _options(command: str) -> tuple[list[str], argparse.ArgumentParser]:
    from bertscope.cli import build_parser

    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    flags = [s for a in sub._actions for s in a.option_strings if s not in ("-h", "--help")]
    return flags, sub


def _commands() -> list[str]:
    from bertscope.cli import COMMANDS

    return sorted(c for c in COMMANDS if c not in SKIP)


@pytest.mark.parametrize("command", _commands())
def test_every_commands_arguments_give_a_result_or_one_line(command, tiny_mlm_dir, tmp_path, monkeypatch):
    from bertscope.cli import COMMANDS, main

    monkeypatch.chdir(tmp_path)  # anything a command writes lands here
    flags, _ = _options(command)
    model = [str(tiny_mlm_dir)] if COMMANDS[command].takes_model else []
    cases, findings = [], []

    armed = [False]

    def alarm(*_):
        if armed[0]:  # until the run is over: a repeat stands in for one swallowed by a garbage collector callback
            raise _Ran

    pytests_hook = sys.unraisablehook

    def swallowed(unraisable):  # an alarm that landed in a __del__ or a gc callback is no finding: the repeat acts
        if not isinstance(unraisable.exc_value, _Ran):  # (pytest's own hook failed the last run on one)
            pytests_hook(unraisable)

    monkeypatch.setattr(sys, "unraisablehook", swallowed)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(st.sampled_from(flags or ["--json"]), VALUES), max_size=4),
           st.lists(VALUES, max_size=2), st.booleans())
    def run(options, positional, bad_model):
        argv = [command, *(["/nonexistent-model"] if bad_model and model else model), *positional,
                *[part for flag, value in options for part in (flag, value)]]
        err = io.StringIO()
        cases.append(argv)
        previous = signal.signal(signal.SIGALRM, alarm)
        # a valid run of a long job: it ran; the fuzzer looks for what fails at once. Repeated every half second
        # after: an alarm that lands in a garbage collector's callback is swallowed there, the next one is not
        armed[0] = True
        signal.setitimer(signal.ITIMER_REAL, RAN_S, 0.5)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                try:
                    status = main(argv)
                except SystemExit as exit_:
                    status = exit_.code
        except _Ran:
            return
        except Exception as exc:  # noqa: BLE001 - a traceback is the finding
            findings.append((argv, f"{type(exc).__name__}: {exc}"))
            return
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        if status not in (0, None):
            lines = [line for line in err.getvalue().splitlines() if line.strip() and "%|" not in line]
            assert status == 2 and len(lines[-1:]) == 1 and lines[-1].startswith("bertscope"), (argv, err.getvalue())

    run()
    print(f"{command}: {len(cases)} cases, {len(findings)} findings")
    assert not findings, findings[:3]


@pytest.fixture(autouse=True)
def _offline():
    os.environ["HF_HUB_OFFLINE"] = "1"
