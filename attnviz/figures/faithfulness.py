"""Figures of the Faithfulness page: the text shaded by each explanation, and every method's deletion curve."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from ..core.tokens import clean
from .common import EDGE, LEGEND_BELOW, NUMBERS_LEFT, token_note, top_title

POSITIVE, NEGATIVE = "214, 39, 40", "33, 113, 181"  # red: the token raises the score; blue: it lowers it


def shaded_rows(tokens, importance: dict) -> str:
    """An HTML table, one row per method: its name, then the (escaped, cleaned) tokens shaded by |importance| ÷ the
    row's largest, red where the token raises the score and blue where it lowers it; each token's title is its value
    and its raw token."""
    rows = []
    for method, values in importance.items():
        values = np.asarray(values, np.float64)
        top = max(float(np.abs(values).max(initial=0.0)), 1e-30)
        cells = " ".join(
            f'<span title="{html.escape(f"{v:.4g}{token_note(t)}")}" style="background: '
            f'rgba({POSITIVE if v >= 0 else NEGATIVE}, {abs(v) / top:.3f}); padding: 1px 3px; border-radius: 3px">'
            f"{html.escape(clean(t))}</span>"
            for t, v in zip(tokens, values)
        )
        rows.append(f'<tr><th style="text-align: left; padding-right: 12px; white-space: nowrap; font-weight: 600">'
                    f"{html.escape(method)}</th><td style=\"line-height: 2\">{cells}</td></tr>")
    return '<table style="border-collapse: collapse">' + "".join(rows) + "</table>"


def deletion_curves(curves: dict, title: str, y_title: str) -> go.Figure:
    """One line per method: ``curves[method]`` (K + 1,) is the score after removing its top 0, 1, …, K tokens."""
    title, top = top_title(html.escape(title, quote=False), top_axis=False)
    traces = []
    for method, values in curves.items():
        values = np.asarray(values, np.float64)
        traces.append(go.Scatter(
            x=np.arange(len(values)), y=values, mode="lines+markers", name=html.escape(method, quote=False),
            hovertemplate=f"{html.escape(method, quote=False)}<br>top %{{x}} removed<br>{y_title} %{{y:.4g}}"
                          "<extra></extra>",
        ))
    return go.Figure(traces, layout=dict(
        title=title,
        xaxis=dict(title="tokens removed (each method's most important first)", dtick=1),
        yaxis=dict(title=html.escape(y_title, quote=False)),
        legend=dict(orientation="h", y=-0.25),
        margin=dict(l=NUMBERS_LEFT, r=EDGE, t=top, b=LEGEND_BELOW + 30),
        height=top + 420,
    ))
