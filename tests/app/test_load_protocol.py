"""The hosted demo under load at the protocol level (``benchmarks/load_protocol.py``): sessions over Streamlit's
websocket from one process, each asking for pages as shared links open them. Every render finishes without an
exception on the page, and the server holds one copy of its model: its memory at the peak stays within 1.5x of
one warm session's. The figures (40 sessions) are the benchmark's."""

from __future__ import annotations

import pytest

from benchmarks.load_protocol import run

pytestmark = pytest.mark.slow


def test_sessions_over_the_websocket_render_without_errors_and_share_the_model():
    out = run(sessions=8, rounds=2, demo=True, timeout=240)
    assert out["failures"] == [] and out["renders"] == 16
    assert out["rss_peak_mib"] <= 1.5 * out["rss_before_mib"], out
