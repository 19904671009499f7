"""Streamlit AppTest of the Similarity & search page: the model's embedding settings stated, the pair explained
behind its button (the map, the totals, the strongest pairs, downloads), words or pieces, bad input in one line."""

from __future__ import annotations

from bertscope.app.kit.pages import page
from tests.app.kit import start, texts

PAGE = str(page("similarity.py").path)


def test_the_pair_map_behind_its_button(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir)).switch_page(PAGE).run()
    assert not at.exception and not at.error
    assert any("stated default" in i for i in texts(at.info))  # a checkpoint without sentence-transformers files
    assert any(i.startswith("Press *Explain the similarity*") for i in texts(at.info))
    at.text_area(key="sim_a").input("the dog ate the bread .")
    at.text_area(key="sim_b").input("a man is eating food .")
    at.select_slider(key="sim_steps").set_value(10)
    next(b for b in at.button if b.label == "Explain the similarity").click()
    at.run()
    assert not at.exception and not at.error
    labels = {m.label for m in at.metric}
    assert {"cosine similarity", "the references' share", "the pairs' sum", "integration error"} <= labels
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("share of the score" in s for s in specs) and any("Each token's total" in s for s in specs)
    assert list(at.dataframe[0].value.columns) == ["a", "b", "share"]


def test_an_empty_text_is_one_line(monkeypatch, tiny_bert_dir):
    at = start(monkeypatch, str(tiny_bert_dir)).switch_page(PAGE).run()
    at.text_area(key="sim_a").input("   ")
    next(b for b in at.button if b.label == "Explain the similarity").click()
    at.run()
    assert not at.exception and texts(at.error) == ["Text 1 is empty: give it some words."]


def test_the_reranker_orders_and_explains(monkeypatch):
    from tests.app.kit import start_with_url

    at = start_with_url(monkeypatch, "bundled", PAGE, sim_tab="Rerank")
    assert not at.exception and not at.error
    assert any(i.startswith("Press *Rerank*") for i in texts(at.info))
    at.text_input(key="rr_query").input("Where was Super Bowl 50 played?")
    next(b for b in at.button if b.label == "Rerank").click()
    at.run()
    assert not at.exception and not at.error
    hits = at.dataframe[0].value
    assert list(hits.columns) == ["rank", "id", "text", "relevance"] and len(hits) == 3
    assert "Levi's Stadium" in hits["text"][0]  # the passage that answers it first
    next(b for b in at.button if b.label == "Explain this passage's relevance").click()
    at.run()
    assert not at.exception and not at.error
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    assert any("share of the relevance" in s for s in specs) and any("count together" in s for s in specs)
    assert list(at.dataframe[1].value.columns) == ["query word", "passage word", "interaction"]


def test_a_reranker_without_passages_is_one_line(monkeypatch):
    from tests.app.kit import start_with_url

    at = start_with_url(monkeypatch, "bundled", PAGE, sim_tab="Rerank")
    at.text_area(key="rr_passages").input("  \n ")
    next(b for b in at.button if b.label == "Rerank").click()
    at.run()
    assert not at.exception and texts(at.error) == ["Give at least one passage (one a line): a reranker scores a "
                                                    "query against each."]


def test_terms_and_matches_read_a_masked_lm_by_terms_and_any_encoder_by_token_matches(monkeypatch, tiny_mlm_dir):
    from tests.app.kit import start_with_url

    at = start_with_url(monkeypatch, str(tiny_mlm_dir), PAGE, sim_tab="Terms & matches")
    assert not at.exception and not at.error
    assert any(i.startswith("Press *Explain the match*") for i in texts(at.info))
    at.text_input(key="terms_a").input("the dog ate")
    at.text_area(key="terms_b").input("a dog ate the bread .")
    next(b for b in at.button if b.label == "Explain the match").click()
    at.run()
    assert not at.exception and not at.error
    assert {"score (dot product of term weights)", "shared terms", "active terms (a / b)"} <= {m.label for m in at.metric}
    assert list(at.dataframe[0].value.columns) == ["term", "share", "a weight", "b weight", "from a", "from b"]
    assert any("terms it produced" in c.proto.spec for c in at.get("plotly_chart"))
    at.radio(key="terms_view").set_value("maxsim")
    next(b for b in at.button if b.label == "Explain the match").click()
    at.run()
    assert not at.exception and not at.error
    assert any("BERTScore" in c for c in texts(at.caption))  # not a ColBERT checkpoint: its token vectors, said so
    table = next(d.value for d in at.dataframe if "best passage token" in d.value.columns)
    assert list(table["query token"]) and set(table["best passage token"]) <= {"a", "dog", "ate", "the", "bread"}


