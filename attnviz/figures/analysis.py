"""Figures of the analysis page: per-head maps, token relevance per layer, relevance on the text, differences."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from .common import (NUMBERS_LEFT, PROB_SCALE, SIDE_KEY, cell_tokens, head_points, raw_notes, safe, token_grid_layout,
                     token_note, top_title)

DIVERGING = "RdBu_r"  # signed values: blue below zero, red above, white at zero
RELEVANCE_RGB = "214, 39, 40"  # the text's highlight colour; alpha carries the relevance


def head_map(values: np.ndarray, title: str, zrange: tuple[float, float] | None = None,
             colorscale: str = PROB_SCALE, value_name: str = "value") -> go.Figure:
    """An (L, H) map, one cell per head; each cell carries a clickable point with customdata [layer, head].

    ``zrange`` fixes the colours (e.g. 0–1); without it they are symmetric around 0 for signed values.
    """
    values = np.asarray(values, np.float64)
    L, H = values.shape
    if zrange is None:
        top = max(float(np.abs(values).max()), 1e-12)
        zrange = (-top, top)
    layer, head = np.divmod(np.arange(L * H), H)  # (L·H,) each point's layer and head
    name = html.escape(value_name, quote=False)
    title, top = top_title(html.escape(title, quote=False))
    return go.Figure(
        [
            go.Heatmap(z=values, zmin=zrange[0], zmax=zrange[1], colorscale=colorscale,
                       colorbar=dict(title=name), hoverinfo="skip"),
            head_points(head, layer, H, f"layer %{{customdata[0]}}, head %{{customdata[1]}}<br>{name} %{{text}}"
                        "<br>click to open<extra></extra>",
                        customdata=np.stack([layer, head], 1), text=[f"{v:.4g}" for v in values.ravel()]),  # (L·H, 2)
        ],
        layout=dict(
            title=title,
            xaxis=dict(title="head", tickvals=list(range(H)), side="top", fixedrange=True, showgrid=False,
                       zeroline=False),
            yaxis=dict(title="layer", tickvals=list(range(L)), autorange="reversed", fixedrange=True, showgrid=False,
                       zeroline=False),
            hovermode="closest",
            dragmode=False,
            margin=dict(l=NUMBERS_LEFT, r=SIDE_KEY, t=top, b=10),
            height=top + int(min(600, max(160, 40 + 40 * L))),
        ),
    )


def relevance_map(relevance: np.ndarray, labels, title: str, value_name: str = "relevance") -> go.Figure:
    """(L, T) relevance of every input token after every layer: rows are layers, columns tokens.

    Labels must be unique per position (``attnviz.core.tokens.labels``) since the token axis is categorical.
    """
    relevance = np.asarray(relevance, np.float64)
    L, T = relevance.shape
    if T != len(labels):
        raise ValueError(f"relevance has {T} tokens but there are {len(labels)} labels")
    names = safe(labels)
    title, top = top_title(html.escape(title, quote=False), names)
    return go.Figure(
        go.Heatmap(
            z=relevance, x=names, zmin=0.0, zmax=1.0, colorscale=PROB_SCALE, colorbar=dict(title=value_name),
            text=np.tile(np.array(raw_notes(labels), dtype=object), (L, 1)),  # the raw tokens
            hovertemplate=f"after layer %{{y}}<br>token %{{x}}%{{text}}<br>{value_name} %{{z:.4f}}<extra></extra>",
        ),
        layout=dict(
            title=title,
            xaxis=dict(title="input token", type="category", tickangle=-60, side="top"),
            yaxis=dict(title="layer", tickvals=list(range(L)), autorange="reversed"),
            margin=dict(l=10, r=10, t=top, b=10),
            height=top + int(min(500, max(160, 40 + 30 * L))),
        ),
    )


def relevance_html(labels, relevance: np.ndarray) -> str:
    """The tokens as escaped HTML spans, each highlighted with alpha = its relevance ÷ the largest; each title is its
    relevance and its raw token (``labels`` from ``attnviz.core.tokens.labels``)."""
    relevance = np.asarray(relevance, np.float64)
    top = max(float(relevance.max()), 1e-12)
    titles = [html.escape(f"{r:.4f}{token_note(getattr(t, 'raw', str(t)))}") for t, r in zip(labels, relevance)]
    spans = [
        f'<span title="{title}" style="background: rgba({RELEVANCE_RGB}, {r / top:.3f}); '
        f'padding: 1px 2px; margin: 1px; border-radius: 3px; line-height: 2">{html.escape(str(t))}</span>'
        for t, r, title in zip(labels, relevance, titles)
    ]
    return '<div style="font-family: monospace">' + " ".join(spans) + "</div>"


def difference_map(diff: np.ndarray, labels, title: str) -> go.Figure:
    """(M, M) weight differences at matched positions; colours symmetric around 0, ±1 at most.

    Labels must be unique per position (``attnviz.core.tokens.labels``) since the axes are categorical.
    """
    diff = np.asarray(diff, np.float32)  # differences of float32 weights: float64 would double the figure
    if diff.shape != (len(labels), len(labels)):
        raise ValueError(f"difference is {diff.shape} but there are {len(labels)} labels")
    limit = float(np.clip(np.abs(diff).max(initial=0.0), 1e-6, 1.0))
    names = safe(labels)
    raw, line = cell_tokens(labels, labels)
    return go.Figure(
        go.Heatmap(
            z=diff, x=names, y=names, zmin=-limit, zmax=limit, colorscale=DIVERGING, colorbar=dict(title="A − B"),
            hovertemplate=f"query %{{y}}<br>key %{{x}}<br>A − B %{{z:.4f}}{line}<extra></extra>", **raw,
        ),
        layout=token_grid_layout(html.escape(title, quote=False), names, names),
    )
