"""A crosscoder's latents by relative decoder norm: one histogram, its bars stacked by class (0 base-only,
½ the same norm in both models, 1 fine-tuned-only), the class boundaries drawn."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from bertscope.features.model_diff import BASE_ONLY, CLASSES, FT_ONLY, SHARED, ModelDiff

CLASS_COLOURS = {"base-only": "#1f77b4", "shared": "#7f7f7f", "fine-tuned-only": "#d62728", "other": "#bcbd22",
                 "never fires": "#e0e0e0"}
BINS = 50


def relative_norm_figure(diff: ModelDiff, models: tuple[str, str]) -> go.Figure:
    edges = np.linspace(0, 1, BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    fig = go.Figure()
    for i, name in enumerate(CLASSES):
        chosen = diff.delta[diff.classes == i]
        if not len(chosen):
            continue
        counts, _ = np.histogram(np.clip(chosen, 0, 1), edges)
        fig.add_trace(go.Bar(x=centres, y=counts, width=1 / BINS, name=f"{name} ({len(chosen):,})",
                             marker_color=CLASS_COLOURS[name],
                             hovertemplate=f"{name}<br>relative norm %{{x:.2f}}: %{{y}} latents<extra></extra>"))
    for x in (BASE_ONLY, *SHARED, FT_ONLY):
        fig.add_vline(x=x, line=dict(color="grey", width=1, dash="dot"))
    fig.update_layout(barmode="stack", height=380, yaxis_type="log",
                      title=f"{len(diff.delta):,} latents by relative decoder norm: 0 only {models[0]} writes it, "
                            f"1 only {models[1]}",
                      xaxis_title="relative decoder norm ½((n_ft − n_base) / max + 1)", yaxis_title="latents (log)",
                      legend=dict(font=dict(size=11)))
    return fig
