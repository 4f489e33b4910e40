"""Figures of a generation: what one step attended to, the step's top next tokens, the prompt boundary."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from .common import hover_names, safe

PROMPT_COLOUR, NEW_COLOUR, CHOSEN_COLOUR = "#6baed6", "#fd8d3c", "#d62728"


def mark_boundary(fig: go.Figure, boundary: int, both: bool = True) -> go.Figure:
    """A dashed line before position ``boundary`` (the first generated token) on the x axis (and y with ``both``)."""
    line = dict(color="black", width=2, dash="dash")
    fig.add_vline(x=boundary - 0.5, line=line, annotation_text="continuation →", annotation_position="top right")
    if both:
        fig.add_hline(y=boundary - 0.5, line=line)
    return fig


def step_attention(weights: np.ndarray, labels, boundary: int, query: int, title: str) -> go.Figure:
    """Bars of what query position ``query`` attends to over keys 0..query: prompt keys in blue, generated
    keys in orange, the boundary dashed. ``labels`` are unique per position (``attnviz.core.tokens.labels``)."""
    w = np.asarray(weights, np.float64)[: query + 1]
    x = np.arange(len(w))
    shown = safe(labels[: len(w)])
    fig = go.Figure(go.Bar(
        x=x, y=w, marker_color=[PROMPT_COLOUR if i < boundary else NEW_COLOUR for i in x],
        customdata=hover_names(labels[: len(w)]), hovertemplate="key %{customdata}<br>weight %{y:.4f}<extra></extra>",
    ), layout=dict(
        title=html.escape(title, quote=False),
        xaxis=dict(title="key (earlier tokens)", tickvals=x.tolist(), ticktext=shown, tickangle=-60),
        yaxis=dict(title="weight", range=[0, max(1e-6, float(w.max()) * 1.1)]),
        margin=dict(l=10, r=10, t=60, b=10), height=360, showlegend=False,
    ))
    return mark_boundary(fig, boundary, both=False)


def top_tokens(labels, probs: np.ndarray, chosen: str, title: str) -> go.Figure:
    """Horizontal bars of a step's likeliest next tokens (``labels``, display text) and their probabilities;
    the one generated (``chosen``) in red."""
    p = np.asarray(probs, np.float64)
    shown = safe(labels)
    return go.Figure(go.Bar(
        x=p, y=list(range(len(p))), orientation="h",
        marker_color=[CHOSEN_COLOUR if t == chosen else PROMPT_COLOUR for t in labels],
        customdata=hover_names(labels), hovertemplate="%{customdata}<br>p = %{x:.4f}<extra></extra>",
    ), layout=dict(
        title=html.escape(title, quote=False),
        xaxis=dict(title="probability", range=[0, 1]),
        yaxis=dict(tickvals=list(range(len(p))), ticktext=shown, autorange="reversed"),
        margin=dict(l=10, r=10, t=60, b=10), height=260, showlegend=False,
    ))
