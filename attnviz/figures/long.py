"""Figures for long texts: every head as one PNG mosaic, a head at block resolution, a window cell by cell,
a token's reach over positions, sinks and distance profiles. Each stays small at any length: images and
pooled blocks, never T×T cells; lines send positions implicitly (x0, dx)."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.utils import image_array_to_data_uri

from ..core.tokens import clean, labels
from .common import (EDGE, KEY_BELOW, KEY_UNDER, LEGEND_BELOW, NUMBERS_BELOW, NUMBERS_LEFT, PROB_SCALE, lut,
                     SIDE_KEY, cell_tokens, head_points, labels_margin, right_of_key_under, safe, token_note, top_title,
                     wrap_title)

QUANTILE = 99.5  # colour ranges run up to this percentile of what is drawn, written on the figure
WINDOW_TICKS = 64  # a window labels at most this many tokens down its query axis (WINDOW_ROW px a label)…
WINDOW_KEY_TICKS = 16  # …and this many along its key axis: slanted labels need ~12 px each (~200 px at 800)
WINDOW_ROW = 15  # pixels per labelled row of a window: a 12 px label and a gap (at 12 px a row, 64 labels piled up)
SHADED = 400  # the most tokens the reach text shades
REDUCES = {"max": "block max", "mean": "block mean"}


def colour_top(values: np.ndarray) -> float:
    """The top of a colour range: the QUANTILE-th percentile of ``values`` (at least 1e-6)."""
    return max(float(np.percentile(values, QUANTILE)), 1e-6)


def _levels(x: np.ndarray, top: float) -> np.ndarray:
    return np.rint(np.clip(np.asarray(x, np.float32) / top, 0, 1) * 255).astype(np.uint8)


def head_mosaic(pooled: np.ndarray, reduce: str, n_tokens: int, block: int, selected: tuple | None = None) -> go.Figure:
    """Every head of ``pooled`` (L, H, s, s; blocks of ``block`` tokens) as one image, one invisible clickable point per head
    (``customdata = [layer, head]``); ``selected`` (layer, head or None for the layer) is outlined."""
    L, H, s, _ = pooled.shape
    top = colour_top(pooled)
    pitch = s + 1  # a tile and its white gap
    image = np.full((L, H, pitch, pitch, 3), 255, np.uint8)
    image[:, :, :s, :s] = lut()[_levels(pooled, top)]
    image = image.transpose(0, 2, 1, 3, 4).reshape(L * pitch, H * pitch, 3)[:-1, :-1]  # (L·pitch−1, H·pitch−1, 3)
    layer, head = np.divmod(np.arange(L * H), H)  # (L·H,)
    centre = (s - 1) / 2
    shapes = []
    if selected is not None:
        l, h = selected
        x0, x1 = (-1, H * pitch - 1) if h is None else (h * pitch - 1, h * pitch + s)
        shapes.append(dict(type="rect", x0=x0, x1=x1, y0=l * pitch - 1, y1=l * pitch + s,
                           line=dict(color="#d62728", width=2)))
    # The title wrapped (one line was cut at 1280 px: "… (99.5th percentile) · c"), and pixels need not be square:
    # the mosaic fills whatever width the page gives it (a phone's was ~170 × 115 px under a blank band), as the
    # short texts' overview does.
    what = f"all {L} layers × {H} heads over {n_tokens:,} tokens".replace(" ", "\u00a0")  # one line, wrapped or not
    title, top_margin = top_title(f"{what} · {REDUCES[reduce]} of {block:,}-token blocks · dark: {top:.3g} or more "
                                  f"({QUANTILE}th pct) · click a head")
    return go.Figure([
        go.Image(source=image_array_to_data_uri(image), hoverinfo="skip"),
        head_points(head * pitch + centre, layer * pitch + centre, H,
                    "layer %{customdata[0]}, head %{customdata[1]}<br>click to open<extra></extra>",
                    customdata=np.stack([layer, head], 1)),  # (L·H, 2)
    ], layout=dict(
        title=title,
        xaxis=dict(title="head", tickvals=np.arange(H) * pitch + centre, ticktext=[str(h) for h in range(H)], side="top",
                   fixedrange=True, showgrid=False, zeroline=False, range=[-0.5, image.shape[1] - 0.5]),
        yaxis=dict(title="layer", tickvals=np.arange(L) * pitch + centre, ticktext=[str(l) for l in range(L)],
                   fixedrange=True, showgrid=False, zeroline=False, scaleanchor=False,
                   range=[image.shape[0] - 0.5, -0.5]),
        shapes=shapes, hovermode="closest", hoverdistance=-1, dragmode=False,
        margin=dict(l=NUMBERS_LEFT, r=10, t=top_margin, b=10),
        height=top_margin + int(min(700, max(200, 40 + 900 * L / H))),
    ))


def _colour_bar(top: float) -> dict:
    ticks = [0, top / 2, top]
    return dict(title="weight", tickvals=ticks, ticktext=[f"{t:.3g}" for t in ticks[:-1]] + [f"≥ {top:.3g}"])


def blocks_heatmap(pooled: np.ndarray, starts: np.ndarray, block: int, n_tokens: int, title: str, reduce: str,
                   window: tuple[int, int] | None = None) -> go.Figure:
    """One head at block resolution: ``pooled`` (s, s) with blocks of ``block`` tokens beginning at ``starts`` (s,),
    axes in token positions; ``window`` (start, stop) is outlined. A box dragged on it is a selection."""
    top = colour_top(pooled)
    shapes = [] if window is None else [dict(type="rect", x0=window[0], x1=window[1], y0=window[0], y1=window[1],
                                             line=dict(color="#d62728", width=2))]
    return go.Figure([
        go.Heatmap(
            z=np.asarray(pooled, np.float32), x=starts, y=starts, zmin=0, zmax=top, colorscale=PROB_SCALE,
            colorbar=_colour_bar(top),
            hovertemplate=f"queries from %{{y}} · keys from %{{x}}<br>{REDUCES[reduce]} %{{z:.4g}}<extra></extra>",
        ),
        # Heatmaps are not selectable in plotly: two invisible corner points let a dragged box be reported.
        go.Scatter(x=[0, n_tokens], y=[0, n_tokens], mode="markers", marker=dict(opacity=0), hoverinfo="skip",
                   showlegend=False),
    ], layout=dict(
        title=dict(text=f"{title} · {REDUCES[reduce]} of {block:,}-token blocks",  # one line overflowed a column
                   subtitle=dict(text=wrap_title(f"key positions across · colours up to the {QUANTILE}th "
                                                 "percentile · drag a box to zoom", 56))),  # names the key axis:
        # its own title overlapped this; wrapped, so a phone shows it whole
        shapes=shapes,
        dragmode="select",
        xaxis=dict(side="top", range=[0, n_tokens], ticklabeloverflow="allow"),  # see window_heatmap
        yaxis=dict(title="query position", autorange="reversed", ticklabeloverflow="allow"),
        # The top margin holds the title and subtitle above the key axis's labels.
        margin=dict(l=NUMBERS_LEFT, r=SIDE_KEY, t=110, b=10), height=580,
    ))


def window_heatmap(w: np.ndarray, start: int, tokens, title: str) -> go.Figure:
    """Exact weights of a window (n, n) of queries and keys ``start … start+n−1``, token labels as tick text."""
    n = w.shape[0]
    pos = np.arange(start, start + n)

    def ticks(most: int):
        """(positions, labels): every k-th token of the window, so that at most ``most`` are labelled."""
        at = pos[::max(1, -(-n // most))]
        return at, safe(f"{clean(tokens[i])} ·{i}" for i in at)

    (yticks, ytext), (xticks, xtext) = ticks(WINDOW_TICKS), ticks(WINDOW_KEY_TICKS)
    top = colour_top(w)
    height = 250 + KEY_BELOW + max(300, WINDOW_ROW * len(yticks))  # the top margin, the colour bar, the rows
    shown = labels(tokens[start:start + n])
    raw, line = cell_tokens(shown, shown)
    return go.Figure(go.Heatmap(
        z=np.asarray(w, np.float32), x=pos, y=pos, zmin=0, zmax=top, colorscale=PROB_SCALE,
        # Under the plot: beside it, the bar took a third of an 800 px window.
        colorbar=_colour_bar(top) | KEY_UNDER | dict(title=dict(text="weight", side="top")),
        hovertemplate=f"query %{{y}} · key %{{x}}<br>weight %{{z:.5f}}{line}<extra></extra>", **raw,
    ), layout=dict(
        # The title sits 65 px down (Streamlit's chart toolbar hides the top strip) and names the key axis itself:
        # the slanted key labels take the rest of the top margin, where an axis title and the title overlapped them.
        title=dict(text=f"{title} · tokens {start:,}–{start + n - 1:,}, exact weights",
                   subtitle=dict(text="keys across the top, queries down the side"), y=1 - 65 / height, yanchor="top"),
        # ticklabeloverflow "allow": plotly's default on a numeric axis measures every label's box on each draw to
        # hide those past the figure's edge (0.44 s of a zoom's 1 s in Chromium); the margins already fit them.
        xaxis=dict(side="top", tickvals=xticks, ticktext=xtext, tickangle=-60, ticklabeloverflow="allow"),
        yaxis=dict(title="query", tickvals=yticks, ticktext=ytext, autorange="reversed", ticklabeloverflow="allow"),
        margin=dict(l=labels_margin(ytext), r=right_of_key_under(xtext), t=250, b=KEY_BELOW), height=height,
    ))


def reach_lines(row: np.ndarray, col: np.ndarray, focus: int, label: str, title: str) -> go.Figure:
    """What token ``focus`` attends to (``row``, over keys) and what attends to it (``col``, over queries); a click on
    either line selects that position.

    SVG lines, not WebGL: plotly simplifies the path (16,384 noisy points drew as ~4,200, in 0.1–0.25 s), while a
    browser without a GPU draws WebGL in software (3.2 s for this chart at 16,384 points in headless Chromium).
    plotly selects points of a trace with markers only: each line has invisible ones, of which it draws just one."""
    clickable = dict(mode="lines+markers", marker=dict(size=1, opacity=0, maxdisplayed=1),
                     selected=dict(marker=dict(opacity=0)), unselected=dict(marker=dict(opacity=0)))
    heading, top = top_title(f"{title} · “{html.escape(label, quote=False)}” at {focus:,}", top_axis=False)  # wrapped
    return go.Figure([
        go.Scatter(y=np.asarray(row, np.float32), x0=0, dx=1, name="it attends to (its row)",
                   hovertemplate="key %{x}: %{y:.4g}<extra>attends to</extra>", **clickable),
        go.Scatter(y=np.asarray(col, np.float32), x0=0, dx=1, name="attends to it (its column)",
                   hovertemplate="query %{x}: %{y:.4g}<extra>attends to it</extra>", **clickable),
    ], layout=dict(
        title=heading,
        xaxis=dict(title="position", range=[0, max(len(row), len(col), 2) - 1]),  # markers would pad an autorange
        yaxis=dict(title="weight", rangemode="tozero"), height=340,
        margin=dict(l=NUMBERS_LEFT, r=EDGE, t=top, b=LEGEND_BELOW),
        legend=dict(orientation="h", y=-0.25),
        dragmode="zoom",  # Streamlit makes a chart that takes clicks pan: a drag still zooms, as it did
        # A click takes the hovered point. "closest" ties every point within 3 px (21 positions a pixel at 16,384
        # tokens) and takes the first; "x" takes the position under the mouse, on both lines.
        hovermode="x",
        shapes=[dict(type="line", x0=focus, x1=focus, xref="x", y0=0, y1=1, yref="y domain",  # the token's position
                     line=dict(color="#d62728", dash="dot"))],
    ))


def reach_html(tokens, word_ids, weights: np.ndarray, focus: int, height: int = 320, floor: float = 0.03,
               most: int = SHADED) -> str:
    """The whole text as escaped HTML in a scrolling box, shaded by ``weights`` (T,) relative to their largest.
    Only the ``most`` largest weights of at least ``floor`` of the largest are shaded, the rest stay plain text,
    so 16,384 tokens stay ~0.2 MB; ``focus`` is outlined. Every shaded token's title is its weight."""
    weights = np.asarray(weights, np.float32)
    top = max(float(weights.max()), 1e-30)
    shaded = np.zeros(len(weights), bool)
    strongest = np.argsort(-weights, kind="stable")[:most]
    shaded[strongest[weights[strongest] >= floor * top]] = True
    parts = []
    for i, t in enumerate(tokens):
        glued = i > 0 and word_ids[i] >= 0 and word_ids[i] == word_ids[i - 1]
        space = " " if i > 0 and not glued else ""
        piece = html.escape(clean(t))
        title = html.escape(f"{weights[i]:.4g}{token_note(t)}")
        if i == focus:
            parts.append(f'{space}<mark style="outline:2px solid #d62728;font-weight:bold;background:none;color:inherit" title="{title}">{piece}</mark>')
        elif shaded[i]:
            a = float(weights[i]) / top
            dark = ";color:#fff" if a > 0.55 else ""
            parts.append(f'{space}<span title="{title}" style="background:#2171b5{round(a * 255):02x}{dark}">'
                         f"{piece}</span>")
        else:
            parts.append(space + piece)
    return (f'<div style="max-height:{height}px;overflow-y:auto;line-height:1.9;border:1px solid #ddd;'
            f'padding:6px;white-space:pre-wrap">' + "".join(parts) + "</div>")


