"""The text mixture: equal shares of every installed corpus, interleaved, its held-out side apart."""

from __future__ import annotations

import pytest

from bertscope import BertScopeError
from bertscope.corpora.mixture import SOURCES, mixed_texts


def test_equal_shares_interleaved_and_the_held_out_side_apart():
    train = mixed_texts(60)
    assert train.counts() == {s: 60 for s in SOURCES} and not train.missing  # make test installs every corpus
    assert list(train.sources[:5]) == list(SOURCES)  # source by source, text by text
    assert all(t.strip() for t in train.texts)
    held = mixed_texts(30, held_out=True)
    assert held.counts() == {s: 30 for s in SOURCES}
    assert len(set(train.texts) & set(held.texts)) <= 1  # the sides are split; a text may recur inside a corpus
    assert mixed_texts(60).texts == train.texts  # seeded
    assert mixed_texts(5, sources=("tweets",)).counts() == {"tweets": 5}


@pytest.mark.parametrize("kwargs, message", [({"per_source": 0}, "at least one"),
                                              ({"per_source": 3, "sources": ("wiki",)}, "Unknown text source")])
def test_bad_requests_are_one_line(kwargs, message):
    with pytest.raises(BertScopeError, match=message):
        mixed_texts(**kwargs)
