"""Figures of position information: encoding tables, their similarity, frequencies, attention by offset."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .common import PROB_SCALE, top_title

SIGNED_SCALE = "RdBu_r"  # values around 0: blue negative, white 0, red positive


def _layout(title: str, x: str, y: str, height: int = 420, reversed_y: bool = True, xaxis=None, yaxis=None,
            **more) -> dict:
    """The layout these figures share: ``xaxis`` and ``yaxis`` add to the axes, ``more`` to the layout. The title
    wraps, so a phone shows it whole ("…128 positions × 128 dimensio" was cut), with the room its lines take."""
    heading, top = top_title(title, top_axis=False) if title else ("", 20)
    return dict(
        title=heading,
        xaxis=dict(title=x, **(xaxis or {})),
        yaxis=dict(title=y, autorange="reversed" if reversed_y else True, **(yaxis or {})),
        margin=dict(l=10, r=10, t=top, b=10),
        height=height + top - 50,
        **more,
    )


def robust_limit(values: np.ndarray, q: float = 99.0) -> float:
    """A symmetric colour limit at the ``q``-th percentile of |values|: a few large entries (MiniLM's
    learned positions have some) saturate instead of turning everything else grey."""
    lim = float(np.percentile(np.abs(values), q)) if np.size(values) else 0.0
    return lim or float(np.abs(values).max(initial=0.0)) or 1.0


def encoding_heatmap(table: np.ndarray, title: str = "", rows: slice = slice(None)) -> go.Figure:
    """A position table (P, D): one row per position (the ``rows`` window of them), one column per dimension,
    0 white, colours up to the 99th percentile of the whole table's |value| (larger values share the end colours;
    every window on one scale)."""
    table = np.asarray(table, np.float32)
    lim = robust_limit(table)
    first, _, _ = rows.indices(len(table))
    return go.Figure(
        go.Heatmap(
            z=table[rows], y0=first, zmin=-lim, zmax=lim, colorscale=SIGNED_SCALE, colorbar=dict(title="value"),
            hovertemplate="position %{y}<br>dimension %{x}<br>value %{z:.4f}<extra></extra>",
        ),
        layout=_layout(title, "dimension", "position"),
    )  # fmt: skip


def dimension_curves(table: np.ndarray, dims, title: str = "") -> go.Figure:
    """Chosen columns of a position table (P, D) as curves over position."""
    table = np.asarray(table, np.float32)
    for d in dims:
        if not 0 <= d < table.shape[1]:
            raise ValueError(f"dimension {d} is outside 0…{table.shape[1] - 1}")
    return go.Figure([go.Scatter(y=table[:, d], mode="lines", name=f"dim {d}") for d in dims],
                     layout=_layout(title, "position", "value", height=320, reversed_y=False))


def similarity_heatmap(sim: np.ndarray, metric: str, title: str = "", rows: slice = slice(None)) -> go.Figure:
    """(P, P) similarity of position vectors, the ``rows`` window of positions against itself, colours on the whole
    map's scale; a band along the diagonal means similarity follows distance."""
    sim = np.asarray(sim, np.float32)
    lim = float(np.abs(sim).max()) or 1.0
    first, _, _ = rows.indices(len(sim))
    return go.Figure(
        go.Heatmap(
            z=sim[rows, rows], x0=first, y0=first, zmin=-lim, zmax=lim, colorscale=SIGNED_SCALE,
            colorbar=dict(title=metric),
            hovertemplate="position %{y} · position %{x}<br>" + metric + " %{z:.4f}<extra></extra>",
        ),
        layout=_layout(title, "position", "position", height=520, xaxis=dict(constrain="domain"),
                       yaxis=dict(scaleanchor="x", constrain="domain")),
    )  # fmt: skip


