"""``python -m bertscope``: the library from a shell, every command one record, one error style.

    python -m bertscope info bundled --json
    python -m bertscope inspect bundled "The bank of the river." --json
    python -m bertscope pretrain bundled --out runs/mine --epochs 1
    python -m bertscope corpus install          # the Brown corpus, once

Bad input prints one line, ``bertscope: error: <what to do>``, on stderr and exits with 2. Each
command's module imports what it needs when it runs, so ``--help`` and a typo answer at once.
Nothing imports it but ``__main__`` and the home page (which lists ``COMMANDS``). May import:
``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``analysis``, ``attribution``,
``training``, ``interventions``, ``tasks``, ``features``, ``figures``, ``engines``, ``circuits``, ``graphs``, ``retrieval``,
``causal``, ``lenses``.
"""

from __future__ import annotations

import argparse
import json
import sys

from bertscope.cli import (
    app,
    attribution,
    causal,
    circuits,
    compare,
    corpus,
    crosscoder,
    erasure,
    features,
    inspection,
    interventions,
    lenses,
    mlm,
    probe,
    retrieval,
    sae,
    setup,
    syntax,
    tasks,
    training,
    transcoder_refit,
    transcoders,
)
from bertscope.cli.common import EXIT_BAD_INPUT, Command, OneLineParser, model_arguments, one_line
from bertscope.errors import BertScopeError

COMMANDS: dict[str, Command] = {
    c.name: c for module in (app, inspection, mlm, tasks, corpus, probe, syntax, attribution, causal, lenses, compare, interventions, erasure, circuits,
                             retrieval, training,
                             sae, transcoders, transcoder_refit, crosscoder, features, setup) for c in module.COMMANDS
}


def build_parser(only: str | None = "*") -> argparse.ArgumentParser:
    """The parser; ``only``: whose arguments to build ("*" every command's, a name that one's, None none:
    the command list alone, which imports nothing heavy)."""
    from bertscope import __version__

    parser = OneLineParser(prog="bertscope", description="Look inside BERT-family encoders. "
                           "`bertscope app` starts the app; every other command runs headless.")
    parser.add_argument("--version", action="version", version=f"bertscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for command in COMMANDS.values():
        # argparse %-formats help strings (not descriptions): a literal % must be doubled there
        p = sub.add_parser(command.name, help=command.help.replace("%", "%%"), description=command.help)
        if only != "*" and only != command.name:
            continue
        if command.takes_model:
            model_arguments(p)
        if command.arguments:
            command.arguments(p)
    return parser


def nearest_command(name: str) -> str:
    """One line for a command that does not exist, naming the nearest that does."""
    import difflib

    close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}?" if close else "`bertscope --help` lists them."
    return f"bertscope: error: no command {name!r}: {hint}"


def main(argv: list[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if not given:  # no command: the help, and the status of a usage error
        build_parser(None).print_help(sys.stderr)
        return EXIT_BAD_INPUT
    first = next((a for a in given if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS:
        print(one_line(nearest_command(first)), file=sys.stderr)
        return EXIT_BAD_INPUT
    args = build_parser(first).parse_args(given)
    args.argv = given  # as given: a command may start itself again
    try:
        result = COMMANDS[args.command].run(args)
    except BertScopeError as err:
        print(one_line(f"bertscope: error: {err}"), file=sys.stderr)
        return getattr(err, "status", EXIT_BAD_INPUT)  # 2 for bad input; a failed launch says its own
    if result is None:  # printed already (another process did)
        return 0
    as_json = getattr(args, "json", False) or isinstance(result, dict) and not COMMANDS[args.command].takes_model
    try:
        print(json.dumps(result, ensure_ascii=False) if as_json else result)
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader left, which is not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def entry() -> None:
    """The ``bertscope`` console script."""
    sys.exit(main())
