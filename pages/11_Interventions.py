"""Interventions: change what heads attend to inside the forward, see what the model does then; patch heads."""

import numpy as np
import streamlit as st

from attnviz.core.budget import check_forwards
from attnviz.figures.analysis import DIVERGING, head_map
from attnviz.figures.attention import weights_heatmap
from attnviz.figures.interventions import change_map, clickable_cells, label_bars, next_token_bars, top_k_bars
from attnviz.analysis.interventions import (LabelProb, LogitDiff, describe, kind_of, patch_heads, run,
                                            to_nnsight, transformer_lens_code)
from attnviz.settings import max_forwards
from attnviz.core.tokens import labels
from attnviz.ui import interventions as ui
from attnviz.ui.frame import frame, layer_head, offer_causal
from attnviz.ui.heads import head_chart
from attnviz.ui.jobs import slot
from attnviz.ui.progress import Bar, again
from attnviz.ui.escape import plain

f = frame("Interventions", chat=True)
st.title("Interventions")
st.markdown("A heatmap shows where a head looks, not whether the model needs it. Here an edit changes the "
            "attention **inside the forward** — the model then runs on with it — and the page shows what the "
            "model outputs before and after.")
try:
    kind = kind_of(f.model)
except ValueError as e:
    offer_causal(f"{e} A causal LM shows how its next token changes.")
    st.stop()
if kind == "encoder":
    offer_causal(f"{f.model_key} is an encoder, which predicts nothing of its own: edits here change the norm of its "
                 "first token's output. A causal language model shows how its next token changes.")
trace = f.trace
if f.page_cut:  # cut by this page, not by the model's positions: the edits run the model on the whole text
    # (as the model takes it), twice and more, so a cut text is refused here
    st.info(f"Interventions run the model on the whole text, as it is and edited, so this page takes texts of at most "
            f"{trace.n_tokens:,} tokens (ATTNVIZ_PAGE_TOKENS raises it); this one has {trace.n_tokens + trace.truncated:,}. "
            "Paste the passage you want to test.")
    st.stop()
L, H, T = trace.n_layers, trace.n_heads, trace.n_tokens
names = labels(trace.tokens)

st.header("Edit attention")
layer, head = layer_head(L, H)
head = 0 if head is None else head
charts = st.container()  # the grid and the head above the edits box: the page's figures on its first screen
found = ui.edits(L, H, T)
c1, c2 = charts.columns([1, 2])
edited = np.zeros((L, H))
for e in found:
    for h in range(H) if e.head is None else [e.head]:
        for lay in range(L) if e.layer is None else [e.layer]:
            edited[lay, h] += 1
with c1:
    head_chart(head_map(edited, "edits per head · click a head to pick it", (0, max(1, edited.max())),
                        value_name="edits"), "edit_grid", H, page=None)
heatmap = weights_heatmap(trace.head(layer, head), names, names,
                          f"layer {layer}, head {head} as it is · click a cell to knock it out",
                          masked=np.triu(np.ones((T, T), bool), 1) if trace.kind == "decoder" else None)
if T <= ui.CLICKABLE_MAX_TOKENS:
    ui.cell_chart(clickable_cells(heatmap, names, names), "edit_heatmap", T, c2)
else:
    c2.plotly_chart(heatmap, key="edit_heatmap")
    c2.caption(f"Cells take clicks up to {ui.CLICKABLE_MAX_TOKENS} tokens (one point each); pick the query and key "
               "below.")
ui.controls(layer, head, T, names)
if found:
    st.markdown("\n".join(f"- {plain(describe(e))}" for e in found))
    with st.expander("The same edits in TransformerLens or nnsight"):
        st.caption("TransformerLens: `model` is your HookedTransformer or TransformerBridge. nnsight: a Hugging Face "
                   "model loaded with attn_implementation=\"eager\" (the module path fits Llama-style models).")
        st.code(transformer_lens_code(found), language="python")
        st.code(to_nnsight(found, n_layers=L), language="python")

