"""Figures of norm statistics: a statistic over layers × tokens, per-layer profiles, norm-based attention."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .common import cell_tokens, raw_notes, safe, token_grid_layout

MAX_TICKS = 60  # more token labels than this overlap: the axis keeps numbers and hover names the token


def stat_heatmap(values: np.ndarray, token_labels, title: str = "", share: bool = False) -> go.Figure:
    """One statistic (L, T) as layers × tokens; ``share`` fixes the colours to 0–1."""
    values = np.asarray(values, np.float32)
    L, T = values.shape
    if len(token_labels) != T:
        raise ValueError(f"the statistic covers {T} tokens but there are {len(token_labels)} labels")
    names = safe(token_labels)
    labelled = dict(tickvals=list(range(T)), ticktext=names) if T <= MAX_TICKS else {}
    return go.Figure(
        go.Heatmap(
            z=values, x=np.arange(T), y=np.arange(L), customdata=np.tile(np.array(names, dtype=object), (L, 1)),
            text=np.tile(np.array(raw_notes(token_labels), dtype=object), (L, 1)),  # the raw tokens
            colorscale="Viridis", zmin=0.0 if share else None, zmax=1.0 if share else None,
            hovertemplate="layer %{y}<br>token %{x}: %{customdata}%{text}<br>%{z:.4g}<extra></extra>",
        ),
        layout=dict(
            title=title,
            xaxis=dict(title="token", tickangle=-60, **labelled),
            yaxis=dict(title="layer", autorange="reversed", dtick=1),
            margin=dict(l=10, r=10, t=50 if title else 20, b=10),
            height=240 + 28 * L,
        ),
    )  # fmt: skip


def layer_profile(stats: dict, names, title: str = "") -> go.Figure:
    """Mean over tokens of chosen statistics (each (L, T)), one curve per statistic across layers."""
    curves = [np.asarray(stats[name], np.float32) for name in names]  # each (L, T)
    return go.Figure(
        [go.Scatter(x=np.arange(v.shape[0]), y=v.mean(1), mode="lines+markers", name=name)
         for name, v in zip(names, curves)],
        layout=dict(
            title=title, xaxis=dict(title="layer", dtick=1), yaxis_title="mean over tokens",
            margin=dict(l=10, r=10, t=50 if title else 20, b=10), height=340,
        ),
    )  # fmt: skip


def weight_heatmap(z: np.ndarray, q_labels, k_labels, title: str = "", zmax: float | None = None) -> go.Figure:
    """A (Tq, Tk) matrix of non-negative weights (e.g. norm-based attention), colours from 0 to ``zmax``."""
    z = np.asarray(z, np.float32)
    if z.shape != (len(q_labels), len(k_labels)):
        raise ValueError(f"weights are {z.shape} but there are {len(q_labels)} × {len(k_labels)} labels")
    zmax = zmax if zmax is not None else float(z.max()) or 1.0
    rows, columns = safe(q_labels), safe(k_labels)
    raw, line = cell_tokens(q_labels, k_labels)
    return go.Figure(
        go.Heatmap(
            z=z, x=columns, y=rows, zmin=0.0, zmax=zmax, colorscale="Oranges",
            colorbar=dict(title="‖αf‖"),
            hovertemplate=f"query %{{y}}<br>key %{{x}}<br>%{{z:.4f}}{line}<extra></extra>", **raw,
        ),
        layout=token_grid_layout(title, rows, columns),
    )  # fmt: skip
