"""The figures the attention page sends for one trace, and their bytes as Streamlit sends them."""

from __future__ import annotations

import plotly.io

import common  # noqa: F401  (puts the repo root on sys.path)
from attnviz.figures.attention import attention_heatmap
from attnviz.tokens import labels


def page_figures(trace, layer: int = 0, head: int = 0) -> dict:
    """name -> go.Figure: the overview of every head and the detail of one head.

    Prefers the attention page's own list (``bench/attention_payload.py``) so the bench measures
    exactly what the page sends; otherwise builds the overview and the detail from attnviz.figures.
    """
    try:
        from attention_payload import page_figures as from_page
    except ImportError:
        from_page = None
    if from_page is not None:
        return dict(from_page(trace))
    names = labels(trace.tokens)
    figs = {}
    overview = _overview_builder()
    if overview is not None:
        figs["overview"] = overview(trace)
    figs["detail"] = attention_heatmap(trace.attentions[layer, head], names, names, f"layer {layer}, head {head}")
    return figs


def _overview_builder():
    """The all-heads overview from attnviz/figures/overview.py, if that module exists yet."""
    try:
        from attnviz.figures import overview
    except ImportError:
        return None
    return getattr(overview, "overview_figure", None) or getattr(overview, "head_grid", None)


def payload(fig) -> int:
    """Bytes of the JSON spec ``st.plotly_chart`` sends for ``fig``."""
    return len(plotly.io.to_json(fig, validate=False).encode())
