"""The sidebar's display options, the same on every page that draws a head's weights (Home, Attention)."""

from __future__ import annotations

import streamlit as st

from attnviz.figures.view import Options


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
