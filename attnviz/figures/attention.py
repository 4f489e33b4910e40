"""Attention heatmaps, a token's attention as bars, and every figure of the attention explorer."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from .view import StackView, colour_position, colour_top, focus_weights, head_weights, log_ticks
from .analysis import head_map
from .explorer import head_name
from .common import (KEY_BELOW, KEY_UNDER, LABELS_BELOW, LINE_BREAK, NUMBERS_LEFT, PROB_SCALE, SIDE_KEY, labels_margin,
                     cell_tokens, hover_names, right_of_key_under, safe, top_title)
from .overview import MASK_COLOUR, head_grid

# Above this many cells a log-scale heatmap sends its colours as uint8 (steps of 1/255) beside the float32
# weights that hover reads. A linear heatmap sends only the float32 weights: uint8 colours plus weights for
# hover to three significant digits would cost more (at 512×512, 1.84 MB against 1.4 MB of JSON).
QUANTISE_ABOVE = 128 * 128


def weights_heatmap(
    w: np.ndarray, y_labels, x_labels, title: str = "", *, y_title: str = "query", x_title: str = "key",
    masked: np.ndarray | None = None, log_scale: bool = False, full_range: bool = False, height: int | None = None,
    key_below: bool = False,
) -> go.Figure:
    """A (rows, columns) heatmap of weights: colours from 0 up to the weights' own high quantile
    (``colour_top``, written on the colour bar), 0–1 with ``full_range``, or log10 with ``log_scale``.

    Labels must be unique per position (``attnviz.core.tokens.labels``) since the axes are categorical.
    ``masked`` (same shape, True on a suffix of each row) is drawn grey as "masked: future tokens".
    Hover shows the weight to three significant digits, also when colours are sent as uint8. ``height``: pixels
    under the title and the top labels (default: 14 a row, 200–800). ``key_below``: the colour bar lies under the
    plot, leaving it the figure's whole width (a phone's 350 px left a 16-token head ~105 px beside the bar).
    """
    w = np.asarray(w, np.float32)
    if w.shape != (len(y_labels), len(x_labels)):
        raise ValueError(f"weights are {w.shape} but there are {len(y_labels)} × {len(x_labels)} labels")
    top = 1.0 if full_range or log_scale else colour_top(w, masked)
    customdata, weight, zmax = None, "%{z:.3g}", top
    z = w  # the weights themselves: zmax sets the colour range and hover reads them exactly
    if log_scale:  # the colour is the log; hover reads the weight sent beside it
        customdata, weight, zmax = w, "%{customdata:.3g}", 1
        z = colour_position(w, True)
        if w.size > QUANTISE_ABOVE:
            z, zmax = np.rint(z * 255).astype(np.uint8), 255
    if log_scale:
        ticks, text = log_ticks()
        bar_title = "weight (log)"
    else:
        ticks = [0, 0.25, 0.5, 0.75, 1]
        text = [f"{t * top:.3g}" for t in ticks]
        if top < 1:
            text[-1] = f"≥ {text[-1]}"  # larger weights share the darkest colour
        bar_title = "weight" if top == 1 else f"weight{LINE_BREAK}0–{top:.3g}"
    x_ticks, y_ticks = safe(x_labels), safe(y_labels)
    title, top = top_title(title, x_ticks)
    layout = dict(
        title=title,
        xaxis=dict(title=x_title, type="category", tickangle=-60, side="top", automargin=True),
        yaxis=dict(title=y_title, type="category", autorange="reversed", automargin=True),
        margin=dict(l=labels_margin(y_ticks), r=right_of_key_under(x_ticks) if key_below else SIDE_KEY, t=top,
                    b=LABELS_BELOW),
        height=top + (min(800, 200 + 14 * len(y_labels)) if height is None else height),
    )
    bar = dict(title=bar_title, tickvals=[t * zmax for t in ticks], ticktext=text)
    caption = masked is not None and np.asarray(masked).any()
    if caption:
        layout |= _mask_layout(np.asarray(masked, bool), layout["margin"])
    if key_below:  # in the bottom margin, under the mask's caption when there is one
        bar |= KEY_UNDER | dict(ypad=KEY_UNDER["ypad"] + (26 if caption else 0),
                                title=dict(text=bar_title.replace(LINE_BREAK, " "), side="top"))
        layout["margin"] = layout["margin"] | dict(b=layout["margin"]["b"] + KEY_BELOW - LABELS_BELOW)
        layout["height"] += KEY_BELOW - LABELS_BELOW
        layout["xaxis"]["tickfont"] = dict(size=11)  # plotly labels every token while each has 13 px (12 px: 14)
    raw, line = cell_tokens(y_labels, x_labels, y_title, x_title)
    return go.Figure(
        go.Heatmap(
            z=z,
            x=x_ticks,
            y=y_ticks,
            customdata=customdata,
            zmin=0,
            zmax=zmax,
            colorscale=PROB_SCALE,
            colorbar=bar,
            hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>weight {weight}{line}<extra></extra>",
            **raw,
        ),
        layout=layout,
    )


def _mask_layout(masked: np.ndarray, margin: dict) -> dict:
    """Layout that greys out each row's masked suffix with one staircase polygon and says what it is below the
    plot, with room for that line under ``margin``."""
    Tq, Tk = masked.shape
    first = Tk - masked.sum(1)  # (Tq,) first masked column of each row
    corners = [(Tk - 0.5, -0.5), (Tk - 0.5, Tq - 0.5)]
    for r in range(Tq - 1, -1, -1):
        corners += [(first[r] - 0.5, r + 0.5), (first[r] - 0.5, r - 0.5)]
    path = "M" + "L".join(f"{x:g},{y:g}" for x, y in corners) + "Z"
    return dict(
        shapes=[dict(type="path", path=path, fillcolor=MASK_COLOUR, line_width=0, layer="above")],
        annotations=[dict(text="grey: masked (future tokens)", xref="paper", yref="paper", x=1, xanchor="right", y=0,
                          yanchor="top", yshift=-4, showarrow=False, font=dict(color="#888"))],
        margin=margin | dict(b=margin["b"] + 26),  # annotations do not push margins: make room
    )


def attention_heatmap(attn: np.ndarray, q_labels, k_labels, title: str = "", **options) -> go.Figure:
    """One head's (Tq, Tk) weights: rows are queries, columns keys, colours up to the head's own high quantile.

    ``options``: ``masked`` (causal mask), ``log_scale`` and ``full_range``, as in ``weights_heatmap``.
    """
    return weights_heatmap(attn, q_labels, k_labels, title, **options)


def focus_bars(weights: np.ndarray, labels, title: str = "", axis_title: str = "key") -> go.Figure:
    """One token's weights over the other tokens as bars."""
    weights = np.asarray(weights, np.float32)
    if weights.shape != (len(labels),):
        raise ValueError(f"{weights.size} weights but {len(labels)} labels")
    title, top = top_title(title, top_axis=False)
    names = safe(labels)
    return go.Figure(
        go.Bar(
            x=names, y=weights, marker_color="#2171b5", customdata=hover_names(labels),
            hovertemplate=f"{axis_title} %{{customdata}}<br>weight %{{y:.3g}}<extra></extra>",
        ),
        layout=dict(
            title=title, height=290 + top,
            margin=dict(l=NUMBERS_LEFT, r=10, t=top, b=labels_margin(names, rotated=True)),
            xaxis=dict(title=axis_title, type="category", tickangle=-60),
            yaxis=dict(title="weight", rangemode="tozero"),
        ),
    )


