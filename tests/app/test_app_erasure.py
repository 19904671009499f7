"""Streamlit AppTest of the Probes page's tab "Does the model use it?": nothing costly on arrival, a run
through the budget, the table and chart against the control, the details of one layer, the JSON, and
bad input as one line."""

from __future__ import annotations

from tests.app.kit import start_with_url, texts

TAB = "Does the model use it?"


def submit(at) -> None:
    next(b for b in at.button if "erase_form" in b.id).click()
    at.run(timeout=600)


def test_erasure_tab(monkeypatch, tiny_mlm_dir, tmp_path):
    from bertscope.runtime.user_cache import user_cache_dir

    corpora = (user_cache_dir() / "corpora").resolve()  # the installed treebank, read through a link
    monkeypatch.setenv("BERTSCOPE_CACHE", str(tmp_path))
    (tmp_path / "corpora").symlink_to(corpora)
    at = start_with_url(monkeypatch, str(tiny_mlm_dir), "bertscope/app/probes.py", probe_tab=TAB)
    assert not at.exception and not at.error
    assert any("Press *Erase and measure*" in i for i in texts(at.info))  # nothing costly on arrival
    assert at.multiselect(key="erase_layers").value == ["0"]  # one layer, the middle one: the cheapest useful run
    at.select_slider(key="erase_size").set_value(200)
    at.select_slider(key="erase_test").set_value(100)
    submit(at)
    assert not at.exception and not at.error
    table = next(d.value for d in at.dataframe if "layer erased" in d.value.columns)
    assert set(table["layer erased"]) == {"0"}
    assert list(table["behaviour"]) == ["probe at the erased layer", "probe at the last layer", "masked LM top-1",
                                        "UUAS at the last layer"]
    probe = table.set_index("behaviour").loc["probe at the erased layer"]
    majority = float(next(c for c in texts(at.caption) if "majority label scores" in c).split("scores ")[1][:5])
    assert probe["concept erased"] <= majority + 0.02 and probe["random, same rank"] > probe["concept erased"]
    chart = next(c.proto.spec for c in at.get("plotly_chart") if "change from before" in c.proto.spec)
    assert "random directions, same rank" in chart
    later = next(d.value for d in at.dataframe if "UUAS erased" in d.value.columns)
    assert list(later["layer"]) == ["1"]
    assert any(d.value.columns[0] == "label" and "positions" in d.value.columns for d in at.dataframe)
    assert any("Not measured: task accuracy" in c for c in texts(at.caption))
    download = next(b for b in at.get("download_button") if "erase_json" in b.proto.id)
    assert download.proto.label == "Download (JSON)"
    # bad input: no layer, and an upload missing, each one line, nothing lost
    at.multiselect(key="erase_layers").set_value([])
    submit(at)
    assert not at.exception and texts(at.warning) == ["Choose at least one layer to erase."]
    assert any("layer erased" in d.value.columns for d in at.dataframe)  # the last result stays below
    at.multiselect(key="erase_layers").set_value(["0"])
    at.selectbox(key="erase_concept").set_value("Your own file…")
    submit(at)
    assert not at.exception and any("Upload a .conllu" in w for w in texts(at.warning))
    assert any("layer erased" in d.value.columns for d in at.dataframe)
    # a file in another encoding: one line, and the last result still below it
    at.file_uploader(key="erase_upload").upload("tags.csv", 'tokens,tags\n"caf\xe9 b","X Y"\n'.encode("latin-1"))
    submit(at)
    assert not at.exception and not at.error
    assert any("not UTF-8" in w for w in texts(at.warning))
    assert any("layer erased" in d.value.columns for d in at.dataframe)
