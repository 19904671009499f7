"""Documents to train on, split into train and held-out sets: the Brown corpus by genre, or a text
file (one sentence a line, blank lines between documents).

``brown_documents`` holds out 10% of each genre's documents (``brown.split_documents``, seeded); a
text file holds out every tenth document (the last tenth of its lines when there is only one).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from bertscope.corpora.brown import read_brown, split_documents
from bertscope.errors import BertScopeError

Documents = list[list[str]]


def brown_documents(genres: str | None, seed: int) -> tuple[Documents, Documents]:
    corpus = read_brown(genres=[g.strip() for g in genres.split(",")] if genres else None)
    train_ids, held_ids = split_documents([d.id for d in corpus.documents], seed=seed)
    by_id = {d.id: [s.text for s in d.sentences] for d in corpus.documents}
    return [by_id[d] for d in train_ids], [by_id[d] for d in held_ids]


def file_documents(path: str, seed: int) -> tuple[Documents, Documents]:
    file = Path(path)
    if not file.is_file():
        raise BertScopeError(f"No corpus file at {path}.")
    try:
        text = file.read_text("utf-8")
    except UnicodeDecodeError as err:
        raise BertScopeError(f"{path} is not UTF-8 text.") from err
    documents = [[line.strip() for line in block.splitlines() if line.strip()] for block in text.split("\n\n")]
    documents = [d for d in documents if d]
    if not documents:
        raise BertScopeError(f"{path} has no text.")
    if len(documents) == 1:
        lines = documents[0]
        cut = max(1, len(lines) - max(1, len(lines) // 10))
        if cut >= len(lines):
            raise BertScopeError(f"{path} needs at least two lines: one to train on, one to hold out.")
        return [lines[:cut]], [lines[cut:]]
    rank = lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()  # noqa: E731
    held = set(sorted(range(len(documents)), key=rank)[:max(1, len(documents) // 10)])
    return ([d for i, d in enumerate(documents) if i not in held], [d for i, d in enumerate(documents) if i in held])
