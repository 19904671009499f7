"""A hosted demo's caps: which models, how much text, how many costly jobs per visitor. Read at use,
so tests can switch demo mode on and off."""

from __future__ import annotations

import os

from bertscope.errors import BertScopeError

TRUTHY = {"1", "true", "yes", "on"}
DEMO_JOB_PIECES = 30_000  # word pieces one job of a hosted demo runs over
DEMO_EXPLANATION_PIECES = 400_000  # word pieces one explanation of a hosted demo passes through the model


DEFAULT_ALLOWLIST = ("bert-base-uncased,bert-base-multilingual-cased,distilbert-base-uncased,roberta-base,"
                     "bundled,bundled-multilingual,bundled-mlm,bundled-reranker")  # the last: the Rerank tab's


def demo() -> bool:
    """Hosted demo mode (BERTSCOPE_DEMO=1): allowlisted models only, no local paths, small inputs."""
    return os.environ.get("BERTSCOPE_DEMO", "").strip().lower() in TRUTHY


def demo_allowlist() -> tuple[str, ...]:
    names = os.environ.get("BERTSCOPE_ALLOWLIST", DEFAULT_ALLOWLIST)
    return tuple(m.strip() for m in names.split(",") if m.strip()) or ("bundled",)


class _Limits:
    """Input caps: generous locally, tight on a hosted demo (read at use, so tests can switch)."""

    @property
    def input_chars(self) -> int:
        return 2_000 if demo() else 100_000

    @property
    def name_chars(self) -> int:  # a word, a candidate token, a hub id or a folder
        return 300

    @property
    def corpus_chars(self) -> int:  # a box of sentences, one a line
        return self.corpus_lines * 400

    @property
    def corpus_lines(self) -> int:
        return 500 if demo() else 5_000

    @property
    def upload_bytes(self) -> int:
        return self.upload_mb * 1_000_000

    @property
    def upload_mb(self) -> int:  # what every uploader says and enforces (max_upload_size)
        return 1 if demo() else 20

    @property
    def bertviz_bytes(self) -> int:  # one bertviz page (it holds every weight as JSON text)
        return int(float(os.environ.get("BERTSCOPE_BERTVIZ_MB", "3" if demo() else "8")) * 2**20)

    @property
    def expensive_per_10_min(self) -> int:  # costly jobs per visitor (views.kit.budget)
        return 5 if demo() else 10_000

    @property
    def job_pieces(self) -> int:  # word pieces one job runs over (a task, a corpus slice, an upload, all its texts)
        return DEMO_JOB_PIECES if demo() else 50_000_000

    @property
    def explanation_pieces(self) -> int:  # word pieces one explanation passes through the model (a pass a token and
        # step, each of the whole text): a search's hit explained first-order at the embedding model's length
        # (2 x 256² = 131,072 on bundled) fits, as embedding the search's 2,067 SQuAD passages (~330,000) does
        return DEMO_EXPLANATION_PIECES if demo() else 50_000_000

    @property
    def job_texts(self) -> int:  # texts one job embeds (a parallel file: rows x languages; the shipped words: 1,881)
        return 2_000 if demo() else 200_000

    @property
    def disk_bytes(self) -> int | None:  # what a hosted demo keeps on disk for its visitors, in all (None: no quota)
        raw = os.environ.get("BERTSCOPE_DISK_MB", "").strip()
        try:
            megabytes = float(raw) if raw else (2048.0 if demo() else None)
        except ValueError:
            megabytes = 2048.0 if demo() else None
        return None if megabytes is None else int(max(64.0, megabytes) * 2**20)


Limits = _Limits()


def check_text(text: str, what: str = "text") -> None:
    """The page's cap on one input (tighter on a hosted demo)."""
    if text and len(text) > Limits.input_chars:
        raise BertScopeError(f"The {what} has {len(text):,} characters; this app takes up to "
                             f"{Limits.input_chars:,}.")


def check_upload(uploaded) -> None:
    if uploaded is not None and uploaded.size > Limits.upload_bytes:
        raise BertScopeError(f"The upload has {uploaded.size:,} bytes; this app takes up to "
                             f"{Limits.upload_bytes:,}.")


def check_pieces(pieces: int, what: str, fix: str = "use fewer or shorter sentences", cap: int | None = None) -> None:
    """The cap on what one job runs over, in word pieces (a cap in lines lets 500 lines of 499 words through);
    ``fix``: what to lower; ``cap``: another cap than ``Limits.job_pieces`` (``Limits.explanation_pieces``)."""
    cap = Limits.job_pieces if cap is None else cap
    if pieces > cap:
        raise BertScopeError(f"{what[0].upper()}{what[1:]} has {pieces:,} word pieces; this app runs up to "
                             f"{cap:,} in one job: {fix}.")


def check_texts(rows: int, languages: int) -> None:
    """The cap on the texts one job embeds and holds: rows x languages (a cap on rows alone let 990 language
    columns through: 494,010 texts)."""
    texts = rows * languages
    if texts > Limits.job_texts:
        raise BertScopeError(f"{rows:,} rows × {languages} languages = {texts:,} texts; this app embeds up to "
                             f"{Limits.job_texts:,} in one job: choose fewer languages or rows.")
