"""Pieces every figure shares: safe labels and the probability colour scale (and its 256-level table)."""

from __future__ import annotations

import html
from functools import lru_cache

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from ..core.tokens import clean

PROB_SCALE = "Blues"  # attention weights: 0 white, 1 dark, fixed range 0–1


@lru_cache(maxsize=1)
def lut() -> np.ndarray:
    """(256, 3) uint8: the probability colour scale sampled at 256 levels (every image of weights: the mosaics,
    the long-text overview, the notebook)."""
    colours = plotly.colors.sample_colorscale(PROB_SCALE, np.linspace(0, 1, 256).tolist(), colortype="tuple")
    return np.rint(np.array(colours) * 255).astype(np.uint8)


def click_points(x, y, hovertemplate: str, size: int = 8, **more) -> go.Scatter:
    """Invisible square points, one on each cell of a grid, that take a click and show ``hovertemplate`` (plotly
    selects points, not heatmap cells or image pixels; a point with no hover takes no click); ``more``: customdata,
    text."""
    return go.Scatter(x=x, y=y, mode="markers", marker=dict(size=size, symbol="square", color="rgba(0,0,0,0)"),
                      selected=dict(marker=dict(opacity=0)), unselected=dict(marker=dict(opacity=0)),
                      hovertemplate=hovertemplate, showlegend=False, **more)


