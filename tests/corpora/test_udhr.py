"""The UDHR reader: versions, articles by number, the script of each version; the parallel table with
English first and only complete versions; bad codes in one line."""

import pytest

from bertscope.corpora.udhr import (
    ARTICLES,
    Declaration,
    installed,
    read_declaration,
    read_udhr,
    script_of,
    udhr_parallel,
)
from bertscope.errors import BertScopeError


def write(folder, code, lang, name, articles, body=lambda n: f"Text of article {n}."):
    parts = [f'<article data-number="{n}"><h2>Article {n}</h2><p>{body(n)}</p><p>Second &amp; last.</p></article>'
             for n in articles]
    (folder / "declaration").mkdir(parents=True, exist_ok=True)
    (folder / "declaration" / f"{code}.html").write_text(
        f'<!doctype html><html data-code="{code}" data-iso6393="{lang}" dir="ltr" lang="{lang}"><head><title>{name}'
        f'</title></head><body><h1>Declaration</h1>{"".join(parts)}</body></html>', encoding="utf-8")


def test_read_a_version_and_the_parallel_table(tmp_path):
    write(tmp_path, "eng", "en", "English", range(1, ARTICLES + 1))
    write(tmp_path, "rus", "ru", "Russian", range(1, ARTICLES + 1), lambda n: f"Статья номер {n}.")
    write(tmp_path, "abc", "abc", "Incomplete", range(1, ARTICLES))  # 29 articles: left out
    one = read_declaration(tmp_path / "declaration" / "rus.html")
    assert isinstance(one, Declaration) and one.name == "Russian" and one.script == "Cyrillic"
    assert one.articles[3] == "Статья номер 3. Second & last."  # paragraphs joined, heading left out
    assert len(read_udhr(tmp_path)) == 3 and installed(tmp_path)
    data = udhr_parallel(folder=tmp_path)
    assert data.languages == ("eng", "rus") and data.n_items == ARTICLES
    assert data.texts("eng")[0].startswith("Text of article 1.")
    assert udhr_parallel(["rus"], folder=tmp_path).languages == ("eng", "rus")  # English always first
    with pytest.raises(BertScopeError, match="No complete UDHR version 'abc'"):
        udhr_parallel(["abc"], folder=tmp_path)
    with pytest.raises(BertScopeError, match="corpus install udhr"):
        read_udhr(tmp_path / "nowhere")


def test_scripts():
    assert script_of("Все люди рождаются свободными") == "Cyrillic"
    assert script_of("人人生而自由") == "Han" and script_of("すべての人間は") == "Kana"
    assert script_of("123 !") == "Unknown"
