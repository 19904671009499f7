"""What every command shares: the model arguments, loading the model they name, reading a file."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertscope.errors import BertScopeError

EXIT_BAD_INPUT = 2


@dataclass(frozen=True)
class Command:
    """One subcommand: its help line, what it does, its own arguments."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], Any]  # -> text, or a JSON-ready object with --json
    arguments: Callable[[argparse.ArgumentParser], Any] | None = None
    takes_model: bool = True  # MODEL, --device, --dtype, --json


def one_line(text: str) -> str:
    """A message as one line: control characters a user typed (a carriage return, a newline) shown escaped."""
    return re.sub(r"[\x00-\x1f\x7f\u2028\u2029\x85]", lambda m: repr(m.group())[1:-1], text)


class OneLineParser(argparse.ArgumentParser):
    """argparse with its usage errors in one line, as every other bad input (the usage itself is on ``--help``)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, one_line(f"{self.prog}: error: {message} (`{self.prog} --help` lists the options).")
                  + "\n")


def whole_number(least: int, said: str) -> Callable[[str], int]:
    """An option's type: a whole number from ``least``, else argparse's one line ending in ``said``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{text!r}: {said}")
        return value

    return parse


seed_int = whole_number(0, "a seed is a whole number from 0")  # numpy's generators refuse a negative seed, late
positive_int = whole_number(1, "give a whole number from 1")  # a count: 0 or below read as "all" or cut from the end


def finite_float(text: str) -> float:
    """A number option's value: finite (``nan`` and ``inf`` pass ``<= 0`` checks, so they are refused here)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def probability(text: str) -> float:
    """A level or share strictly between 0 and 1 (a test's alpha)."""
    value = finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number between 0 and 1")
    return value


def read_text(path: str, what: str) -> str:
    """A UTF-8 text file's contents, or one clear error."""
    file = Path(path)
    if not file.is_file():
        raise BertScopeError(f"No {what} file at {path}.")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise BertScopeError(f"{path} is not UTF-8 text.") from err


def load(args: argparse.Namespace):
    from bertscope.core.models import load_model

    return load_model(args.model, device=args.device, dtype=args.dtype)


def model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="preset name, hub id, local folder, or 'bundled'")
    p.add_argument("--device", default="auto", help="auto (cuda > mps > cpu), cpu, cuda, mps")
    p.add_argument("--dtype", default="auto", help="auto (float32), float16 or bfloat16 on a GPU")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


@contextmanager
def progress_bar(what: str, unit: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` drawing a bar on stderr (stdout stays the result)."""
    with staged_bars() as staged:
        yield lambda done, total: staged(done, total, f"{what}, {unit}")


@contextmanager
def staged_bars() -> Iterator[Callable[[int, int, str], None]]:
    """A ``progress(done, total, stage)`` drawing one bar a stage on stderr, each closed when the next begins;
    ``stage`` reads "what, unit" as the app's bars take it ("Held-out activations of bundled, sentences")."""
    from tqdm import tqdm

    bar: list = []

    def progress(done: int, total: int, stage: str) -> None:
        what, _, unit = stage.rpartition(", ")
        if not bar or bar[0].desc != (what or stage):
            if bar:
                bar.pop().close()
            bar.append(tqdm(total=total, desc=what or stage, unit=unit or "step", file=sys.stderr, dynamic_ncols=True,
                            leave=False))
        bar[0].update(done - bar[0].n)

    try:
        yield progress
    finally:
        if bar:
            bar[0].close()


def engine_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", default="local",
                   help="where the passes run: local (this process), ray (a Ray cluster started on this machine) or "
                        "ray:ADDRESS (a running cluster: auto, or HOST:PORT); needs requirements-cluster.txt")


def engine_of(args: argparse.Namespace):
    """``--engine`` parsed (a bad one refused in one line before any model loads): None for local."""
    from bertscope.engines.ray_engine import parse_engine

    return parse_engine(getattr(args, "engine", "local"))
