"""Attention explorer at every length: up to figures/explorer.CELLS tokens every layer and head at a glance, any head
in detail, any token's view, cell by cell; past it, every head pooled, zoom into an exact window, a token's reach,
sinks and distance profiles (ui/long.explore, drawn from the explorer model the notebook draws too)."""

from functools import partial

import numpy as np
import streamlit as st

from attnviz.figures.attention import explorer_figures, link_grid
from attnviz.export import figure_name
from attnviz.ui.derived import derived
from attnviz.ui.display import display_options
from attnviz.ui.frame import frame, layer_head
from attnviz.ui.readable import model_output
from attnviz.ui import heads
from attnviz.ui.heads import head_chart
from attnviz.ui import long
from attnviz.ui.downloads import chart_config, downloads
from attnviz.figures.overview import stack_tiles
from attnviz.figures.view import focus_html, layer_view, layer_views

TABS = {"encoder": "Encoder", "decoder": "Decoder", "cross": "Cross"}
AXES = {
    "encoder": "Source tokens attending to source tokens.",
    "decoder": "Target tokens attending to earlier target tokens.",
    "cross": "Rows: target tokens (queries) · columns: source tokens (keys).",
}
DIRECTIONS = {"attends to": "to", "attended by": "from"}  # label (also the link's value) -> row or column

f = frame("Attention", when_long=long.surveyed_if_long, whole=True, chat=True)  # a long text: traced once, surveyed
if long.made_long(f.trace):
    long.explore(f)
    st.stop()
options, full_range = display_options()
log_scale = options.log_scale
shown = options._replace(log_scale=False)  # the log scale only recolours


def view_of(stack, layer: int):
    """One layer as displayed, from the views all sessions share (no per-session copy of the weights)."""
    return derived(f.trace, ("attention", stack.name, layer, shown), lambda: layer_view(stack, layer, shown))


def overview_of(stack):
    """(L, H, ≤64, ≤64) every head's overview tile, made one layer at a time."""
    return derived(f.trace, ("attention tiles", stack.name, shown), lambda: stack_tiles(stack, shown))


def explore(name: str) -> None:
    stack = f.trace.stack(None if name == "self" else name)
    opened_below = heads.newly_clicked(f"links_{name}")  # a head opened from the grid at the page's foot
    layer, head = layer_head(*stack.weights.shape[:2], with_mean=True)
    view = view_of(stack, layer)
    overview = st.container()
    detail, focus_col = st.columns([3, 2])
    with focus_col:
        st.subheader("Token focus")
        direction = DIRECTIONS[st.radio("The token…", list(DIRECTIONS), key="direction", bind="query-params",
                                        horizontal=True, help="attends to: its row · attended by: its column")]
        names = view.q_labels if direction == "to" else view.k_labels
        token = st.selectbox("Token", names, index=min(1, len(names) - 1), key="focus", bind="query-params")
    focus = names.index(token)
    figs = explorer_figures(view, overview_of(stack), layer, head, focus, direction, log_scale, full_range)
    chart_key = f"overview_{name}"
    head_chart(figs["overview"], chart_key, view.attn.shape[1], page=None, where=overview)
    part = "encoder" if name == "self" else name
    with detail:
        image = figure_name(f.trace.model, layer, head, "" if part == "encoder" else part)
        st.plotly_chart(figs["detail"], key=f"detail_{name}", config=chart_config(image, key=f"share_{name}"))
        if opened_below:
            heads.scroll_into_view(f"detail_{name}")
        downloads(f.trace, figs["detail"], layer, head, stack=part, key=f"share_{name}")
    with focus_col:
        st.html(focus_html(view, 0, head, focus, direction, log_scale, full_range))
        st.plotly_chart(figs["focus"], key=f"focus_{name}")
        st.plotly_chart(figs["focus_heads"], key=f"focus_heads_{name}")
    links(stack, view, name)


def links(stack, view, name: str) -> None:
    """Which heads link two tokens: one weight per head for a chosen query and key; a click opens that head."""
    st.subheader("Which heads link two tokens?")
    c1, c2 = st.columns(2)
    q_names, k_names = view.q_labels, view.k_labels
    query = c1.selectbox("Query token (the one that looks)", q_names, index=max(0, len(q_names) - 2),
                         key="link_query", bind="query-params",  # the token focus above follows it
                         on_change=partial(heads.follow_query, "link_query", "focus", "direction", "attends to"))
    key = c2.selectbox("Key token (the one looked at)", k_names, index=min(1, len(k_names) - 1),
                       key="link_key", bind="query-params")
    q, k = q_names.index(query), k_names.index(key)
    if view.masked is not None and view.masked[q, k]:
        st.caption("A causal model's query never sees a later token: every head gives this pair 0.")
    values = derived(f.trace, ("attention links", name, shown, q, k),
                     lambda: np.stack([v.attn[0, :, q, k] for v in layer_views(stack, shown)]))  # (L, H)
    head_chart(link_grid(values, query, key), f"links_{name}", view.attn.shape[1], page=None)


st.title("Attention")
model_output(f.model, f.text)
stack_names = list(TABS) if f.trace.kind == "encoder-decoder" else ["self"]
if stack_names == ["self"]:
    explore("self")
else:
    # Bound to the link, the tabs track which one is open, so only that one is computed and sent.
    for tab, name in zip(st.tabs([TABS[n] for n in stack_names], key="stack", bind="query-params"), stack_names):
        if tab.open:
            with tab:
                st.caption(AXES[name])
                explore(name)
