"""attnviz — paste text, pick a model, see what every layer and head attends to.

Run with ``streamlit run app.py``. This file names the pages (the home page is "Home", not the
file's name) and draws the home page; the other views live in pages/.
"""

from pathlib import Path

import streamlit as st

from attnviz.export import figure_name
from attnviz.figures.attention import attention_heatmap
from attnviz.tokens import labels
from attnviz.ui.frame import frame, layer_head
from attnviz.ui.share import chart_config, downloads

PAGES = sorted(Path(__file__).parent.glob("pages/[0-9]*_*.py"))


def home() -> None:
    f = frame("Home")
    st.title("attnviz")
    st.markdown(
        "Paste text in the sidebar, choose a model, and see what each layer and head attends to. "
        "The pages on the left go deeper: every head at a glance, positional encodings, norms, "
        "head analyses, and training the seed's models."
    )
    trace = f.trace if f.trace.kind != "encoder-decoder" else f.trace.encoder
    layer, head = layer_head(trace.n_layers, trace.n_heads)
    names = labels(trace.tokens)
    fig = attention_heatmap(trace.attentions[layer, head], names, names, f"layer {layer}, head {head}")
    st.plotly_chart(fig, key="home_heatmap", config=chart_config(figure_name(trace.model, layer, head)))
    downloads(f.trace, fig, layer, head)


st.navigation([st.Page(home, title="Home", default=True),
               *(st.Page(str(p.relative_to(Path(__file__).parent))) for p in PAGES)]).run()