effect = ui.effect(f.model_key, f.model, f.text, found, f.chat)
st.header("What the model outputs")
if kind == "lm":
    before, after = np.exp(effect.base.logprobs), np.exp(effect.edited.logprobs)
    out_names = labels(effect.base.trace.tokens)
    n = len(out_names)
    if n > 1:
        shift = float(effect.edited.logprobs.mean() - effect.base.logprobs.mean())
        st.metric("Mean log-probability of the actual next tokens", f"{effect.edited.logprobs.mean():.3f} nats",
                  f"{shift:+.3f} nats", delta_color="normal")
    else:
        st.caption("One token: no next token inside the text to score; below, what the model predicts after it.")
    at = st.selectbox("Position", list(range(n)), index=n - 1, key="edit_position",
                      format_func=lambda i: f"{i}: {out_names[i]}")
    if n > 1:
        st.plotly_chart(next_token_bars(before, after, out_names[1:], "probability of each actual next token",
                                        at if at < n - 1 else None), key="next_token_bars")
    st.plotly_chart(top_k_bars(effect.base.top_tokens[at], effect.base.top_probs[at], effect.edited.top_tokens[at],
                               effect.edited.top_probs[at], f"top next tokens after “{out_names[at]}”"),
                    key="top_k_bars")
elif kind == "classifier":
    st.plotly_chart(label_bars(effect.base.labels, effect.base.probs, effect.edited.probs, "label probabilities"),
                    key="label_bars")
else:
    st.plotly_chart(change_map(effect.change, labels(effect.base.trace.tokens),
                               "how far each layer's output moved, per token (‖edited − as it is‖)"), key="change_map")

if kind == "encoder":
    st.stop()
st.header("Patch heads between two prompts")
st.caption("The corrupted prompt runs with one head's output (every position) taken from the clean prompt — "
           "the sidebar's text — for each head in turn; the map shows how much of the metric that head restores: "
           "(patched − corrupted) / (clean − corrupted). The prompts must have the same number of tokens: change "
           "one word for another of one token.")
corrupted = st.text_input("Corrupted prompt", key="corrupted", bind="query-params",
                          placeholder="the sidebar's text with one word changed")
if not corrupted:
    st.stop()
try:
    other = run(f.model, corrupted, [], chat=f.chat)
except ValueError as e:
    st.error(plain(e))
    st.stop()
if kind == "lm":
    c1, c2 = st.columns(2)
    good = c1.text_input("Token the clean prompt predicts", effect.base.top_tokens[-1][0], key="patch_good")
    bad = c2.text_input("Token the corrupted prompt predicts", other.base.top_tokens[-1][0], key="patch_bad")
    metric = LogitDiff(good, bad)
    st.caption(f"Metric: logit({plain(good)}) − logit({plain(bad)}) at the last position.")
else:
    label = st.selectbox("Label", list(effect.base.labels), key="patch_label")
    metric = LabelProb(label)
try:
    check_forwards(L * H + 2, "Head patching")
except ValueError as e:
    st.info(plain(e))
if (st.button(f"Patch every head ({L * H + 2} forward passes)", key="patch", disabled=L * H + 2 > max_forwards())
        or again("patching")):
    try:
        with slot("Head patching"):
            bar = Bar("Patching heads one at a time…", "patching")
            result = patch_heads(f.model, f.text, corrupted, metric,
                                 progress=lambda k, n: bar(k / n, f"head {k} of {n}"), chat=f.chat)
        bar.done()
        st.session_state["patching"] = ((f.model_key, f.text, corrupted, metric, f.chat), result)
    except ValueError as e:
        st.error(plain(e))
done = st.session_state.get("patching")
if done and done[0] == (f.model_key, f.text, corrupted, metric, f.chat):
    result = done[1]
    st.caption(f"Metric clean {result.clean:.3f}, corrupted {result.corrupted:.3f}.")
    if result.barely:  # the shares divide by a gap near zero: show how far each head moves the metric instead
        if kind == "lm":
            hint = (f"change the word the next token depends on, so that the corrupted prompt predicts another "
                    f"token (now the clean prompt predicts {plain(effect.base.top_tokens[-1][0])!s} and the "
                    f"corrupted one {plain(other.base.top_tokens[-1][0])!s}), and measure those two tokens")
        else:
            hint = "change a word that carries the label (a *great* for an *awful*)"
        st.warning(f"The two prompts barely differ on the metric ({result.clean - result.corrupted:+.3g}, under "
                   f"{result.small:g}): a share of that gap is mostly noise, so the map shows how far each head moves "
                   f"the metric instead. For shares, pick a corruption that moves the metric: {hint}.",
                   icon=":material/balance:")
        head_chart(head_map(result.moved(), "how far each head moves the metric (patched − corrupted) · click a "
                            "head to open it", colorscale=DIVERGING, value_name="moved"), "patch_map", H)
    else:
        head_chart(head_map(result.restored, "share of the metric each head restores · click a head to open it",
                            colorscale=DIVERGING, value_name="restored"), "patch_map", H)