def sink_grid(share: np.ndarray, threshold: float, what: str = "the first token") -> go.Figure:
    """(L, H) share of each head's weight on ``what``; heads at or above ``threshold`` are marked ●."""
    L, H = share.shape
    marks = np.where(share >= threshold, "●", "")
    title, top = top_title(f"share of attention to {html.escape(what, quote=False)} · ● at least {threshold:.0%}: "
                           "an attention sink (Xiao et al. 2023)")
    return go.Figure(go.Heatmap(
        z=np.asarray(share, np.float32), x=np.arange(H), y=np.arange(L), zmin=0, zmax=1, colorscale=PROB_SCALE,
        text=marks, texttemplate="%{text}", colorbar=dict(title="share"),
        hovertemplate=f"layer %{{y}}, head %{{x}}<br>%{{z:.1%}} of its weight on {what}<extra></extra>",
    ), layout=dict(
        title=title,
        xaxis=dict(title="head", tickvals=list(range(H)), side="top"),
        yaxis=dict(title="layer", tickvals=list(range(L)), autorange="reversed"),
        height=top + int(min(620, 80 + 36 * L)), margin=dict(l=NUMBERS_LEFT, r=SIDE_KEY, t=top, b=10),
    ))


def received_line(received: np.ndarray, n_queries: int, title: str) -> go.Figure:
    """The share of all weight each key position receives (``received`` (Tk,) summed over ``n_queries`` rows)."""
    heading, top = top_title(f"{title} · share of the weight each key receives", top_axis=False)  # wrapped
    return go.Figure(go.Scatter(y=np.asarray(received, np.float32) / n_queries, x0=0, dx=1, mode="lines",
                                hovertemplate="key %{x}: %{y:.3%} of the weight<extra></extra>"),
                     layout=dict(title=heading,
                                 xaxis=dict(title="key position"), yaxis=dict(title="share", type="log"), height=300,
                                 margin=dict(l=NUMBERS_LEFT, r=EDGE, t=top, b=NUMBERS_BELOW)))


