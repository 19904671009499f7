"""Tagged sentences for the feature statistics: Brown's two sides share no document, every word has a
span and a tag in each tagset; EWT's relations are the universal ones; tags read in words."""

import pytest

from bertscope.corpora.brown import read_brown
from bertscope.corpora.tagged import brown_tagged, describe_tag, ewt_tagged, tagged_corpus
from bertscope.errors import BertScopeError

CONLLU = """# sent_id = a
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tbarked\tbark\tVERB\tVBD\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = b
1\tMy\tmy\tPRON\tPRP$\t_\t2\tnmod:poss\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t0\troot\t_\t_

"""


def test_brown_sides_share_no_document_and_every_word_is_tagged():
    train, held = brown_tagged(300, side="train"), brown_tagged(100, side="held-out")
    assert train.name == "brown-train-300" and held.name == "brown-held-out-100"
    docs = lambda c: {s.split()[0] for s in c.sources}  # noqa: E731
    assert not docs(train) & docs(held)
    for corpus in (train, held):
        for text, spans, universal, fine in zip(corpus.texts, corpus.spans, corpus.tags["universal"],
                                                corpus.tags["brown"]):
            assert len(spans) == len(universal) == len(fine)
            assert all(0 <= a < b <= len(text) for a, b in spans)
    assert "PUNCT" in {t for s in train.tags["universal"] for t in s}  # "." shown as UD names it
    assert len(read_brown().documents) == 500


def test_ewt_relations_are_universal(tmp_path):
    (tmp_path / "en_ewt-ud-train.conllu").write_text(CONLLU)
    corpus = ewt_tagged(0, folder=tmp_path)
    assert corpus.texts == ("The dog barked.", "My cat")
    assert corpus.tags["upos"][0] == ("DET", "NOUN", "VERB", "PUNCT")
    assert corpus.tags["deprel"][1] == ("nmod", "root")  # nmod:poss -> nmod


def test_tags_read_in_words_and_bad_names():
    assert describe_tag("brown", "vbd") == "vbd (past-tense verb)"
    assert describe_tag("brown", "ppss+md").startswith("ppss+md (other subject pronoun")
    assert describe_tag("universal", "NOUN") == "NOUN"
    with pytest.raises(BertScopeError, match="choose brown or ewt"):
        tagged_corpus("conll", 10)
