"""Long text: every head pooled, a head at block resolution with an exact zoomed window, a token's reach
across the document, attention sinks and distance profiles — up to ATTNVIZ_MAX_LONG_TOKENS tokens."""

from functools import partial

import pandas as pd
import streamlit as st

from attnviz import settings
from attnviz.analysis import long
from attnviz.figures import long as figs
from attnviz.core.tokens import clean
from attnviz.ui.frame import frame, layer_head
from attnviz.ui.heads import head_chart
from attnviz.ui.share import linked_number, plain
from attnviz.ui.long import cached_survey, detail, follow_point, follow_row, initial, long_trace, uploaded_text
TOP_K = 10
RANGE_LIMITS = {  # analyses that need every weight at once, with what they cost
    "Attention rollout and flow (Analysis page)": "multiply L dense T×T matrices (rollout is O(L·T³)); "
                                                   "they run up to the app's token cap (ATTNVIZ_MAX_TOKENS, 512 by default)",
    "Head importance by ablation (Analysis page)": "runs the model once per head: at this length each run is a full forward",
    "Token focus and every head cell by cell (Attention page)": "draws T×T cells per head",
}

cap = settings.max_long_tokens()
f = frame("Long text", tracer=lambda key, text: long_trace(key, text, cap), text_from=uploaded_text)
stack = f.trace.stack(None)  # self-attention; an encoder–decoder's encoder
tokens, T = stack.queries.tokens, stack.queries.n_tokens
L, H = stack.weights.shape[:2]
if f.trace.truncated:  # the status line says so too; this says which limit
    st.info(f"The text has more tokens than this page takes: the first {T:,} are shown and "
               f"{f.trace.truncated:,} were cut (limit {f.model.limit(cap):,}: ATTNVIZ_MAX_LONG_TOKENS "
               "or the model's own position limit).")

st.title("Long text")
if f.trace.kind == "encoder-decoder":
    st.caption("An encoder–decoder: this page shows the encoder's self-attention.")
reduce = st.radio("Pool blocks by their", list(figs.REDUCES), key="pool", bind="query-params", horizontal=True,
                  help="max keeps a single sharp weight visible; mean shows where weight lies.")
small = figs.overview_size(L, H)
survey = cached_survey(stack, small)
layer, head = layer_head(L, H, with_mean=True)
name = f"layer {layer}, mean of {H} heads" if head is None else f"layer {layer}, head {head}"


st.subheader("Every head")
mosaic = figs.head_mosaic(survey.pooled("overview", reduce), reduce, T, survey.block("overview"), (layer, head))
head_chart(mosaic, "long_overview", H, page=None)  # point i of the mosaic is head i, row by row

st.subheader("Detail and zoom")
detail(f.key, f.text, cap, small, layer, head, reduce, name)


st.subheader("A token's reach")
c1, c2 = st.columns([1, 2])
word = c2.text_input("Find a word", key="find", help="Lists where each word that reads this starts, however the tokenizer cut it into pieces.")
if word:
    hits = long.find(tokens, word, stack.queries.word_ids)
    if hits:
        c2.caption(f"{len(hits):,} positions: " + ", ".join(f"{i:,}" for i in hits[:40]) + (" …" if len(hits) > 40 else ""))
        if c2.button(f"Go to the first ({hits[0]:,})", key="find_go"):
            st.session_state["token"] = hits[0]
    else:
        c2.caption(f"No word reads {plain(word)!s}.")
focus = int(linked_number(c1, "Token position", 0, T - 1, "token", **initial("token", min(1, T - 1))))
side = stack.name if stack.name != "self" else None
row, col = f.trace.row(layer, head, focus, side), f.trace.column(layer, head, focus, side)  # (Tk,), (Tq,)
st.plotly_chart(figs.reach_lines(row, col, focus, clean(tokens[focus]), name), key="long_reach",
                on_select=follow_point, selection_mode="points")
direction = st.radio("Shade the text by", ["what it attends to", "what attends to it"], key="reach_dir",
                     horizontal=True, bind="query-params")
by_row = direction == "what it attends to"
shade = row if by_row else col
st.html(figs.reach_html(tokens, stack.queries.word_ids, shade, focus))
top = long.top_keys(shade, TOP_K)
table = f"reach_top_{focus}_{'row' if by_row else 'column'}"  # a new token's table starts with no row picked
st.dataframe(pd.DataFrame(
    [(int(i), float(shade[i]), *long.context(tokens, int(i))) for i in top],
    columns=["position", "weight", "before", "token", "after"],
), hide_index=True, key=table, on_select=partial(follow_row, table, [int(i) for i in top]), selection_mode="single-row")
st.caption("Click a point on either line, or pick a row of the table, to follow that token.")

st.subheader("Attention received and sinks")
share = long.first_token_share(survey)
st.plotly_chart(figs.sink_grid(share, long.SINK_SHARE), key="long_sinks")
delim = long.delimiters(tokens, stack.queries.special)
found = long.sinks(survey)
st.caption((f"{len(found)} sink heads: " + ", ".join(f"L{l} H{h} ({s:.0%})" for l, h, s in found[:12])) if found
           else f"No head puts {long.SINK_SHARE:.0%} or more of its weight on the first token.")
if delim.any():
    st.plotly_chart(figs.sink_grid(long.delimiter_share(survey, delim), long.SINK_SHARE,
                                   "delimiters (punctuation and special tokens)"), key="long_delims")
received = survey.received[layer].mean(0) if head is None else survey.received[layer, head]  # (Tk,)
st.plotly_chart(figs.received_line(received, T, name), key="long_received")

st.subheader("Distance profile")
st.plotly_chart(figs.distance_profile(survey.distance[layer], long.distance_labels(survey.edges), f"layer {layer}", head),
                key="long_distance")

with st.expander("What does not run at this length"):
    st.markdown("\n".join(f"- **{k}**: {v}." for k, v in RANGE_LIMITS.items()))