def head_points(x, y, n_heads: int, hovertemplate: str, **more) -> go.Scatter:
    """``click_points`` for a grid of heads, layer-major (``attnviz.ui.heads.clicked_head`` reads a click on
    point i as head i), sized to the grid's ``n_heads`` columns."""
    return click_points(x, y, hovertemplate, max(8, 300 // n_heads), **more)


def safe(labels) -> list[str]:
    """Escape user text for plotly, which renders <a>, <b>, <br> in labels as markup."""
    return [html.escape(str(s), quote=False) for s in labels]


# A heatmap's hover names each cell's raw query and key tokens as text of its own, one string a cell, which weighs
# more than the cell's weight: up to this many cells only (bench/RESULTS.md has the payloads).
RAW_CELLS = 64 * 64


def _raw(label) -> str | None:
    """The raw token a label was cleaned from (``attnviz.core.tokens.Label``), None where cleaning changed nothing
    (a position appended to a repeated label is no news)."""
    raw = getattr(label, "raw", None)
    return None if raw is None or clean(raw) == raw else raw


def token_note(token: str) -> str:
    """" · token Ġthe": a raw token, for a hover beside the text it reads as; empty where the two are the same."""
    return "" if clean(token) == token else f" · token {token}"


def raw_notes(labels) -> list[str]:
    """Escaped " · token Ġthe" for each label cleaned from a raw token, "" for one that reads as its token."""
    return [html.escape("" if _raw(s) is None else f" · token {_raw(s)}", quote=False) for s in labels]


def hover_names(labels) -> list[str]:
    """Escaped labels for a hover, each with the raw token it was cleaned from beside it where the two differ:
    "the · token Ġthe", "↵ · token Ċ"."""
    return [name + note for name, note in zip(safe(labels), raw_notes(labels))]


def cell_tokens(y_labels, x_labels, y_title: str = "query", x_title: str = "key") -> tuple[dict, str]:
    """(heatmap keywords, hover line) that name each cell's raw ``y_title`` and ``x_title`` tokens in its hover
    (``%{text}``); nothing where no label differs from its token or the heatmap has over RAW_CELLS cells."""
    rows, columns = [_raw(s) for s in y_labels], [_raw(s) for s in x_labels]
    if len(rows) * len(columns) > RAW_CELLS or all(r is None for r in rows + columns):
        return {}, ""
    rows = [html.escape(str(s) if r is None else r, quote=False) for s, r in zip(y_labels, rows)]
    columns = [html.escape(str(s) if r is None else r, quote=False) for s, r in zip(x_labels, columns)]
    text = [[f"{r} → {c}" for c in columns] for r in rows]  # (rows, columns)
    return dict(text=text), f"<br>raw {y_title} → {x_title}: %{{text}}"


# Plotly's line break, spelled unlike a plain "<br>" so our own breaks are told apart from user text that
# reached a label unescaped (the bad-input tests look for exactly that).
LINE_BREAK = "<br />"
WRAP_TITLE = 34  # characters a title line holds at most, so a phone-wide chart shows it whole
TITLE_LINE = 24  # pixels per title line (Streamlit's plotly theme draws titles at about 16 px)
TICK_CHAR = 8.0  # pixels per character of a tick label, a little more than the widest the theme draws
AXIS_TITLE = 40  # pixels an axis title and its standoff take beyond the tick labels
SLANT = 0.87  # sin 60°: the share of its length a tick label at −60° takes across its axis


# Side margins that already hold what plotly's automargin pushes out (tick labels with their axis title, a colour
# bar, a legend), so a figure is laid out once: where a margin is too small, plotly lays the whole figure out a
# second time (the Attention page's five charts at 20 tokens took 0.29 s to draw in Chromium with 10 px margins,
# 0.15 s with these). An estimate that falls short still shows everything, after that second pass.
NUMBERS_LEFT = 86  # an axis of short numbers and its title, left of the plot
NUMBERS_BELOW = 70  # the same under the plot
LEGEND_BELOW = 92  # an axis of numbers, its title and a one-row legend under the plot

SIDE_KEY = 124  # a colour bar and its labels, or a legend of short names, right of the plot
EDGE = 28  # a line chart's last tick label, centred on the plot's right edge
LABELS_BELOW = 20  # an axis of labels beside the plot: its last label, centred on the plot's bottom edge
KEY_BELOW = 112  # a horizontal colour bar under the plot (KEY_UNDER): its title, the bar and its tick labels
# A colour bar laid under the plot, leaving the plot the figure's whole width (a phone's 350 px chart left a 16-token
# head ~105 px beside a vertical bar); its title above it, from the plot's left edge.
# It spans 85% of the plot, so that its last tick label stays inside the figure.
KEY_UNDER = dict(orientation="h", thickness=12, len=0.85, x=0, xanchor="left", y=0, yanchor="top", ypad=16,
                 title=dict(side="top"))


def head_grid_layout(heading, n_layers: int, n_heads: int, legend: str, top_margin: int, rows_height: int) -> dict:
    """The layout of a layer × head grid of classes (roles, the atlas): heads across the top, layers down, the
    classes' legend below, no zoom; ``rows_height`` is the pixels the rows take."""
    return dict(
        title=heading,
        xaxis=dict(title="head", tickvals=list(range(n_heads)), side="top", fixedrange=True, showgrid=False,
                   zeroline=False),
        yaxis=dict(title="layer", tickvals=list(range(n_layers)), autorange="reversed", fixedrange=True,
                   showgrid=False, zeroline=False),
        legend=dict(title=legend, orientation="h", y=-0.02, yanchor="top", x=0, itemclick=False, itemdoubleclick=False),
        hovermode="closest", dragmode=False, margin=dict(l=NUMBERS_LEFT, r=10, t=top_margin, b=LEGEND_BELOW),
        height=top_margin + LEGEND_BELOW + rows_height,
    )


def right_of_key_under(top_labels) -> int:
    """The right margin beside a plot with KEY_UNDER and slanted ``top_labels``: the last label's reach past the
    plot's right edge (cos 60° of its length)."""
    return int(max(EDGE, longest_label(list(top_labels)[-1:]) * 0.5 + 12))


def longest_label(labels) -> int:
    """Pixels the longest of ``labels`` takes at most (TICK_CHAR a character)."""
    return max((len(str(s)) for s in labels), default=0) * TICK_CHAR


def labels_margin(labels, rotated: bool = False) -> int:
    """Room for an axis of text ``labels`` and its title: beside the plot, or under it with the labels at −60°."""
    return int(longest_label(labels) * (SLANT if rotated else 1.0) + AXIS_TITLE + 22)  # 22: padding, 10 px of margin


def wrap_title(text: str, width: int = WRAP_TITLE) -> str:
    """``text`` in lines of at most ``width`` characters joined by ``LINE_BREAK``: its " · " parts
    share a line while they fit, a longer part breaks at spaces (a longer word keeps a line of its own)."""
    lines, whole = [], False  # whole: the last line holds whole parts only, so another may join it
    for part in text.split(" · "):
        if whole and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += f" · {part}"
            continue
        whole = len(part) <= width
        line = ""
        for word in part.split(" "):
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return LINE_BREAK.join(lines)


def top_title(text: str, top_labels=None, rotated: bool = True, top_axis: bool = True) -> tuple[dict, int]:
    """(layout title, top margin): the title, wrapped, at the very top of the figure, and under it room for
    a top x axis's tick labels (``top_labels``; None: short numbers) and axis title, so no text lands on
    other text however long the labels are. ``top_axis=False``: room for the title only."""
    text = wrap_title(text) if text else ""
    if not top_axis:
        ticks = 0
    elif top_labels is None or not len(top_labels):
        ticks = 26 + AXIS_TITLE
    else:
        ticks = longest_label(top_labels) * (SLANT if rotated else 0.0) + 16 + AXIS_TITLE
    lines = text.count(LINE_BREAK) + 1 if text else 0
    # Anchored by its bottom line just above the axis's labels: plotly stacks extra lines upwards.
    # The first line sits just above the axis's labels and plotly puts further lines under it: lift it by them.
    title = dict(text=text, x=0, xref="container", xanchor="left", y=1, yref="paper", yanchor="bottom",
                 pad=dict(b=int(ticks + (lines - 1) * TITLE_LINE + 10), l=10), automargin=False)
    return title, int(22 + lines * TITLE_LINE + ticks)


def token_grid_layout(title: str, y_labels, x_labels, y_title: str = "query", x_title: str = "key") -> dict:
    """The layout of a heatmap with (escaped) text labels on both axes: ``x_labels`` across the top, ``y_labels`` down
    the side, first on top; the title wrapped above the top labels; 14 px a row (200–800)."""
    title, top = top_title(title, x_labels)
    return dict(
        title=title,
        xaxis=dict(title=x_title, type="category", tickangle=-60, side="top"),
        yaxis=dict(title=y_title, type="category", autorange="reversed"),
        margin=dict(l=10, r=10, t=top, b=10),
        height=top + min(800, 200 + 14 * len(y_labels)),
    )
