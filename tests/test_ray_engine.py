"""The Ray engine on a local Ray cluster the tests start (``ray.init(num_cpus=2)``, no outside
address): head statistics equal to the single-process path's, hidden-state cache entries whose
arrays are the same bytes, the same probe accuracies, the same commands."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bertscope.analysis.attention_stats import head_stats
from bertscope.analysis.hidden_cache import HiddenStateCache, hidden_states
from bertscope.analysis.probing import probe_layers
from bertscope.cli import main
from bertscope.core.models import load_model
from bertscope.corpora.sentences import shipped_corpus
from bertscope.corpora.suites import shipped_task
from bertscope.engines.ray_engine import RayEngine, head_stats as ray_head_stats, parse_engine, ray_rows
from bertscope.errors import BertScopeError
from tests.conftest import ROOT

ray = pytest.importorskip("ray", reason="requirements-cluster.txt (installed by `make test`)")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def bundled():
    return load_model("bundled", device="cpu")


def test_head_statistics_through_ray_equal_the_single_process_ones(cluster, bundled):
    sentences = shipped_corpus()
    local = head_stats(bundled, sentences)
    seen: list[tuple[int, int]] = []
    spread = ray_head_stats(bundled, sentences, RayEngine(), progress=lambda d, t: seen.append((d, t)))
    assert (spread.sentences, spread.tokens) == (local.sentences, local.tokens)
    for name in local.stats:
        np.testing.assert_allclose(spread.stats[name], local.stats[name], rtol=0, atol=1e-6)
    assert seen[-1] == (len(sentences), len(sentences))  # progress as the actors' results arrive


@pytest.mark.parametrize("task_name, pooling", [("pos", "first"), ("tense", "cls")])
def test_the_cache_written_through_ray_is_the_local_one_byte_for_byte(cluster, bundled, tmp_path, task_name,
                                                                       pooling):
    task = shipped_task(task_name)
    local = hidden_states(bundled, task, pooling, HiddenStateCache(tmp_path / "local"))
    spread = hidden_states(bundled, task, pooling, HiddenStateCache(tmp_path / "ray"), rows=ray_rows(RayEngine()))
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
    from bertscope.engines.ray_engine import head_importance as ray_head_importance
    from bertscope.interventions.importance import head_importance

    lm = load_model("bundled-mlm", device="cpu")
    texts = shipped_corpus()[:48]
    local = head_importance(lm, texts, batch_size=8, seed=3)
    spread = ray_head_importance(lm, texts, RayEngine(), batch_size=8, seed=3)
    assert (spread.sentences, spread.positions) == (local.sentences, local.positions)  # the same masked positions
    assert spread.loss == pytest.approx(local.loss, rel=1e-6)
    np.testing.assert_allclose(spread.raw, local.raw, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(spread.importance, local.importance, rtol=1e-5, atol=1e-7)
    assert (spread.order() == local.order()).all()


@pytest.mark.parametrize("spec", ["spark", "ray:", "rayon"])
def test_an_unknown_engine_is_one_line_with_exit_2(spec, capsys):
    with pytest.raises(BertScopeError, match="Unknown engine"):
        parse_engine(spec)
    for command in (["head-stats", "bundled"], ["head-importance", "bundled-mlm"], ["probe", "bundled"]):
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


def test_the_app_and_the_default_paths_never_import_ray():
    code = ("import sys; from bertscope.core.models import load_model; import bertscope.cli, probes.layerwise; "
            "from bertscope.analysis import attention_stats, hidden_cache, corpus_search; "
            "import views.kit.models; load_model('bundled'); print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.stdout.strip() == "False", done.stderr[-1000:]
