"""The "Share and export" box under a figure (a link to the view and the files behind it) and the chart
toolbar's image settings."""

from __future__ import annotations

import streamlit as st

from attnviz import export
from attnviz.ui.links import link


def chart_config(name: str, key: str = "share") -> dict:
    """``st.plotly_chart(config=…)``: the toolbar's camera saves ``name``.png (or .svg, as picked in
    ``downloads(key=key)``) at twice the screen resolution."""
    fmt = st.session_state.get(f"{key}_image_format", "PNG").lower()
    return {"toImageButtonOptions": {"format": fmt, "filename": name, "scale": 2}, "displaylogo": False}


def downloads(trace, fig, layer: int, head: int | None, stack: str = "encoder", key: str = "share") -> None:
    """The "Share and export" box under a figure: a link to this view and the files behind it.

    Files are built only when their button is clicked. ``stack`` picks the encoder, decoder or cross
    attention of an encoder–decoder trace; give each box on a page its own ``key``.
    """
    name = export.figure_name(trace.model, layer, head, "" if stack == "encoder" else stack)
    stem = export.file_stem(trace.model)
    with st.expander("Share and export"):
        st.caption("A link to this view (the button at its right copies it):")
        head_param = "mean" if head is None else head
        st.code(link(model=trace.model, text=trace.text, layer=layer, head=head_param), language=None, wrap_lines=True)
        st.radio("The camera button in the chart's toolbar saves", ["PNG", "SVG"], key=f"{key}_image_format",
                 horizontal=True)
        c1, c2, c3, c4 = st.columns(4)
        c1.download_button("This head (CSV)", lambda: export.matrix_csv(*export.head_matrix(trace, layer, head, stack)),
                           f"{name}.csv", "text/csv", key=f"{key}_head_csv", on_click="ignore")
        c2.download_button("Head statistics (CSV)", lambda: export.stats_csv(trace), f"{stem}_heads.csv",
                           "text/csv", key=f"{key}_stats_csv", on_click="ignore")
        c3.download_button("Whole trace (.npz)", lambda: export.to_npz(trace), f"{stem}.npz",
                           "application/octet-stream", key=f"{key}_npz", on_click="ignore")
        c4.download_button("Figure (HTML)", lambda: export.figure_html(fig), f"{name}.html", "text/html",
                           key=f"{key}_html", on_click="ignore",
                           help="A standalone page with plotly.js inside (~5 MB): opens offline, zooms and hovers.")
