"""The Ray engine on a local Ray cluster the tests start (``ray.init(num_cpus=2)``, no outside
address): head statistics and head importance equal to the single-process path's, hidden-state
cache entries whose arrays are the same bytes, the same probe accuracies, the same faithfulness
scoreboard and CKA matrix, the same commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from bertscope.analysis.attention_stats import head_stats
from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
from bertscope.analysis.probing import probe_layers
from bertscope.cli import main
from bertscope.core.models import load_model
from bertscope.corpora.sentences import shipped_corpus
from bertscope.corpora.suites import shipped_task
from bertscope.engines.ray_engine import RayEngine, parse_engine
from bertscope.errors import BertScopeError
from tests.conftest import ROOT

pytestmark = pytest.mark.cluster  # starts a local Ray cluster

ray = pytest.importorskip("ray", reason="requirements-cluster.txt (installed by `make test`)")


@pytest.fixture(scope="module")
def cluster():
    # CPU actors only, on a GPU machine too: the comparisons are with this process's CPU passes
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def bundled():
    return load_model("bundled", device="cpu")


def test_head_statistics_through_ray_equal_the_single_process_ones(cluster, bundled):
    sentences = shipped_corpus()
    local = head_stats(bundled, sentences)
    seen: list[tuple[int, int]] = []
    spread = head_stats(bundled, sentences, progress=lambda d, t: seen.append((d, t)), engine=RayEngine())
    assert (spread.sentences, spread.tokens) == (local.sentences, local.tokens)
    for name in local.stats:
        np.testing.assert_allclose(spread.stats[name], local.stats[name], rtol=0, atol=1e-6)
    assert seen[-1] == (len(sentences), len(sentences))  # progress as the actors' results arrive


@pytest.mark.parametrize("task_name, pooling", [("pos", "first"),  # a second pooling: a second look (10 s)
                                               pytest.param("tense", "cls", marks=pytest.mark.extended)])
def test_the_cache_written_through_ray_is_the_local_one_byte_for_byte(cluster, bundled, tmp_path, task_name,
                                                                       pooling):
    task = shipped_task(task_name)
    local = hidden_states(bundled, task, pooling, HiddenStateCache(tmp_path / "local"))
    spread = hidden_states(bundled, task, pooling, HiddenStateCache(tmp_path / "ray"), engine=RayEngine())
    assert not spread.hit and spread.folder.name == local.folder.name  # the same key
    assert (spread.labels, spread.types, spread.groups.tolist()) == (local.labels, local.types, local.groups.tolist())
    for layer in local.layers:
        a, b = np.load(local.folder / f"layer_{layer:02d}.npy"), np.load(spread.folder / f"layer_{layer:02d}.npy")
        assert a.shape == b.shape and a.tobytes() == b.tobytes()
    # the probes read them alike
    ours = probe_layers(local, task.name, pooling, "logreg", 0)
    theirs = probe_layers(spread, task.name, pooling, "logreg", 0)
    assert [r.accuracy for r in theirs.layers] == [r.accuracy for r in ours.layers]
    assert [r.control_accuracy for r in theirs.layers] == [r.control_accuracy for r in ours.layers]
    # and the single-process path reads what the cluster wrote
    assert hidden_states(bundled, task, pooling, HiddenStateCache(tmp_path / "ray")).hit


def test_commands_take_the_ray_engine(cluster, tmp_path, capsys):
    assert main(["head-stats", "bundled", "--device", "cpu", "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(["head-stats", "bundled", "--device", "cpu", "--json", "--engine", "ray"]) == 0
    spread = json.loads(capsys.readouterr().out)
    assert spread["sentences"] == local["sentences"] and spread["tokens"] == local["tokens"]
    for name, values in local["stats"].items():
        np.testing.assert_allclose(spread["stats"][name], values, atol=1e-6)
    cache = str(tmp_path / "cache")
    assert main(["probe", "bundled", "--task", "negation", "--device", "cpu", "--cache", cache, "--engine", "ray"]) == 0
    built = capsys.readouterr().out
    assert main(["probe", "bundled", "--task", "negation", "--device", "cpu", "--cache", cache]) == 0
    read = capsys.readouterr().out
    assert "cache built" in built and "cache hit" in read
    assert built.splitlines()[2:] == read.splitlines()[2:]  # the same accuracies, layer by layer


def test_head_importance_through_ray_equals_the_single_process_one(cluster):
    from bertscope.interventions.importance import head_importance

    lm = load_model("bundled-mlm", device="cpu")
    texts = shipped_corpus()[:48]
    local = head_importance(lm, texts, batch_size=8, seed=3)
    spread = head_importance(lm, texts, batch_size=8, seed=3, engine=RayEngine())
    assert (spread.sentences, spread.positions) == (local.sentences, local.positions)  # the same masked positions
    assert spread.loss == pytest.approx(local.loss, rel=1e-6)
    np.testing.assert_allclose(spread.raw, local.raw, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(spread.importance, local.importance, rtol=1e-5, atol=1e-7)
    assert (spread.order() == local.order()).all()


def test_faithfulness_through_ray_equals_the_single_process_scoreboard(cluster, tiny_mlm_dir):
    from bertscope.attribution.faithfulness import faithfulness
    from bertscope.attribution.items import text_items
    from bertscope.attribution.registry import faithfulness_defaults

    # one of each kind (a gradient, a path integral, a perturbation with its own draws, the floor): a worker runs
    # every method through the same call, and the 14 defaults cost 70 s here for no other path
    DEFAULT_METHODS = [m for m in ("grad", "ig", "occlusion", "lime", "random") if m in faithfulness_defaults()]
    assert len(DEFAULT_METHODS) == 5

    lm = load_model(str(tiny_mlm_dir), device="cpu")
    lexicon = {"bank": "NOUN", "river": "NOUN", "muddy": "ADJ", "money": "NOUN", "deposited": "VERB", "dog": "NOUN",
               "sat": "VERB", "boat": "NOUN", "water": "NOUN", "horse": "NOUN", "riding": "VERB"}
    lines = ["the bank of the river was muddy .", "she deposited the money in the bank .",
             "a man is eating food and a woman is riding a horse .", "the dog sat in the boat on the water ."]
    items, _ = text_items(lm, lines, seed=2, lexicon=lexicon)
    local = faithfulness(lm, items, DEFAULT_METHODS, steps=8, seed=5)
    seen: list[tuple[int, int]] = []
    spread = faithfulness(lm, items, DEFAULT_METHODS, steps=8, seed=5, progress=lambda d, t: seen.append((d, t)),
                          engine=RayEngine())
    assert seen[-1] == (len(items), len(items))
    assert [r.item for r in spread.results] == items  # in the items' order, each with its own item
    for ours, theirs in zip(local.results, spread.results):
        assert theirs.p_full == pytest.approx(ours.p_full, abs=1e-6)
        np.testing.assert_allclose(theirs.loo_drop, ours.loo_drop, atol=1e-6)
        for method in DEFAULT_METHODS:
            np.testing.assert_allclose(theirs.scores[method], ours.scores[method], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(theirs.p_without[method], ours.p_without[method], atol=1e-6)
            np.testing.assert_allclose(theirs.p_only[method], ours.p_only[method], atol=1e-6)
            assert set(theirs.seconds) == set(DEFAULT_METHODS)
    for method, entry in local.summary().items():
        for metric in ("comprehensiveness", "sufficiency", "loo_spearman"):
            assert spread.summary()[method][metric]["mean"] == pytest.approx(entry[metric]["mean"], abs=1e-5)


def test_cka_through_ray_equals_the_single_process_matrix(cluster, tiny_mlm_dir, tiny_roberta_dir):
    from bertscope.analysis.compare import chunks, compare_layers, text_task

    a, b = load_model(str(tiny_mlm_dir), device="cpu"), load_model(str(tiny_roberta_dir), device="cpu")
    task = text_task(shipped_corpus()[:120])
    budget = 40_000  # bytes of word vectors a chunk: several chunks, each leaving words over
    per_word = 4 * max((a.num_layers + 1) * a.hidden_size, (b.num_layers + 1) * b.hidden_size)
    assert len(chunks(task, per_word, budget)) >= 4
    local = compare_layers(a, b, task, minibatch=16, seed=7, max_chunk_bytes=budget)
    seen: list[tuple[int, int]] = []
    spread = compare_layers(a, b, task, minibatch=16, seed=7, max_chunk_bytes=budget,
                            progress=lambda d, t: seen.append((d, t)), engine=RayEngine())
    assert (spread.n_words, spread.minibatches) == (local.n_words, local.minibatches)
    np.testing.assert_allclose(spread.cka, local.cka, rtol=0, atol=1e-6)
    assert seen[-1] == (len(task.words), len(task.words))


@pytest.mark.extended  # the same numbers as the two tests above, through the commands (15 s); the engine's flag
# itself is test_commands_take_the_ray_engine's
def test_faithfulness_and_compare_commands_take_the_ray_engine(cluster, tiny_mlm_dir, tiny_bert_dir, tmp_path,
                                                              capsys):
    data = tmp_path / "lines.txt"
    data.write_text("the bank of the [MASK] was muddy .\nshe deposited the [MASK] in the bank .\n", encoding="utf-8")
    command = ["faithfulness", str(tiny_mlm_dir), "--data", str(data), "--methods", "rollout,grad,random", "--steps",
               "4", "--device", "cpu", "--json"]
    assert main(command) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*command, "--engine", "ray"]) == 0
    spread = json.loads(capsys.readouterr().out)
    for method, entry in local["methods"].items():
        assert spread["methods"][method]["comprehensiveness"]["mean"] == pytest.approx(
            entry["comprehensiveness"]["mean"], abs=1e-6)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(shipped_corpus()), encoding="utf-8")  # 2,133 words: 8 minibatches of 256
    command = ["compare", str(tiny_mlm_dir), str(tiny_bert_dir), "--data", str(sentences), "--head-sentences", "0",
               "--device", "cpu", "--json"]
    assert main(command) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([*command, "--engine", "ray"]) == 0
    spread = json.loads(capsys.readouterr().out)
    assert spread["n_words"] == local["n_words"]
    np.testing.assert_allclose(spread["cka"], local["cka"], atol=2e-6)  # JSON keeps 6 decimals


def test_sentence_embeddings_through_ray_are_the_same_bytes(cluster, tmp_path, capsys, monkeypatch):
    """A corpus embedded through the actors (the batches planned here, longest first, bounded by bytes): the same
    vectors, byte for byte, as this process's, with e5's passage prompt; the search command takes the engine."""
    from bertscope.retrieval import embedding
    from bertscope.retrieval.embedding import embed, embedding_plan, prepared, settings_of

    monkeypatch.setattr(embedding, "BATCH_BYTES", 4 * 2**20)  # the byte bound cuts the long batches short
    lm = load_model("bundled-multilingual", device="cpu")  # a prompt a kind ("passage: "), mean pooling, normalised
    texts = [" ".join([s] * (1 + i % 7)) for i, s in enumerate(shipped_corpus()[:90])]  # 1x-7x a sentence
    plan, lengths = embedding_plan(lm, prepared(lm, texts, "passage", settings_of(lm)), settings_of(lm), 16)
    sizes = {len(b) for b in plan}
    assert len(plan) >= 7 and 16 in sizes and min(sizes) < 16 and max(lengths) > 100
    local = embed(lm, texts, "passage", batch_size=16)
    seen: list[tuple[int, int]] = []
    spread = embed(lm, texts, "passage", batch_size=16, progress=lambda d, t: seen.append((d, t)), engine=RayEngine())
    assert spread.vectors.tobytes() == local.vectors.tobytes()
    assert spread.truncated.tolist() == local.truncated.tolist() and seen[-1] == (len(texts), len(texts))
    data = tmp_path / "docs.txt"
    data.write_text("\n".join(shipped_corpus()[:60]), encoding="utf-8")
    command = ["search", "bundled", "--data", str(data), "--query", "a river bank", "--device", "cpu", "--json"]
    assert main(command) == 0
    here = json.loads(capsys.readouterr().out)
    import shutil

    from bertscope.runtime.user_cache import user_cache_dir

    shutil.rmtree(user_cache_dir() / "retrieval", ignore_errors=True)  # the tests' own cache: embedded again
    calls = []
    real = RayEngine.embedding_rows

    def counted(self, *args):
        calls.append(len(args[2]))  # the plan's batches
        yield from real(self, *args)

    monkeypatch.setattr(RayEngine, "embedding_rows", counted)
    assert main([*command, "--engine", "ray"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == here["results"]
    assert len(calls) == 1 and calls[0] >= 1  # the documents on Ray (the one query is embedded here)


@pytest.mark.parametrize("spec", ["spark", "ray:", "rayon"])
def test_an_unknown_engine_is_one_line_with_exit_2(spec, capsys):
    with pytest.raises(BertScopeError, match="Unknown engine"):
        parse_engine(spec)
    for command in (["head-stats", "bundled"], ["head-importance", "bundled-mlm"], ["probe", "bundled"],
                    ["faithfulness", "bundled-mlm"], ["compare", "bundled", "bundled-mlm"],
                    ["search", "bundled", "--query", "x"], ["retrieval-eval", "bundled"]):
        assert main([*command, "--device", "cpu", "--engine", spec]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Unknown engine" in err


def test_an_address_without_a_cluster_is_one_line():
    """Run apart from the module's cluster: this process has none, and nothing listens there."""
    code = ("import sys; from bertscope.cli import main; "
            "sys.exit(main(['head-stats', 'bundled', '--device', 'cpu', '--engine', 'ray:127.0.0.1:9']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("bertscope: error: No Ray cluster at 127.0.0.1:9")


def test_an_actor_that_dies_ends_the_command_with_one_line(tmp_path):
    """A model actor killed mid-run (as the OOM killer would) is not restarted without end: the
    command stops at once with one line (its own cluster, apart from the module's)."""
    import psutil

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(shipped_corpus() * 15), encoding="utf-8")  # 3,270 sentences
    command = [sys.executable, "-m", "bertscope", "head-stats", "bundled", "--device", "cpu", "--corpus", str(corpus),
               "--engine", "ray"]
    actors = torch.cuda.device_count() or os.cpu_count()  # one per GPU, else one per CPU
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        workers: list = []
        for _ in range(300):  # until the actors have loaded the model and started on batches
            workers = [p for p in psutil.process_iter(["cmdline"])
                       if "MapWorker(MapBatches(ModelActor))" in " ".join(p.info["cmdline"] or [])]
            if len(workers) == actors or run.poll() is not None:
                break
            time.sleep(0.5)
        assert len(workers) == actors, run.stderr.read() if run.poll() is not None else "no actors"
        time.sleep(5)
        workers[0].kill()
        killed = time.monotonic()
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 2 and time.monotonic() - killed < 60
    assert err.strip().splitlines() == ["bertscope: error: The Ray engine failed: The actor died unexpectedly before "
                                        "finishing this task."]


def test_the_app_and_the_default_paths_never_import_ray():
    code = ("import sys; from bertscope.core.models import load_model; import bertscope.cli, probes.layerwise; "
            "from bertscope.analysis import attention_stats, hidden_cache, corpus_search; "
            "import bertscope.app.kit.model_picker; load_model('bundled'); print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.stdout.strip() == "False", done.stderr[-1000:]
