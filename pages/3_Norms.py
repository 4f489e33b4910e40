"""Norms: residual-stream and sublayer norms per layer and token, norm-based attention, a table to download."""

import re

import streamlit as st

from attnviz.figures.attention import attention_heatmap
from attnviz.figures.norms import layer_profile, stat_heatmap, weight_heatmap
from attnviz.analysis.norms import NAMES, NORM_STATS, layer_stats, norm_attention, norm_table
from attnviz.core.tokens import labels
from attnviz.ui.display import token_window
from attnviz.ui.frame import frame, layer_head

f = frame("Norms")
st.title("Norms")
trace = f.trace
if trace.kind == "encoder-decoder":
    side = st.radio("Stack", ["encoder", "decoder"], horizontal=True, key="norm_stack", bind="query-params")
    trace = getattr(trace, side)
names = labels(trace.tokens)
stats = layer_stats(trace)
if not trace.norms:
    st.info(f.model.norm_note or "This model records no sublayer statistics: residual norms only.")

st.header("Per layer and token")
st.markdown(
    "Each layer adds an attention update and a feed-forward update to the residual stream. "
    "*Attention's share of the update* = attention update / (attention update + feed-forward update) says how much "
    "of the layer's change comes from attention; the two *÷ residual stream* ratios divide each update by the norm "
    "of the stream entering the layer."
)
by_name = {NAMES.get(k, k): k for k in stats}
stat = by_name[st.selectbox("Statistic", list(by_name), key="norm_stat", bind="query-params")]
st.caption(f"{NORM_STATS[stat]} (`{stat}` in the CSV). How to read it: one row per layer, one column per token; "
           "brighter is larger, so a bright column is a token this statistic singles out in every layer.")
st.plotly_chart(stat_heatmap(stats[stat], names, NAMES.get(stat, stat), share=stat == "attn_share"),
                key="norm_heatmap")
updates = [k for k in ("residual_in", "attn_out", "ffn_out") if k in stats]
profile = {NAMES[k]: stats[k] for k in updates}
st.plotly_chart(layer_profile(profile, list(profile), "residual stream and the updates added to it"),
                key="norm_profile")
st.caption("How to read it: the mean over tokens, layer by layer. The stream usually grows with depth; an update "
           "far below the stream changes little, one near it rewrites the token's representation.")

st.header("Norm-based attention")
st.markdown(
    "A weight α says how much a token is looked at, not how much it changes the output. Kobayashi et al. (2020) "
    "weigh it by the size of what is moved: ‖αᵢⱼ f(xⱼ)‖ = αᵢⱼ ‖(xⱼ W_V + b_V) W_O‖ "
    "for the head's slices of W_V and W_O."
)
if "value_norms" not in trace.norms:
    st.info("This model's trace has no value-vector norms, so norm-based attention cannot be shown.")
else:
    layer, head = layer_head(trace.n_layers, trace.n_heads)
    normalize = st.toggle("Normalise each row to sum 1", key="norm_rows", bind="query-params")
    raw = trace.head(layer, head)
    weighted = norm_attention(raw, trace.norms["value_norms"][layer, head], normalize)  # rows normalised whole
    w = token_window(trace.n_tokens, "norm_from")
    shown = names[w]
    c1, c2 = st.columns(2)
    c1.plotly_chart(attention_heatmap(raw[w, w], shown, shown, f"α · layer {layer}, head {head}"), key="norm_raw")
    title = f"‖α f(x)‖ · layer {layer}, head {head}"
    c2.plotly_chart(weight_heatmap(weighted[w, w], shown, shown, title, 1.0 if normalize else None),
                    key="norm_weighted")
    st.caption("How to read them: rows are queries, columns keys. Left, how much each query looks at each key; "
               "right, how much it actually takes from it. A key bright on the left but pale on the right (often "
               "[CLS], [SEP] or punctuation) is looked at but moves little.")

st.header("Table")
table = norm_table(trace)
# People read the headers; the CSV keeps the column names, which programs read.
headers = {"token_index": "position", **{k: NAMES[k] for k in table.columns if k in NAMES}}
st.dataframe(table, hide_index=True, height=320, key="norm_table", column_config=headers)
stem = re.sub(r"[^A-Za-z0-9]+", "-", f.model_key).strip("-")
st.download_button("Download CSV", table.to_csv(index=False), f"norms-{stem}.csv", "text/csv", key="norm_csv")
