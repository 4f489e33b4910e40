"""Generate: the model continues the text; step through the new tokens and see what each one was chosen from."""

import html

import numpy as np
import streamlit as st

from attnviz.figures.attention import attention_heatmap
from attnviz.figures.generate import NEW_COLOUR, mark_boundary, step_attention, top_tokens
from attnviz.backends.common import chat_kw
from attnviz.backends.generation import MAX_NEW_TOKENS, Sampling
from attnviz.core.tokens import clean, labels
from attnviz.ui.derived import derived
from attnviz.ui.frame import frame, layer_head, offer_causal, plain
from attnviz.ui.jobs import slot
from attnviz.ui.progress import Bar
from attnviz.ui.links import check_link_value, linked_number

f = frame("Generate", chat=True)
st.title("Generate")
layer, head = layer_head(f.model.n_layers, f.model.n_heads, with_mean=True)  # shared with the other pages' links
if not f.model.can("generate"):
    offer_causal(f"{f.model_key} is not a causal language model: generation needs one. Switch below, or pick a Hugging "
                 "Face causal LM (hf:gpt2 or a local folder) in the sidebar; the text box holds the prompt.")
    st.stop()
if f.page_cut:  # cut by this page, not by the model's positions
    st.info(f"This page draws the prompt and its continuation cell by cell, so it takes prompts of at most "
            f"{f.trace.n_tokens:,} tokens (ATTNVIZ_PAGE_TOKENS raises it); this one has "
            f"{f.trace.n_tokens + f.trace.truncated:,}. Paste the end of the text you want continued.")
    st.stop()
st.markdown("The text in the sidebar is the prompt. The model continues it; then one forward pass over prompt + "
            "continuation gives the attention shown, exactly what tracing the whole text would give.")

c1, c2, c3, c4 = st.columns(4)
n_new = linked_number(c1, "New tokens", 1, MAX_NEW_TOKENS, "gen_new", value=20)
temperature = linked_number(c2, "Temperature (0: greedy)", 0.0, 10.0, "gen_temp", value=0.0, step=0.1)
top_k = linked_number(c3, "Top-k (0: all)", 0, 100_000, "gen_top_k", value=0, disabled=temperature == 0)
seed = linked_number(c4, "Seed", 0, 2**31 - 1, "gen_seed", value=0, disabled=temperature == 0,
                     help="The same seed gives the same sample, so a link reproduces it.")

sampling = Sampling(int(n_new), float(temperature), int(top_k), int(seed))


def generate():
    with slot("This generation"):
        bar = Bar("Generating…", "generation")  # a Stop ends it between two tokens
        g = f.model.generate(f.text, sampling, on_step=lambda done, most: bar(
            done / most, f"token {done:,} of at most {most:,}"), **chat_kw(f.chat))
        bar.done()
        return g


try:  # kept by the views all sessions share, under the model: a session keeps no trace of its own
    g = derived(f.model, ("generate", f.text, sampling, f.chat), generate)
except ValueError as e:
    st.error(plain(str(e)))
    st.stop()
t = g.trace
if g.n_new == 0:
    st.warning("The model ended the text at once: it generated no token.")
    st.stop()
names = labels(t.tokens)

step = 1  # one new token leaves nothing to choose (a slider from 1 to 1 is an error in Streamlit)
if g.n_new > 1:
    step = st.slider("Step: the generated token to look at", 1, g.n_new, 1, key="gen_step", bind="query-params")
check_link_value("gen_step", step, "Step", f"one of 1–{g.n_new}")
pos = g.prompt_len + step - 1  # the token generated at this step
words = [html.escape(clean(tok)) for tok in t.tokens]
spans = [f'<span title="{html.escape(raw)}" style="color: {NEW_COLOUR if i >= g.prompt_len else "inherit"};'
         f'{"font-weight: bold; text-decoration: underline;" if i == pos else ""}">{w}</span>'
         for i, (w, raw) in enumerate(zip(words, t.tokens))]  # the raw token in the hover
st.html('<div style="font-family: monospace; line-height: 1.8">' + " ".join(spans[: g.prompt_len]) + " ‖ "
        + " ".join(spans[g.prompt_len:]) + "</div>")

which = "mean of heads" if head is None else f"head {head}"
query = pos - 1  # the position whose output chose this token
st.plotly_chart(step_attention(
    t.row(layer, head, query), names, g.prompt_len, query,
    f"Choosing “{names[pos]}” (step {step}): what position {query} (“{names[query]}”) attended to · "
    f"layer {layer}, {which}"), key="gen_step_attention")

st.plotly_chart(top_tokens(labels(g.top_tokens[step - 1]), g.top_probs[step - 1], clean(t.tokens[pos]),
                           f"Step {step}: the model's five likeliest next tokens (before temperature and top-k)"),
                key="gen_top")

attn = t.head(layer, head)
masked = np.triu(np.ones_like(attn, bool), 1)  # a causal model never sees later tokens
fig = attention_heatmap(attn, names, names, f"Layer {layer}, {which}: prompt + continuation", masked=masked)
st.plotly_chart(mark_boundary(fig, g.prompt_len), key="gen_heatmap")
how = "greedy" if sampling.greedy else f"temperature {temperature}, top-k {top_k or 'all'}, seed {seed}"
st.caption(plain(f"Continuation ({g.n_new} tokens, {how}): {g.continuation}"))
