"""Faithfulness: eight explanations of one prediction side by side, ranked against what the model does."""

import re

import streamlit as st

from attnviz.analysis import CAVEAT
from attnviz.analysis.faithfulness import AOPC, METHODS, agreement, explain, forwards
from attnviz.figures.faithfulness import deletion_curves, shaded_rows
from attnviz.analysis.interventions import ZeroValue, editing
from attnviz.settings import max_forwards
from attnviz.ui.frame import frame, offer_causal, page_cap
from attnviz.ui.jobs import slot
from attnviz.ui.progress import Bar, again
from attnviz.ui.escape import plain

f = frame("Faithfulness", chat=True)
st.title("Faithfulness")
st.info(CAVEAT)
trace = f.trace
if trace.kind == "encoder-decoder":
    offer_causal("Faithfulness explains one stack's prediction: pick an encoder, a classifier or a causal LM.")
    st.stop()
if trace.kind == "encoder" and not f.model.can("predict"):
    offer_causal(f"{f.model_key} is an encoder, which predicts nothing of its own: its first token's output norm is "
                 "explained. A causal language model's next token is a prediction to explain.")
T = trace.n_tokens

c1, c2 = st.columns(2)
if f.model.can("predict"):
    chosen = c1.selectbox("Label to explain", ["the predicted one", *f.model.labels], key="faith_label")
    target = None if chosen == "the predicted one" else chosen
elif trace.kind == "decoder":
    target = c1.text_input("Next token to explain (empty: the predicted one)", key="faith_next").strip() or None
else:
    target = None
    c1.caption("An encoder predicts nothing of its own: the norm of its [CLS] output is explained.")
steps = c2.select_slider("Integrated-gradients steps", [16, 32, 64, 128], value=64, key="faith_steps")
with st.expander("The methods"):
    st.markdown("\n".join(f"- **{name}**: {plain(what)}" for name, what in METHODS.items()))

n = forwards(T, steps)
if n > max_forwards():
    st.warning(f"Explaining this text's {T} tokens takes {n:,} forward passes (occlusion and value zeroing one per "
               f"token, {steps} for integrated gradients, the deletion curves one per removal and method), over "
               f"this server's budget of {max_forwards():,}. Shorten the text or take fewer steps; an operator can "
               "raise the budget with ATTNVIZ_MAX_FORWARDS.")
    st.stop()
asked = (f.model_key, f.text, target, steps, f.chat)
if st.button(f"Explain the prediction ({n:,} forward passes)", key="faith_run") or again("faithfulness"):
    with slot("Faithfulness"):
        bar = Bar("Running the model…", "faithfulness")
        try:
            st.session_state["faithfulness"] = (asked, explain(
                f.model, f.text, target, steps, lambda k, total: bar(k / total, f"pass {k} of {total}"),
                page_cap(), lambda j: editing([ZeroValue(j)]), f.chat))
        except ValueError as e:
            st.error(plain(e))
    bar.done()
done = st.session_state.get("faithfulness")
if not done or done[0] != asked:
    st.stop()
e = done[1]
st.markdown(f"Explained: **{plain(e.target)}** = {e.score:.4g} (every embedding zeroed: {e.baseline:.4g}). "
            f"Integrated gradients add up to {e.completeness:.1%} of the difference.")
for method, why in e.missing.items():
    st.caption(f"No {method}: {plain(why)}.")

st.header("The text, by each method")
st.caption("Shade: each row relative to its own largest |importance|; red raises the score, blue lowers it. "
           "Hover a token for its value.")
st.html(shaded_rows(e.tokens, e))

st.header("Agreement with occlusion")
table = agreement(e)
st.dataframe(table, hide_index=True, key="faith_table")
st.caption(f"spearman: rank correlation with occlusion over the {T} tokens. {AOPC}.")
y_title = f"probability of {e.target.removeprefix('log-odds of ')}" if e.probability else e.target
st.plotly_chart(deletion_curves(e.curves, f"{y_title} as each method's top tokens are removed", y_title),
                key="faith_curves")
st.caption("How to read it: each method removes its most important tokens first (their embeddings zeroed); the "
           "faster its line falls, the more the model needed what the method picked.")
stem = re.sub(r"[^A-Za-z0-9]+", "-", f.model_key).strip("-")
st.download_button("Download CSV", e.table().to_csv(index=False), f"faithfulness-{stem}.csv", "text/csv",
                   key="faith_csv")
