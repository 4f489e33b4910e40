"""Analysis: what each head does, how much each token reaches each position, which heads matter."""

import streamlit as st

from attnviz.analysis import CAVEAT, FLOW_MAX_TOKENS, HEAD_STATS, attention_flow, head_importance, head_stats, head_table, ablation, rollout
from attnviz.analysis.ablation import CITATION, MEASURES
from attnviz.analysis.heads import stat_range
from attnviz.analysis.rollout import FLOW, ROLLOUT
from attnviz.figures.analysis import DIVERGING, head_map, relevance_html, relevance_map
from attnviz.core.budget import check_forwards
from attnviz.settings import max_flows, max_forwards
from attnviz.core.tokens import labels
from attnviz.ui.derived import derived, held
from attnviz.ui.frame import frame, page_cap
from attnviz.ui.heads import head_chart
from attnviz.ui.jobs import slot
from attnviz.ui.progress import Bar, again
from attnviz.ui.escape import plain

f = frame("Analysis")
st.title("Analysis")
st.info(CAVEAT)


def kept(name: str, trace, extra, compute):
    """``compute()`` for this trace (and ``extra``), from the views all sessions share."""
    return derived(trace, ("analysis", name, extra), compute)


trace = f.trace
if trace.kind == "encoder-decoder":
    side = st.radio("Stack", ["encoder", "decoder"], key="analysis_stack", bind="query-params", horizontal=True)
    trace = getattr(trace, side)
    st.caption("Rollout and flow follow this stack's self-attention only; cross-attention is left out.")
names = labels(trace.tokens)
L, H, T = trace.n_layers, trace.n_heads, trace.n_tokens

st.header("What each head does")
stat = st.selectbox("Statistic", list(HEAD_STATS), format_func={k: s.label for k, s in HEAD_STATS.items()}.get, key="stat",
                    bind="query-params")
stats = kept("stats", trace, None, lambda: head_stats(trace))
head_chart(head_map(stats[stat], f"{HEAD_STATS[stat].label} · click a head to open it", stat_range(stat, T),
                    value_name=HEAD_STATS[stat].label), "stat_map", H)
st.caption(f"{HEAD_STATS[stat].formula}.")
st.dataframe(head_table(stats), hide_index=True, key="stat_table")

ROLLOUT_LATEX = (r"\tilde A_l = \tfrac12\,\bar A_l + \tfrac12\,I \;\text{(rows renormalised)},\qquad "
                 r"R_l = \tilde A_l\, R_{l-1},\quad R_0 = \tilde A_0")

st.header("Rollout and flow")
c1, c2, c3 = st.columns(3)
method = c1.radio("Method", ["rollout", "flow"], key="relevance_method", bind="query-params", horizontal=True)
target = c2.selectbox("Output position", list(range(T)), index=T - 1 if trace.kind == "decoder" else 0,
                      format_func=names.__getitem__, key="relevance_target")
layer = c3.selectbox("After layer", list(range(L)), index=L - 1, key="relevance_layer")
st.caption(f"{ROLLOUT}." if method == "rollout" else f"Attention flow: {FLOW}. Computed up to {FLOW_MAX_TOKENS} tokens.")
if method == "rollout":
    st.latex(ROLLOUT_LATEX)
if method == "rollout":
    relevance = kept("rollout", trace, None, lambda: rollout(trace.weights))[:, target]  # (L, T)
elif T > FLOW_MAX_TOKENS:
    relevance = None
    st.warning(f"Attention flow runs one max-flow per token and layer, so it is limited to {FLOW_MAX_TOKENS} "
               f"tokens; this text has {T}. Use rollout, or a shorter text.")
elif L * T > max_flows():
    relevance = None
    st.warning(f"Attention flow here would solve {L * T:,} max-flow problems ({L} layers × {T} tokens), over this "
               f"server's budget of {max_flows():,}. Use rollout or a shorter text; an operator can raise the "
               "budget with ATTNVIZ_MAX_FLOWS.")
else:
    def flow():
        with slot("Attention flow"), st.spinner(f"Computing {L * T} max-flows…"):
            return attention_flow(trace.weights, target)

    relevance = kept("flow", trace, target, flow)
if relevance is not None:
    st.markdown(f"How much of **{plain(names[target])}** after layer {layer} comes from each input token "
                "(shade: relative to the largest):")
    st.html(relevance_html(names, relevance[layer]))
    st.plotly_chart(relevance_map(relevance, names, f"{method} into {names[target]}, every layer", method),
                    key="relevance_map")

st.header("Head importance by ablation")
st.caption(f"Remove one head at a time (its output zeroed before the output projection) and measure the change "
           f"of the model's output — {CITATION}.")
try:
    measure = ablation(f.model, f.text, page_cap()).measure
except ValueError as e:
    st.info(f"{plain(e)} Ablation works for the built-in encoders and classifier, and for Hugging Face BERT-, "
            "DistilBERT-, GPT-2- and Llama-style encoders and causal LMs.")
else:
    st.markdown(f"Importance of a head = **{MEASURES[measure]}**.")
    done = held(f.trace, "ablation")  # the shared views keep the scores, not this session
    try:
        check_forwards(L * H + 1, "Head importance by ablation")
    except ValueError as e:  # refused before the button is offered: the operator's budget of forward passes
        st.info(plain(e))
    if (st.button(f"Compute importance ({L * H} forward passes)", key="ablate", disabled=L * H + 1 > max_forwards())
            or again("ablation")):
        with slot("Head importance"):
            bar = Bar("Removing heads one at a time…", "ablation")
            scores, _ = head_importance(f.model, f.text, lambda k, n: bar(k / n, f"head {k} of {n}"), page_cap())
        bar.done()
        done = derived(f.trace, "ablation", lambda: scores)
    if done is not None:
        head_chart(head_map(done, "importance · click a head to open it", colorscale=DIVERGING,
                            value_name="importance"), "importance_map", H)
