"""A user's file read as records, one way everywhere: CSV (or TSV) rows and JSON Lines objects, where anything a
reader trips on (a field over the csv module's limit, a quote left open, JSON nested past Python's recursion limit,
a line that is not an object) is one line naming the file and the line, never a traceback."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

from bertscope.errors import BertScopeError


def source_text(source: str | Path | bytes, name: str, missing: str) -> tuple[str, str]:
    """(the text, the file's name) of a path or of a file's bytes (``name``: an upload's name), UTF-8 with or
    without its byte-order mark; ``missing``: the one line said when a path names no file (``{path}`` in it is
    filled in)."""
    if isinstance(source, bytes):
        data, name = source, name or "upload"
    else:
        path = Path(source)
        if not path.is_file():
            raise BertScopeError(missing.format(path=path))
        data, name = path.read_bytes(), path.name
    try:
        return data.decode("utf-8-sig"), name
    except UnicodeDecodeError as err:
        raise BertScopeError(f"{name} is not UTF-8 (byte {err.start}): save it as UTF-8.") from None


def csv_records(text: str, name: str, delimiter: str = ",") -> tuple[list[str], Iterator[tuple[int, dict]]]:
    """(the header's field names, (line number, row) for each row). The rows are read as the caller iterates;
    a malformed row stops the iteration with one line."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")), delimiter=delimiter)
    try:
        fields = list(reader.fieldnames or [])
    except csv.Error as err:
        raise BertScopeError(f"{name}, line 1: not a CSV header this reader can use ({err}).") from None

    def rows() -> Iterator[tuple[int, dict]]:
        while True:
            line = reader.line_num + 1  # where the next row begins
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                raise BertScopeError(f"{name}, line {line}: not CSV this reader can use ({err}).") from None
            yield line, row

    return fields, rows()


def json_records(text: str, name: str) -> list[dict]:
    """The JSON objects of a JSON Lines text, one a line (blank lines skipped), or one line naming the first
    that is not one."""
    return [row for _, row in numbered_json_records(text, name)]


def numbered_json_records(text: str, name: str) -> list[tuple[int, dict]]:
    """``json_records`` with each object's line number."""
    rows = []
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BertScopeError(f"{name}, line {number}: not valid JSON ({err.msg}).") from None
        except RecursionError:
            raise BertScopeError(f"{name}, line {number}: JSON nested too deeply to read.") from None
        if not isinstance(row, dict):
            raise BertScopeError(f"{name}, line {number}: not a JSON object.")
        rows.append((number, row))
    return rows
