"""Compare: the same layer and head for two texts or two models, side by side, and their difference."""

import html
import logging

import numpy as np
import streamlit as st

from attnviz import settings
from attnviz.analysis import CAVEAT, difference
from attnviz.backends.common import check_text
from attnviz.figures.analysis import difference_map
from attnviz.data.samples import CONTRASTS
from attnviz.figures.attention import attention_heatmap
from attnviz.core.tokens import labels
from attnviz.ui import access
from attnviz.ui.escape import plain
from attnviz.ui.display import token_window
from attnviz.ui.frame import entered, frame, stored_trace, layer_head, model_options, offered

log = logging.getLogger("attnviz")

f = frame("Compare")
st.title("Compare")
st.caption("A is the sidebar's model and text; B takes another text, another model, or both. " + CAVEAT)  # a
# caption, not a box: the figures start on the first screen at 1280×800

if "text_b" not in st.session_state and "text_b" not in st.query_params:
    st.session_state["text_b"] = CONTRASTS.get(f.text, "")  # start with a contrasting pair, not B = A
c1, c2 = st.columns(2)
model_b = c1.selectbox("Model B", model_options(), index=None, key="model_b", bind="query-params",
                       accept_new_options=not access.locked(), placeholder=f"same as A ({f.model_key})")
text_b = c2.text_area("Text B", key="text_b", bind="query-params", height=100, max_chars=access.max_chars(),
                      placeholder="same as A", help="Press Ctrl+Enter (or click outside) to run.")
key_b, text_b = entered(model_b or f.model_key), text_b if text_b.strip() else f.text  # the key's one spelling, as A's
try:
    trace_b = stored_trace(key_b, check_text(text_b), tokens=settings.page_tokens(), model=offered(key_b))  # A's cap
except ValueError as e:
    st.error(plain(f"B: {e}"))
    st.stop()
except Exception as e:  # a fault in a model or library: say so plainly, keep the page alive
    log.exception("trace failed for %s", key_b)
    st.error(plain(access.fault(key_b, e)))
    st.stop()
if trace_b.truncated:
    st.caption(f"B, like A, reads its first {trace_b.stack().queries.n_tokens:,} tokens and leaves "
               f"{trace_b.truncated:,} out (ATTNVIZ_PAGE_TOKENS raises it).")
if (key_b, text_b) == (f.model_key, f.text):
    st.info("B is the same as A: enter another text or choose another model for B.")

traces = {"A": f.trace, "B": trace_b}
if any(t.kind == "encoder-decoder" for t in traces.values()):
    side = st.radio("Stack", ["encoder", "decoder"], key="compare_stack", bind="query-params", horizontal=True,
                    help="For an encoder–decoder model; a model with one stack shows that stack.")
    traces = {k: getattr(t, side) if t.kind == "encoder-decoder" else t for k, t in traces.items()}
a, b = traces["A"], traces["B"]
n_layers, n_heads = min(a.n_layers, b.n_layers), min(a.n_heads, b.n_heads)
if (a.n_layers, a.n_heads) != (b.n_layers, b.n_heads):
    st.caption(f"A has {a.n_layers} layers × {a.n_heads} heads, B {b.n_layers} × {b.n_heads}: "
               "the pickers cover what both have.")
layer, head = layer_head(n_layers, n_heads, with_mean=True)
where = f"layer {layer}, " + (f"head {head}" if head is not None else "mean of heads")


def weights(t) -> np.ndarray:
    return t.head(layer, head)  # (T, T): one head, or the layer's mean


def heatmap(name: str, t, w: slice):
    names = labels(t.tokens)[w]
    masked = np.triu(np.ones((t.n_tokens, t.n_tokens), bool), 1)[w, w] if t.kind == "decoder" else None
    return attention_heatmap(weights(t)[w, w], names, names, f"{name}: {html.escape(t.model, quote=False)}, {where}",
                             masked=masked)


window = token_window(max(a.n_tokens, b.n_tokens), "compare_from")
left, right = st.columns(2)
left.plotly_chart(heatmap("A", a, window), key="compare_a")
right.plotly_chart(heatmap("B", b, window), key="compare_b")

st.header("A − B")
d = difference(weights(a), weights(b), a.tokens, b.tokens)
if not len(d.index_a):
    st.info("The two token sequences have no token in common, so there is no difference to show.")
else:
    if a.tokens != b.tokens:
        st.caption(f"The token sequences differ: the difference covers the {len(d.index_a)} tokens they share "
                   f"(of {a.n_tokens} in A and {b.n_tokens} in B), aligned in order. The weights are each "
                   "sequence's own, read at those positions, so rows need not sum to 1.")
    names_a = labels(a.tokens)
    matched = [names_a[i] for i in d.index_a]  # A's own labels: "the (5)" stays "the (5)" when tokens drop out
    shared = slice(min(window.start, len(matched) - 1), window.stop)  # the window, over the tokens both share
    st.plotly_chart(difference_map(d.diff[shared, shared], matched[shared], f"A − B, {where}"), key="compare_diff")
