"""The head-role atlas: a layer × head grid coloured by each head's strongest role."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from .common import head_grid_layout, head_points, top_title

# One colour per role (Plotly's qualitative "D3" palette), the same on every model whichever roles it has.
ROLE_COLOURS = {"previous": "#1f77b4", "induction": "#d62728", "duplicate": "#ff7f0e", "sink": "#7f7f7f",
                "self": "#2ca02c", "local": "#9467bd", "broad": "#bcbd22", "delimiter": "#17becf"}


def role_grid(scores: dict[str, np.ndarray], labels: dict[str, str], title: str) -> go.Figure:
    """Cells coloured by each head's strongest role among ``labels`` (role -> label, in order), its score
    printed in the cell, a legend of the roles below; hovering shows every score. Each cell carries a clickable
    point, customdata [layer, head, each role's score]."""
    names = list(labels)
    stack = np.stack([np.asarray(scores[r], np.float64) for r in names])  # (R, L, H)
    R, L, H = stack.shape
    best = stack.argmax(0)  # (L, H)
    top = stack.max(0)
    colours = [ROLE_COLOURS[r] for r in names]
    scale = [[edge, c] for i, c in enumerate(colours) for edge in (i / R, (i + 1) / R)]  # one band per role
    layer, head = np.divmod(np.arange(L * H), H)  # (L·H,)
    every = "<br>".join(f"{html.escape(labels[r], quote=False)} %{{customdata[{k + 2}]:.3f}}"
                        for k, r in enumerate(names))
    heading, top_margin = top_title(html.escape(title, quote=False))
    legend = [go.Scatter(x=[None], y=[None], mode="markers", name=html.escape(labels[r], quote=False),
                         marker=dict(symbol="square", size=12, color=c), hoverinfo="skip")
              for r, c in zip(names, colours)]
    return go.Figure([
        go.Heatmap(
            z=best, zmin=-0.5, zmax=R - 0.5, colorscale=scale, showscale=False, hoverinfo="skip",
            # ".53": two digits fit a cell however narrow the grid (12 heads at 800 px: ~26 px a cell)
            text=[[f"{v:.2f}".lstrip("0") for v in row] for row in top], texttemplate="%{text}",
            textfont=dict(size=10 if H > 8 else 13),
        ),
        head_points(head, layer, H, f"layer %{{customdata[0]}}, head %{{customdata[1]}}: %{{text}}<br>{every}"
                    "<br>click to open<extra></extra>",
                    customdata=np.column_stack([layer, head, stack.reshape(R, -1).T]),  # (L·H, 2 + R)
                    text=[labels[names[i]] for i in best.ravel()]),
        *legend,
    ], layout=head_grid_layout(heading, L, H, "strongest role", top_margin, int(min(600, max(160, 40 * L)))))
