"""Training figures: the loss of every objective step by step, as a run goes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go


def loss_curves(curves: Mapping[str, Sequence[float]]) -> go.Figure:
    """``curves``: objective -> one loss per optimiser step."""
    frame = pd.DataFrame([{"step": i + 1, "loss": v, "objective": name}
                          for name, values in curves.items() for i, v in enumerate(values)])
    steps = max((len(v) for v in curves.values()), default=0)
    fig = px.line(frame, x="step", y="loss", color="objective", labels={"loss": "loss (nats)"},
                  title="Training loss, step by step", markers=steps <= 200)
    if steps <= 20:
        fig.update_xaxes(dtick=1)  # whole steps only
    return fig
