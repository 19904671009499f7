"""Hub reachability is decided quickly and once; the default model follows the rules."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from bertscope.sources import hub


@pytest.fixture
def local_server():
    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_probe_sees_an_answering_server(local_server):
    assert hub.probe_endpoint(local_server, timeout_s=2)  # a 404 is still an answer


def test_probe_refused_is_unreachable():
    assert not hub.probe_endpoint(closed_port_url(), timeout_s=1)


def test_offline_variable_skips_the_network(monkeypatch, local_server):
    monkeypatch.setenv("HF_ENDPOINT", local_server)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.hub_reachable.cache_clear()
    try:
        assert hub.hub_reachable() is False
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        hub.hub_reachable.cache_clear()
        assert hub.hub_reachable() is True
    finally:
        hub.hub_reachable.cache_clear()


def test_default_is_bundled_mlm_with_notice_when_offline_and_uncached(monkeypatch):
    """Offline, the app opens on a model every page works with (it has a masked-LM head)."""
    monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)
    monkeypatch.setattr(hub, "is_cached", lambda repo: False)
    name, notice = hub.default_model()
    assert name == "bundled-mlm" and "masked-LM head" in notice
    assert "hub is unreachable" in notice and "bundled all-MiniLM-L6-v2" in notice


def test_default_prefers_cached_bert(monkeypatch):
    monkeypatch.delenv("BERTSCOPE_MODEL", raising=False)
    monkeypatch.setattr(hub, "is_cached", lambda repo: repo == "bert-base-uncased")
    assert hub.default_model() == ("bert-base-uncased", None)


def test_environment_variable_overrides(monkeypatch):
    monkeypatch.setenv("BERTSCOPE_MODEL", "roberta-base")
    assert hub.default_model() == ("roberta-base", None)


def test_is_cached_reads_the_hugging_face_cache(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    snapshot = tmp_path / "models--someone--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (tmp_path / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    assert not hub.is_cached("someone/tiny")  # config but no weights
    (snapshot / "model.safetensors").write_bytes(b"")
    assert hub.is_cached("someone/tiny")
    assert not hub.is_cached("someone/other")
