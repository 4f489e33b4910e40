"""The head-role atlas: a layer × head grid coloured by each head's strongest role."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

# One colour per role, in attnviz.analysis.roles.ROLES order (Plotly's qualitative "D3" palette).
ROLE_COLOURS = ("#1f77b4", "#d62728", "#ff7f0e", "#7f7f7f", "#2ca02c", "#9467bd", "#bcbd22", "#17becf")


def role_grid(scores: dict[str, np.ndarray], labels: dict[str, str], title: str) -> go.Figure:
    """Cells coloured by each head's strongest role among ``labels`` (role -> label, in order), its score
    printed in the cell; hovering shows every score. Each cell carries a clickable point, customdata
    [layer, head, each role's score]."""
    names = list(labels)
    stack = np.stack([np.asarray(scores[r], np.float64) for r in names])  # (R, L, H)
    R, L, H = stack.shape
    best = stack.argmax(0)  # (L, H)
    top = stack.max(0)
    colours = [ROLE_COLOURS[i % len(ROLE_COLOURS)] for i in range(R)]
    scale = [[edge, c] for i, c in enumerate(colours) for edge in (i / R, (i + 1) / R)]  # one band per role
    layer, head = np.divmod(np.arange(L * H), H)  # (L·H,)
    every = "<br>".join(f"{html.escape(labels[r], quote=False)} %{{customdata[{k + 2}]:.3f}}"
                        for k, r in enumerate(names))
    return go.Figure([
        go.Heatmap(
            z=best, zmin=-0.5, zmax=R - 0.5, colorscale=scale, text=np.round(top, 2), texttemplate="%{text}",
            colorbar=dict(title="strongest role", tickvals=list(range(R)),
                          ticktext=[html.escape(labels[r], quote=False) for r in names]),
            hoverinfo="skip",
        ),
        go.Scatter(
            x=head, y=layer, customdata=np.column_stack([layer, head, stack.reshape(R, -1).T]),  # (L·H, 2 + R)
            text=[labels[names[i]] for i in best.ravel()], mode="markers",
            marker=dict(size=max(8, 300 // H), symbol="square", color="rgba(0,0,0,0)"),
            selected=dict(marker=dict(opacity=0)), unselected=dict(marker=dict(opacity=0)),
            hovertemplate=f"layer %{{customdata[0]}}, head %{{customdata[1]}}: %{{text}}<br>{every}"
                          "<br>click to open<extra></extra>",
            showlegend=False,
        ),
    ], layout=dict(
        title=html.escape(title, quote=False),
        xaxis=dict(title="head", tickvals=list(range(H)), side="top", fixedrange=True, showgrid=False, zeroline=False),
        yaxis=dict(title="layer", tickvals=list(range(L)), autorange="reversed", fixedrange=True, showgrid=False,
                   zeroline=False),
        hovermode="closest", dragmode=False, margin=dict(l=10, r=10, t=90, b=10),
        height=int(min(700, max(260, 140 + 40 * L))),
    ))
