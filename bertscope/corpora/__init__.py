"""Text and labels, no model: everything BertScope reads from ``bertscope/data/`` or a user's file.

``brown`` (the Brown corpus: install, read, tags, split by document), ``probe_tasks``
(``ProbeTask`` and the CoNLL-U/CSV/JSONL readers), ``brown_tasks`` (probe suites on Brown),
``suites`` (the catalogue of probe suites), ``senses`` (word-in-context sentences), ``sentences``
(one sentence a line), ``parallel`` (translations), ``documents`` (training documents).
May import: ``errors``, ``runtime``.
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "data"  # the shipped data files
