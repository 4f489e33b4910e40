"""Attention heatmaps."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .common import PROB_SCALE, safe


def attention_heatmap(attn: np.ndarray, q_labels, k_labels, title: str = "") -> go.Figure:
    """One head's (Tq, Tk) weights: rows are queries, columns keys, colours fixed to 0–1.

    Labels must be unique per position (``attnviz.tokens.labels``) since the axes are categorical.
    """
    attn = np.asarray(attn, np.float32)
    if attn.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"attention is {attn.shape} but there are {len(q_labels)} × {len(k_labels)} labels")
    fig = go.Figure(
        go.Heatmap(
            z=attn,
            x=safe(k_labels),
            y=safe(q_labels),
            zmin=0.0,
            zmax=1.0,
            colorscale=PROB_SCALE,
            colorbar=dict(title="weight"),
            hovertemplate="query %{y}<br>key %{x}<br>weight %{z:.4f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title,
        xaxis=dict(title="key", type="category", tickangle=-60, side="top"),
        yaxis=dict(title="query", type="category", autorange="reversed"),
        margin=dict(l=10, r=10, t=60 if title else 40, b=10),
        height=min(900, 260 + 14 * len(q_labels)),
    )
    return fig
