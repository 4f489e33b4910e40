"""Figures of an intervention: what the model outputs before and after an edit (arrays + labels -> go.Figure)."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..core.tokens import labels as token_labels
from .common import NUMBERS_LEFT, SIDE_KEY, cell_tokens, click_points, hover_names, safe, top_title

BEFORE, AFTER = "#8c8c8c", "#d62728"  # grey: as it is; red: edited


def next_token_bars(before: np.ndarray, after: np.ndarray, labels, title: str, chosen: int | None = None) -> go.Figure:
    """One pair of bars per position i: the probability of the actual next token (``labels[i]``) before and after.

    ``before``/``after`` (T−1,) probabilities; ``labels`` (T−1,) the tokens predicted; ``chosen`` outlines a position.
    """
    before, after = np.asarray(before, np.float64), np.asarray(after, np.float64)
    if before.shape != after.shape or before.shape != (len(labels),):
        raise ValueError(f"{before.shape} and {after.shape} probabilities for {len(labels)} labels")
    x = np.arange(len(labels))
    names, hover_text = safe(labels), hover_names(labels)
    hover = "position %{x} → %{customdata}<br>p = %{y:.4f}<extra>%{fullData.name}</extra>"
    widths = [2 if i == chosen else 0 for i in x]  # the chosen position's bar outlined
    title, top = top_title(html.escape(title, quote=False))
    return go.Figure(
        [go.Bar(x=x, y=before, name="as it is", marker=dict(color=BEFORE), customdata=hover_text,
                hovertemplate=hover),
         go.Bar(x=x, y=after, name="edited", marker=dict(color=AFTER, line=dict(width=widths, color="#222")),
                customdata=hover_text, hovertemplate=hover)],
        layout=dict(
            title=title, barmode="group", bargap=0.15,
            xaxis=dict(title="position (the token it predicts)", tickvals=x, ticktext=names, tickangle=-60),
            yaxis=dict(title="p(actual next token)", range=[0, 1]),
            legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"),
            margin=dict(l=NUMBERS_LEFT, r=10, t=top, b=10), height=top + 320,
        ),
    )


def clickable_cells(fig: go.Figure, q_labels, k_labels) -> go.Figure:
    """``fig`` (a heatmap over categorical query × key axes) with one invisible point per cell, query-major, so a
    click selects a cell (plotly selects points, not heatmap cells)."""
    q, k = np.divmod(np.arange(len(q_labels) * len(k_labels)), len(k_labels))  # (Tq·Tk,) each point's cell
    ys, xs = np.asarray(safe(q_labels), object), np.asarray(safe(k_labels), object)
    raw, line = cell_tokens(q_labels, k_labels)
    more = dict(text=np.asarray(raw["text"], object).ravel()) if raw else {}  # (Tq·Tk,) query-major, as the points
    hover = f"query %{{y}}<br>key %{{x}}{line}<br>click to knock it out<extra></extra>"
    fig.add_trace(click_points(xs[k], ys[q], hover, **more))
    fig.update_layout(dragmode=False, hovermode="closest")
    return fig


def top_k_bars(before_tokens, before_probs, after_tokens, after_probs, title: str) -> go.Figure:
    """The top-k next tokens (raw, as the tokenizer spells them) at one position, as it is (left) and edited
    (right): labelled cleaned, the raw token in the hover."""
    fig = make_subplots(1, 2, subplot_titles=("as it is", "edited"), horizontal_spacing=0.2)
    for col, (tokens, probs, colour) in enumerate(((before_tokens, before_probs, BEFORE),
                                                   (after_tokens, after_probs, AFTER)), 1):
        shown = token_labels(tokens)
        names = safe(shown)
        fig.add_trace(go.Bar(x=np.asarray(probs, np.float64), y=np.arange(len(names)), orientation="h",
                             marker=dict(color=colour), customdata=hover_names(shown), showlegend=False,
                             hovertemplate="%{customdata}<br>p = %{x:.4f}<extra></extra>"), 1, col)
        fig.update_yaxes(tickvals=list(range(len(names))), ticktext=names, autorange="reversed", row=1, col=col)
        fig.update_xaxes(range=[0, 1], title="p", row=1, col=col)
    title, top = top_title(html.escape(title, quote=False))
    fig.update_layout(title=title, margin=dict(l=NUMBERS_LEFT, r=10, t=top + 20, b=10), height=top + 60 + 26 * len(
        before_tokens))
    return fig


def label_bars(labels, before: np.ndarray, after: np.ndarray, title: str) -> go.Figure:
    """A classifier's label probabilities before and after."""
    names = safe(labels)
    x = np.arange(len(names))
    title, top = top_title(html.escape(title, quote=False))
    hover = "%{customdata}<br>p = %{y:.4f}<extra>%{fullData.name}</extra>"
    return go.Figure(
        [go.Bar(x=x, y=np.asarray(before, np.float64), name="as it is", marker=dict(color=BEFORE), customdata=names,
                hovertemplate=hover),
         go.Bar(x=x, y=np.asarray(after, np.float64), name="edited", marker=dict(color=AFTER), customdata=names,
                hovertemplate=hover)],
        layout=dict(title=title, barmode="group", xaxis=dict(title="label", tickvals=x, ticktext=names),
                    yaxis=dict(title="probability", range=[0, 1]), margin=dict(l=NUMBERS_LEFT, r=10, t=top, b=10),
                    height=top + 300),
    )


def change_map(change: np.ndarray, labels, title: str) -> go.Figure:
    """An encoder's (L, T) norm of each layer's output change per token."""
    change = np.asarray(change, np.float64)
    L, T = change.shape
    if T != len(labels):
        raise ValueError(f"{T} positions but {len(labels)} labels")
    names = safe(labels)
    title, top = top_title(html.escape(title, quote=False))
    return go.Figure(
        go.Heatmap(z=change, x=np.arange(T), y=np.arange(L),
                   customdata=np.broadcast_to(np.asarray(hover_names(labels)), (L, T)),
                   zmin=0, zmax=max(float(change.max(initial=0.0)), 1e-12), colorscale="Reds",
                   colorbar=dict(title="‖Δ‖"),
                   hovertemplate="layer %{y}, %{customdata}<br>‖Δ output‖ %{z:.4g}<extra></extra>"),
        layout=dict(title=title, xaxis=dict(title="token", tickvals=np.arange(T), ticktext=names, tickangle=-60),
                    yaxis=dict(title="layer", tickvals=list(range(L)), autorange="reversed"),
                    margin=dict(l=NUMBERS_LEFT, r=SIDE_KEY, t=top, b=10), height=top + 120 + 30 * L),
    )


__all__ = ["next_token_bars", "clickable_cells", "top_k_bars", "label_bars", "change_map"]
