"""attnviz — paste text, pick a model, see what every layer and head attends to.

Run with ``streamlit run app.py``. This file names the pages (the home page is "Home", not the
file's name) and draws the home page; the other views live in pages/.
"""

import os
from pathlib import Path

# Huge pages for torch's tensors of 2 MB and more: a 512-token forward keeps ~75 MB of attention weights, and
# faulting them in 4 KB pages cost ~15% of the forward (bench/RESULTS.md). torch reads this once, at its first
# allocation, so the app's entry sets it before anything imports torch; the library leaves the environment alone.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import streamlit as st  # noqa: E402

from attnviz.export import figure_name  # noqa: E402
from attnviz.figures.attention import attention_heatmap  # noqa: E402
from attnviz.ui.display import display_options  # noqa: E402
from attnviz.ui.frame import frame, layer_head  # noqa: E402
from attnviz.ui.readable import model_output  # noqa: E402
from attnviz.ui.downloads import chart_config, downloads  # noqa: E402
from attnviz.figures.view import head_view  # noqa: E402

PAGES = sorted(Path(__file__).parent.glob("pages/[0-9]*_*.py"), key=lambda p: int(p.name.split("_")[0]))  # 2 before 10
HIDDEN = {"9_Long_text.py"}  # old links' pages, out of the menu: the Long text page now opens the Attention page


def home() -> None:
    f = frame("Home")
    options, full_range = display_options()
    st.title("attnviz")
    st.markdown(
        "Paste text in the sidebar (on a narrow screen, the arrow at the top left opens it), choose a model, and "
        "see what each layer and head attends to. "
        "The pages on the left go deeper: every head at a glance, positional encodings, norms, "
        "head analyses, and training the seed's models."
    )
    stack = f.trace.stack()  # self-attention, or the encoder's
    layer, head = layer_head(*stack.weights.shape[:2])
    view = head_view(stack, layer, head, options._replace(log_scale=False))  # this head only, read on demand
    fig = attention_heatmap(view.attn[0, 0], view.q_labels, view.k_labels,
                            f"layer {layer}, head {head}", masked=view.masked, log_scale=options.log_scale,
                            full_range=full_range, key_below=True)
    model_output(f.model, f.text)
    st.plotly_chart(fig, key="home_heatmap", config=chart_config(figure_name(f.trace.model, layer, head)))
    downloads(f.trace, fig, layer, head)


# expanded: Streamlit would fold a list of more than ten pages behind "View more", hiding the newest ones
st.navigation([st.Page(home, title="Home", default=True),
               *(st.Page(str(p.relative_to(Path(__file__).parent)), visibility="hidden" if p.name in HIDDEN else "visible")
                 for p in PAGES)], expanded=True).run()
