"""What the two training pages share: whether training is allowed here, how long is left in words,
and how a finished run's model opens in the sidebar."""

import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from bertscope.app.kit.budget import charge
from bertscope.app.kit.chrome import PLOT_CONFIG, plain, plain_but_code
from bertscope.app.kit.limits import demo
from bertscope.app.kit.model_picker import CUSTOM_KEY, MODEL_KEY, OTHER
from bertscope.app.kit.resident import resident_models
from bertscope.figures.training import loss_curves
from bertscope.runtime.disk_quota import make_room, pinned
from bertscope.runtime.user_cache import user_cache_dir
from bertscope.training.job import TrainingJob


def training_allowed() -> bool:
    """Locally always; on a hosted demo only when BERTSCOPE_ALLOW_TRAINING says so (it is costly)."""
    flag = os.environ.get("BERTSCOPE_ALLOW_TRAINING", "").strip().lower() in {"1", "true", "yes", "on"}
    return flag or not demo()


def training_gate(command: str, also: str = "", pick: str = "Pick a model in the sidebar first.") -> None:
    """Before a training page draws anything costly: one line (and the page stops) when training is switched off
    here (naming the headless ``command``) or no model is picked yet."""
    from bertscope.app.kit.model_picker import chosen_model_name

    if not training_allowed():
        st.info("Training is switched off on this hosted demo (set BERTSCOPE_ALLOW_TRAINING=1 to allow it). "
                f"Run it locally, or headless with `python -m bertscope {command}`{also}.")
        st.stop()
    if not chosen_model_name():
        st.info(pick)
        st.stop()


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


def open_in_sidebar(folder: str) -> None:
    """The sidebar's model becomes ``folder`` (on the next run)."""
    st.session_state.update({MODEL_KEY: OTHER, CUSTOM_KEY: folder})


def live_run(job, keys: tuple[str, str, str], stop: tuple[str, str], loading: str,
             curves: Callable[[Any], dict[str, list[float]]], rows: Callable[[Any], list[dict]],
             columns: dict[str, Any]) -> None:
    """A running job drawn live, once a second while it runs (a fragment: the rest of the page stays still): its
    progress and Stop, its loss curves, a row per finished epoch. ``keys``: (shown-state, stop button, chart);
    ``stop``: (the button's label, its help)."""
    shown, stop_key, chart_key = keys

    @st.fragment(run_every=1.0 if job.snapshot().status == "running" else None)
    def live() -> None:
        snap = job.snapshot()
        if snap.status != "running" and st.session_state.get(shown) != snap.status:
            st.session_state[shown] = snap.status
            st.rerun()  # once, to draw the final state without the timer
        run_progress(job, snap, stop[0], stop_key, stop[1], loading)
        found = curves(snap)
        if found:
            st.plotly_chart(loss_curves(found), config=PLOT_CONFIG, width="stretch", key=chart_key)
        table = rows(snap)
        if table:
            st.dataframe(pd.DataFrame(table), hide_index=True, width="stretch", column_config=columns)

    live()


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


def run_folder(model_name: str, what: str = "") -> Path:
    """A new run's folder in the user cache: the model's name as letters, digits and ``-_.`` (at most 60: a typed
    folder or hub id never becomes a path), what it trains on, and a random suffix."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name).strip("._")[:60] or "model"
    return user_cache_dir() / "training" / "-".join(p for p in (slug, what, uuid.uuid4().hex[:8]) if p)


def run_bytes(lm) -> int:
    """What a training run of ``lm`` writes, at most: its checkpoint (the weights and AdamW's two moments) and the
    finished model, in float32."""
    return 4 * 4 * sum(p.numel() for p in lm.model.parameters())


def start_training(action: str, out: Path, lm, launch: Callable[[Callable[[], None]], TrainingJob]) -> TrainingJob:
    """A training run of ``lm`` into ``out``, started as a costly job that holds its budget slot, its place among the
    resident models (it trains its own copy) and its folder on a hosted demo's disk (room made first, never removed
    while it runs) for its whole run: ``launch(on_done)`` starts the job, whose thread calls ``on_done`` when it ends.
    The page checks its inputs first: from here on the run is charged."""
    make_room(run_bytes(lm), "this training run")
    slot = charge(action, (action, out.name))
    hold = resident_models().hold()
    folder = pinned(out)
    folder.__enter__()

    def done() -> None:
        slot.release()
        hold.release()
        folder.__exit__()

    try:
        return launch(done)
    except BaseException:
        done()
        raise
