"""What the two training pages share: whether training is allowed here, how long is left in words,
and how a finished run's model opens in the sidebar."""

import os

import streamlit as st

from bertscope.app.kit.chrome import plain, plain_but_code
from bertscope.app.kit.limits import demo
from bertscope.app.kit.model_picker import CUSTOM_KEY, MODEL_KEY, OTHER


def training_allowed() -> bool:
    """Locally always; on a hosted demo only when BERTSCOPE_ALLOW_TRAINING says so (it is costly)."""
    flag = os.environ.get("BERTSCOPE_ALLOW_TRAINING", "").strip().lower() in {"1", "true", "yes", "on"}
    return flag or not demo()


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


def open_in_sidebar(folder: str) -> None:
    """The sidebar's model becomes ``folder`` (on the next run)."""
    st.session_state.update({MODEL_KEY: OTHER, CUSTOM_KEY: folder})


def run_progress(job, snap, button: str, key: str, why: str, loading: str) -> None:
    """The run's progress bar with its pace and time left, the button that stops it, its error."""
    done = snap.step / snap.total if snap.total else 0.0
    pace = ""
    if snap.seconds_left is not None:
        pace = (f" · {snap.seconds_per_step:.1f} s a step on {job.device_label}, about "
                f"{duration(snap.seconds_left)} left (held-out scoring after each epoch included)")
    elif snap.status == "running" and not snap.step:
        pace = f" · {loading} ({duration(snap.elapsed)})"
    st.progress(done, text=plain(f"{job.model_name}: step {snap.step:,} of {snap.total or '…'} · {snap.status}"
                                 f"{pace}"))
    if snap.status == "running":
        st.button(button, on_click=job.cancel, key=key, help=why)
    if snap.error:
        st.error(plain_but_code(snap.error))
