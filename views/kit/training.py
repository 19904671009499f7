"""What the two training pages share: whether training is allowed here, how long is left in words,
and how a finished run's model opens in the sidebar."""

import os

import streamlit as st

from views.kit.limits import demo
from views.kit.model_picker import CUSTOM_KEY, MODEL_KEY, OTHER


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
