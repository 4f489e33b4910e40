"""The sidebar's display options, the same on every page that draws a head's weights (Home, Attention), the
token window of the pages that draw a text's weights cell by cell beside other figures (Norms, Compare), and where
every chart's toolbar sits on a phone (MODEBAR_CSS)."""

from __future__ import annotations

import streamlit as st

from attnviz.figures.explorer import CELLS
from attnviz.figures.view import Options
from attnviz.ui.links import linked_number

# Plotly draws its toolbar (the modebar: save as image, zoom, pan, …) over the top right corner of a chart while the
# pointer is on it (on a phone, after a tap), and a phone-wide chart's title runs under it. Up to PHONE the toolbar
# sits in a strip of its own above the chart instead (Streamlit's own toolbar, full screen, sits above that), so
# the title stays whole and every button within reach. Every page's CSS (ui.frame.LAYOUT_CSS) carries it.
PHONE = 640  # px of window width
MODEBAR_STRIP = 30  # px: the toolbar's height (plotly's buttons are 22 px with 4 px of padding about them)
MODEBAR_CSS = (
    f"@media (max-width: {PHONE}px) {{"
    f" .stPlotlyChart {{ padding-top: {MODEBAR_STRIP}px; }}"
    f" .stPlotlyChart .modebar-container {{ top: -{MODEBAR_STRIP}px !important; }} }}"
)


def display_options() -> tuple[Options, bool]:
    """Draw the "Display" controls in the sidebar, bound to the URL; returns (options, full colour range)."""
    with st.sidebar:
        st.subheader("Display")
        hide = st.checkbox("Hide special tokens", key="hide_special", bind="query-params",
                           help="Drop [CLS], [SEP], <s>, … from both axes.")
        renorm = st.checkbox("Renormalise rows", True, key="renorm", bind="query-params", disabled=not hide,
                             help="After hiding special tokens, rescale each row to sum to 1 again.")
        merge = st.checkbox("Merge subwords into words", key="merge", bind="query-params",
                            help="Sum over a word's pieces as keys, average over them as queries; rows still sum to 1.")
        threshold = st.slider("Hide weights below", 0.0, 0.5, 0.0, 0.01, key="threshold", bind="query-params")
        log_scale = st.checkbox("Log colour scale", key="log_scale", bind="query-params",
                                help="Colours follow log10(weight) from 0.0001 to 1, so small weights show.")
        full_range = st.checkbox(
            "Colours from 0 to 1", key="full_range", bind="query-params", disabled=log_scale,
            help="Off: each heatmap's colours run up to that head's own high quantile (the range is on its "
                 "colour bar), so a head that spreads its weight over a long text is not blank. On: the fixed "
                 "0–1 scale, the same for every head.")
    return Options(hide, renorm, merge, threshold, log_scale), full_range


def token_window(n: int, key: str, what: str = "tokens", where=None) -> slice:
    """The tokens a page's heatmaps draw: all ``n`` while they fit CELLS, else a window of CELLS from a start the
    user picks (bound to the URL under ``key``), said in a caption. Every weight drawn is the trace's own."""
    if n <= CELLS:
        return slice(0, n)
    where = where or st
    start = int(linked_number(where, f"First of the {CELLS} {what} drawn", 0, n - CELLS, key, value=0,
                              step=CELLS // 4, help=f"The heatmaps draw {CELLS} of the {n:,} {what} cell by cell, "
                              "with their exact weights on hover; this moves the window."))
    where.caption(f"Drawn: {what} {start:,}–{start + CELLS - 1:,} of {n:,}, cell by cell; the number above moves "
                  "the window.")
    return slice(start, start + CELLS)