def explorer_figures(
    view: StackView, tiles: np.ndarray, layer: int, head: int | None, focus: int | None = None, direction: str = "to",
    log_scale: bool = False, full_range: bool = False,
) -> dict[str, go.Figure]:
    """name -> figure for one stack: ``overview`` (every head, from the stack's overview ``tiles`` (L, H, ≤64, ≤64)),
    ``detail`` (one head, or the layer's mean when ``head`` is None) and, for a ``focus`` index, that token's weights
    as bars (``focus``) and per head (``focus_heads``). ``view`` is layer ``layer`` alone (``layer_view``: ``attn``
    (1, H, Tq, Tk)). Colours run up to each head's own high quantile, or 0–1 with ``full_range``.
    """
    n_heads = view.attn.shape[1]
    name = head_name(layer, head, n_heads)
    scale = dict(log_scale=log_scale, full_range=full_range)
    figs = {
        "overview": head_grid(tiles, view.masked, (layer, head), **scale),
        "detail": attention_heatmap(head_weights(view, 0, head), view.q_labels, view.k_labels, name,
                                    masked=view.masked, **scale),
    }
    if focus is None:
        return figs
    token, along, axis = (view.q_labels, view.k_labels, "key") if direction == "to" else (view.k_labels, view.q_labels, "query")
    word = token[focus] if len(token[focus]) <= 20 else token[focus][:19] + "…"  # titles stay phone-wide
    quoted = f"“{html.escape(word, quote=False)}”"
    what = f"what {quoted} attends to" if direction == "to" else f"what attends to {quoted}"
    figs["focus"] = focus_bars(focus_weights(head_weights(view, 0, head), focus, direction), along, f"{what} · {name}", axis)
    figs["focus_heads"] = weights_heatmap(
        focus_weights(view.attn[0], focus, direction), [str(h) for h in range(n_heads)], along,
        f"{what} · every head of layer {layer}", y_title="head", x_title=axis, height=80 + 22 * n_heads, **scale,
    )
    return figs


def link_grid(values: np.ndarray, query: str, key: str) -> go.Figure:
    """Which heads link two tokens: ``values`` (L, H), the weight the query labelled ``query`` gives the key
    labelled ``key`` in every head, as one layer × head map (colours from 0 to the largest), each cell a point that
    opens its head."""
    top = max(float(values.max()), 1e-6)
    title = f"how much “{query}” attends to “{key}” · click a head to open it"
    return head_map(values, title, (0.0, top), value_name="weight")