def test_a_sparse_checkpoint_says_where_its_reading_is_and_empty_text_is_one_line(monkeypatch, tiny_mlm_dir,
                                                                                  tmp_path):
    from tests.app.kit import start_with_url
    from tests.retrieval.test_sparse import _splade_folder

    folder = _splade_folder(tiny_mlm_dir, tmp_path / "splade", "max", "relu")
    at = start_with_url(monkeypatch, str(folder), PAGE)
    assert not at.exception and not at.error
    assert any("is a sparse encoder" in w for w in texts(at.warning))
    at = start_with_url(monkeypatch, str(folder), PAGE, sim_tab="Terms & matches")
    at.text_area(key="terms_b").input("  ")
    next(b for b in at.button if b.label == "Explain the match").click()
    at.run()
    assert not at.exception and texts(at.error) == ["The passage is empty: type at least one word."]


def test_a_text_the_tokenizer_reads_as_nothing_is_one_line_and_nothing_is_stored(monkeypatch, tiny_bert_dir):
    """Zero-width spaces only: the tokenizer keeps [CLS] and [SEP] alone, so the map would be empty (it raised in the
    figure, after the job, and the broken result was stored). Now one line before the job."""
    at = start(monkeypatch, str(tiny_bert_dir)).switch_page(PAGE).run()
    at.text_area(key="sim_b").input("\u200b\u200b\u200b")
    next(b for b in at.button if b.label == "Explain the similarity").click()
    at.run()
    assert not at.exception and texts(at.error) == ["A text has no word the model reads (it is empty, or only spaces "
                                                    "or characters the tokenizer drops): there is nothing to explain."]
    assert not at.metric


def test_a_pair_over_the_demos_cap_is_refused_before_the_job(monkeypatch):
    """Integrated Jacobians pass every token of each text through the model at every step (steps x tokens² a text):
    two texts at bundled's 256 tokens, 10 steps, are 1,310,720 word pieces. Refused in one line, nothing charged."""
    from bertscope.app.kit.budget import cost_budget

    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    at = start(monkeypatch, "bundled").switch_page(PAGE).run()
    spent = cost_budget().spent("local")
    long = "the dog ate the bread " * 60  # 1,320 characters, cut at 256 tokens
    at.text_area(key="sim_a").input(long)
    at.text_area(key="sim_b").input(long)
    at.select_slider(key="sim_steps").set_value(10)
    next(b for b in at.button if b.label == "Explain the similarity").click()
    at.run()
    assert not at.exception and not at.metric
    (line,) = texts(at.error)
    assert line.startswith("This explanation (every token moved at every step, a pass of its text each) has "
                           "1,310,720 word pieces; this app runs up to 400,000 in one job: choose fewer steps"), line
    assert cost_budget().spent("local") == spent


def test_a_search_hit_is_explained_only_when_asked(monkeypatch, tiny_bert_dir):
    """The hit's explanation ran, and was charged, on every pick and toggle; now behind its button, with a bar."""
    from tests.app.kit import start_with_url

    at = start_with_url(monkeypatch, str(tiny_bert_dir), PAGE, sim_tab="Search a corpus")
    at.selectbox(key="search_corpus").set_value("ewt")
    at.text_input(key="search_query").input("the dog ate the bread")
    next(b for b in at.button if b.label == "Search").click()
    at.run(timeout=600)
    assert not at.exception and not at.error
    assert len(at.dataframe[0].value) == 10
    assert any(i.startswith("Press *Explain this hit*") for i in texts(at.info)) and not at.metric
    at.selectbox(key="search_pick").set_value(2).run()
    assert not at.metric  # a pick costs nothing
    next(b for b in at.button if b.label == "Explain this hit").click()
    at.run()
    assert not at.exception and not at.error
    assert "cosine similarity" in {m.label for m in at.metric}


def test_a_query_longer_than_the_reranker_reads_is_one_line(monkeypatch):
    from tests.app.kit import start_with_url

    at = start_with_url(monkeypatch, "bundled", PAGE, sim_tab="Rerank")
    at.text_input(key="rr_query").input("where " * 600)
    next(b for b in at.button if b.label == "Rerank").click()
    at.run()
    assert not at.exception and texts(at.error) == ["The query has 600 word pieces; bundled-reranker reads 512 with "
                                                    "the passage, so keep the query under 509 to leave the passage "
                                                    "room."]


def test_a_reranking_over_the_demos_cap_is_refused_before_the_job(monkeypatch):
    """200 one-letter passages under a 300-word query: each pair reads the whole query (about 60,000 word pieces)."""
    from tests.app.kit import start_with_url

    monkeypatch.setenv("BERTSCOPE_DEMO", "1")
    at = start_with_url(monkeypatch, "bundled", PAGE, sim_tab="Rerank")
    at.text_input(key="rr_query").input("where " * 300)
    at.text_area(key="rr_passages").input("a\n" * 200)
    next(b for b in at.button if b.label == "Rerank").click()
    at.run()
    assert not at.exception and not at.dataframe
    (line,) = texts(at.error)
    assert line.startswith("This reranking (each query-passage pair) has ") and line.endswith(
        "this app runs up to 30,000 in one job: use fewer or shorter passages."), line
