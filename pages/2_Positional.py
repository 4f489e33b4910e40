"""Positional encodings: the sinusoidal table, the selected model's own position information, and how
attention depends on the offset between query and key."""

import streamlit as st

from attnviz.figures import positional as figs
from attnviz.backends.positions import attention_by_offset, similarity, sinusoidal
from attnviz.ui.display import token_window
from attnviz.ui.frame import frame

f = frame("Positional encodings")
st.title("Positional encodings")

st.header("The sinusoidal encoding")
st.markdown(
    "PE[p, 2i] = sin(p · ωᵢ), PE[p, 2i+1] = cos(p · ωᵢ) with ωᵢ = 10000^(−2i/D) (Vaswani et al. 2017). "
    "Low dimensions turn fast, high ones slowly; the dot product of two positions depends only on their distance."
)
c1, c2 = st.columns(2)
T = c1.slider("Positions", 8, 1024, 128, step=8, key="pe_len", bind="query-params")
D = c2.slider("Dimensions", 8, 512, 128, step=2, key="pe_dim", bind="query-params")
pe = sinusoidal(T, D)
st.plotly_chart(figs.encoding_heatmap(pe, f"sinusoidal encoding: {T} positions × {D} dimensions"), key="pe_table")
dims = st.multiselect("Dimensions to plot", list(range(D)), default=[0, 1, 6, 7], key="pe_dims")
if dims:
    st.plotly_chart(figs.dimension_curves(pe, dims, "chosen dimensions over position"), key="pe_curves")
metric = st.radio("Similarity", ["dot", "cosine"], horizontal=True, key="pe_metric", bind="query-params")
st.plotly_chart(figs.similarity_heatmap(similarity(pe, metric), metric, f"{metric} between positions"), key="pe_sim")

st.header("What this model has")
info = f.model.position_info()
st.markdown(f"**{info.kind}** — {info.note}")
if f.trace.kind == "encoder-decoder" and info.kind != "none":
    st.caption("For an encoder–decoder this is the encoder's position information.")
if info.table is not None and info.kind in ("learned", "sinusoidal"):
    rows = token_window(len(info.table), "model_from", "positions")  # the table and the similarity map
    st.plotly_chart(figs.encoding_heatmap(info.table, "the model's position table", rows),
                    key="model_table")
    st.caption("Colours run to the 99th percentile of |value|: a few large entries would otherwise turn the "
               "rest grey.")
    st.plotly_chart(figs.components_plot(info.table, "the positions' first principal components"),
                    key="model_components")
    st.caption("How to read it: each curve places every position along one of the table's main directions. "
               "Smooth waves mean neighbouring positions get similar vectors, so the model can tell near from far.")
    model_metric = st.radio(
        "Similarity", ["dot", "cosine"], index=1, horizontal=True, key="model_metric", bind="query-params"
    )
    sim = similarity(info.table, model_metric)
    title = f"{model_metric} between the model's positions"
    st.plotly_chart(figs.similarity_heatmap(sim, model_metric, title, rows), key="model_sim")
if info.kind == "relative":
    fig = figs.relative_bias_heatmap(info.table, info.offsets, "bias added to the score, per head")
    st.plotly_chart(fig, key="model_bias")
if info.frequencies is not None:
    st.plotly_chart(figs.frequency_plot(info.frequencies, "frequency of each dimension pair"), key="model_freq")

st.header("How position shows in attention")
trace = f.trace
if trace.kind == "encoder-decoder":
    side = st.radio("Stack", ["encoder", "decoder"], horizontal=True, key="pos_stack", bind="query-params")
    trace = getattr(trace, side)
causal = trace.kind == "decoder"
st.markdown(
    "Mean attention weight at each offset key − query, over all query positions of this text"
    + (" (a causal model only sees offsets ≤ 0)." if causal else ".")
)
c1, c2 = st.columns(2)
widest = max(1, trace.n_tokens - 1)
# A slider needs two different ends: with one or two tokens the only offset is 1.
window = c1.slider("Largest offset shown", 1, widest, min(20, widest), key="pos_window") if widest > 1 else 1
skip = c2.checkbox("Leave out special tokens", value=True, key="pos_skip_special", bind="query-params")
keep = ~trace.special if skip and (~trace.special).any() else None
offsets, means = attention_by_offset(trace.weights, keep, causal)
shown = abs(offsets) <= window
view = st.radio("View", ["every head", "one curve per layer"], horizontal=True, key="pos_view", bind="query-params")
if view == "every head":
    fig = figs.offset_heatmap(offsets[shown], means[..., shown], "mean attention by offset")
else:
    fig = figs.offset_curves(offsets[shown], means[..., shown], "mean attention by offset, averaged over heads")
st.plotly_chart(fig, key="offsets")