def distance_profile(distance: np.ndarray, labels: list[str], title: str, selected: int | None = None) -> go.Figure:
    """(H, bins) share of each head's weight by query–key distance, one line per head over log bins.

    The bins' labels are slanted, with room below for the longest: a long text's dozen ("4,096–8,191") did not fit
    flat beside each other in a narrow window, and plotly slanting them itself laid the chart out twice."""
    below = NUMBERS_BELOW + 5 * max(map(len, labels), default=0)  # a slanted label's height: ~5 px a character
    heading, top = top_title(f"{title} · how weight falls off with query–key distance (log bins)", top_axis=False)
    return go.Figure([
        go.Scatter(x=np.arange(len(labels)), y=np.asarray(d, np.float32), mode="lines+markers", name=f"head {h}",
                   line=dict(width=4 if h == selected else 1.5),
                   hovertemplate=f"head {h} · distance %{{customdata}}<br>%{{y:.1%}}<extra></extra>",
                   customdata=labels)
        for h, d in enumerate(distance)
    ], layout=dict(
        title=heading,  # wrapped
        xaxis=dict(title="distance |query − key| in tokens", tickvals=list(range(len(labels))), ticktext=labels,
                   tickangle=-45),
        yaxis=dict(title="share of the weight", rangemode="tozero"), height=360 + below - NUMBERS_BELOW,
        margin=dict(l=NUMBERS_LEFT, r=SIDE_KEY, t=top, b=below),
    ))