def frequency_plot(freqs: np.ndarray, title: str = "") -> go.Figure:
    """Angular frequency per dimension pair on a log scale; hover gives the wavelength 2π/θ in positions."""
    freqs = np.asarray(freqs, np.float64)
    return go.Figure(
        go.Scatter(
            y=freqs, mode="lines+markers", customdata=2 * np.pi / freqs, name="θ",
            hovertemplate="pair %{x}<br>θ %{y:.3g} rad/position<br>"
            "wavelength %{customdata:.4g} positions<extra></extra>",
        ),
        layout=_layout(title, "dimension pair i", "θᵢ (radians per position)", height=320, reversed_y=False,
                       yaxis=dict(type="log")),
    )  # fmt: skip


def relative_bias_heatmap(table: np.ndarray, offsets: np.ndarray, title: str = "") -> go.Figure:
    """A relative position bias (K offsets, H heads) as heads × offsets."""
    table = np.asarray(table, np.float32)
    lim = float(np.abs(table).max()) or 1.0
    return go.Figure(
        go.Heatmap(
            z=table.T, x=np.asarray(offsets), zmin=-lim, zmax=lim, colorscale=SIGNED_SCALE, colorbar=dict(title="bias"),
            hovertemplate="head %{y}<br>offset %{x}<br>bias %{z:.4f}<extra></extra>",
        ),
        layout=_layout(title, "offset key − query", "head", height=220 + 12 * table.shape[1]),
    )  # fmt: skip


def offset_heatmap(offsets: np.ndarray, means: np.ndarray, title: str = "") -> go.Figure:
    """Mean attention by offset (L, H, K): one row per layer and head."""
    means = np.asarray(means, np.float32)
    L, H, K = means.shape
    rows = [f"L{layer} H{head}" for layer in range(L) for head in range(H)]
    top = float(np.nanmax(means)) if np.isfinite(means).any() else 1.0
    return go.Figure(
        go.Heatmap(
            z=means.reshape(L * H, K), x=np.asarray(offsets), y=rows, zmin=0.0, zmax=top, colorscale=PROB_SCALE,
            colorbar=dict(title="mean weight"),
            hovertemplate="%{y}<br>offset %{x}<br>mean weight %{z:.4f}<extra></extra>",
        ),
        layout=_layout(title, "offset key − query", "layer, head", height=min(1200, 220 + 10 * L * H),
                       yaxis=dict(type="category")),
    )  # fmt: skip


def offset_curves(offsets: np.ndarray, means: np.ndarray, title: str = "") -> go.Figure:
    """Mean attention by offset averaged over heads: one curve per layer."""
    means = np.asarray(means, np.float32)
    # Offsets without pairs are NaN in every head alike, so a plain mean keeps them as gaps.
    return go.Figure([go.Scatter(x=np.asarray(offsets), y=curve, mode="lines", name=f"layer {layer}")
                      for layer, curve in enumerate(means.mean(axis=1))],
                     layout=_layout(title, "offset key − query", "mean weight", height=360, reversed_y=False))


def principal_components(table: np.ndarray, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(P, k) the positions' coordinates on the table's first ``k`` principal components and (k,) the share
    of variance each explains; each component's sign makes its largest coordinate positive."""
    x = np.asarray(table, np.float64)
    x = x - x.mean(0)
    u, sv, _ = np.linalg.svd(x, full_matrices=False)
    k = min(k, len(sv))
    coords = u[:, :k] * sv[:k]  # (P, k)
    coords *= np.sign(coords[np.abs(coords).argmax(0), np.arange(k)])
    share = sv[:k] ** 2 / max(float((sv ** 2).sum()), 1e-30)
    return coords, share


def components_plot(table: np.ndarray, title: str = "", k: int = 3) -> go.Figure:
    """The first principal components of a position table (P, D) as curves over position: smooth waves mean
    nearby positions get similar vectors, whatever the raw table looks like."""
    coords, share = principal_components(table, k)
    return go.Figure([go.Scatter(y=coords[:, i], mode="lines", name=f"component {i + 1} ({share[i]:.0%} of variance)",
                                 hovertemplate="position %{x}<br>%{y:.3g}<extra></extra>")
                      for i in range(coords.shape[1])],
                     layout=_layout(title, "position", "coordinate", height=340, reversed_y=False,
                                    legend=dict(orientation="h", y=-0.25)))
