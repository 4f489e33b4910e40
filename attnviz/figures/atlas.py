"""The long-context head atlas as a layer × head grid: each head coloured by its class (retrieval, sink,
streaming, full), its pattern printed in the cell, every score on hover, a click opens it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .common import head_grid_layout, head_points, top_title

CLASS_COLOURS = {"retrieval": "#d62728", "sink": "#7f7f7f", "streaming": "#1f77b4", "full": "#ff7f0e"}
CLASS_LABELS = {"retrieval": "retrieval (above its null)", "sink": "sink", "streaming": "streaming (sink + window)",
                "full": "needs the full context"}
SHORT = {"a-shape": "A", "vertical-slash": "VS", "block-sparse": "BS", "dense": "D"}  # the pattern, in the cell
HOVER = ("retrieval", "retrieval_null_hi", "streaming", "streaming_null_hi", "sink", "sink_null_hi",
         "kept_a_shape", "kept_vertical_slash", "kept_block_sparse")


def atlas_grid(frame: pd.DataFrame, title: str) -> go.Figure:
    """Cells coloured by ``frame.role``, the pattern's initials in each; one clickable point per head (layer-major,
    customdata [layer, head, HOVER scores…])."""
    L, H = int(frame.layer.max()) + 1, int(frame["head"].max()) + 1
    frame = frame.sort_values(["layer", "head"])
    names = list(CLASS_COLOURS)
    index = frame.role.map(names.index).to_numpy().reshape(L, H)
    R = len(names)
    scale = [[edge, c] for i, c in enumerate(CLASS_COLOURS.values()) for edge in (i / R, (i + 1) / R)]
    values = frame[list(HOVER)].to_numpy(np.float64)  # (L·H, 9)
    every = "<br>".join(f"{name.replace('_', ' ')} %{{customdata[{k + 2}]:.3f}}" for k, name in enumerate(HOVER))
    heading, top_margin = top_title(title)
    legend = [go.Scatter(x=[None], y=[None], mode="markers", name=CLASS_LABELS[n],
                         marker=dict(symbol="square", size=12, color=c), hoverinfo="skip")
              for n, c in CLASS_COLOURS.items()]
    return go.Figure([
        go.Heatmap(z=index, zmin=-0.5, zmax=R - 0.5, colorscale=scale, showscale=False, hoverinfo="skip",
                   text=frame.pattern.map(SHORT).to_numpy().reshape(L, H), texttemplate="%{text}",
                   textfont=dict(size=10 if H > 8 else 13)),
        head_points(frame["head"].to_numpy(), frame.layer.to_numpy(), H,
                    "layer %{customdata[0]}, head %{customdata[1]}: %{text}<br>" + every
                    + "<br>click to open at the needle<extra></extra>",
                    customdata=np.column_stack([frame.layer, frame["head"], values]),  # (L·H, 2 + 9)
                    text=[f"{r}, {p}" for r, p in zip(frame.role, frame.pattern)]),
        *legend,
    ], layout=head_grid_layout(heading, L, H, "class", top_margin, int(min(900, max(160, 24 * L)))))
