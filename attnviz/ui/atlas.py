"""The Roles page's long-context section: the head atlas (attnviz.analysis.atlas) on the job line, with a progress
bar that a rerun or a closed tab stops, its grid (a click opens the head on the Attention page at the needle), its
table and CSV, and the knock-out check beside it."""

from __future__ import annotations

import streamlit as st

from attnviz.analysis.atlas import (BLOCK, BUDGET, DENSE_BELOW, KNOCKOUT_K, MIN_TOKENS, REFERENCES, RETRIEVAL_MIN,
                                    SINK, SINK_THRESHOLD, STREAMING_MAX, WINDOW, head_atlas, knockout_recall)
from attnviz.backends import footprint
from attnviz.export import file_stem
from attnviz.figures.atlas import atlas_grid
from attnviz.ui import jobs
from attnviz.ui.derived import derived, held
from attnviz.ui.frame import max_tokens
from attnviz.ui.escape import plain
from attnviz.ui.links import linked_number
from attnviz.ui.progress import Bar
from attnviz.ui.heads import head_chart

ABOUT = (
    f"- **retrieval** ({REFERENCES['retrieval']}): during the model's own greedy decoding of a needle-in-a-haystack "
    "probe, a head hits when its most attended token lies in the needle and is the token generated; each needle "
    "token counts once. Null: the same probe with the needle's tokens replaced by random tokens.\n"
    f"- **streaming** ({REFERENCES['streaming']}): 1 − the attention mass kept when a query may see only the first "
    f"{SINK} tokens and the {WINDOW} most recent; a head at most {STREAMING_MAX} is a streaming head. Null: as many "
    "keys at random positions.\n"
    f"- **sink** ({REFERENCES['sink']}): mass on the first {SINK} tokens; a sink head over {SINK_THRESHOLD}. Null: "
    f"{SINK} keys at random positions.\n"
    f"- **pattern** ({REFERENCES['pattern']}): the mass each mask keeps at a budget of {BUDGET:.3g} of the keys "
    f"(blocks of {BLOCK}): A-shape (first block + recent window), vertical-slash (the columns and diagonals the "
    "last query block uses most), block-sparse (the key blocks each query block uses most); dense when none keeps "
    f"{DENSE_BELOW}. The cell shows its initials.\n"
    "- each `*_null_hi` is the upper end of a 95% bootstrap interval of the null's mean. Class: retrieval (at least "
    f"{RETRIEVAL_MIN} and above its null), else a sink above its null, else streaming, else full.\n"
    "- knock-out: the needle's recall (answer tokens predicted as the top next token, teacher-forced) with the top-k "
    "retrieval heads' output zeroed, against k random heads."
)


def _mb(model, tokens: int) -> float:
    """MB one probe's trace holds, plus the next-token logits (T, V) a causal model's knock-out forward returns."""
    causal = model.kind == "decoder" and getattr(model, "tokenizer", None) is not None
    vocab = len(model.tokenizer) if causal else 0
    return footprint.trace_mb(model, tokens + 32) + tokens * vocab * 4 / 2**20


def _run(model, text: str | None, tokens: int, needles: int, k: int):
    """The atlas and (for a causal LM) its knock-out check, as one heavy job with one progress bar."""
    with jobs.slot(f"This {tokens:,}-token head atlas", _mb(model, tokens)):
        bar = Bar("Probing the heads…", "atlas")
        share = 0.75 if model.kind == "decoder" else 1.0

        def step(first: float, width: float):
            def progress(done: int, total: int, what: str) -> None:  # between two forwards: a Stop ends it here
                bar(first + width * done / max(total, 1), plain(what))
            return progress

        frame = head_atlas(model, text, tokens=tokens, needles=needles, progress=step(0.0, share))
        check = knockout_recall(model, frame, k, progress=step(share, 1 - share)) if frame.attrs["retrieval"] else None
        bar.done()
        return frame, check


def atlas_section(f) -> None:
    """The section under the role grid: settings, a button, and the atlas once computed (shared by all sessions)."""
    model = f.model
    if model.kind == "encoder-decoder":
        st.info("The head atlas covers encoders and causal language models.")
        return
    st.markdown("Which heads fetch from far back, which read only the first tokens and a recent window (and could "
                "keep a small cache), where the sinks are, and which sparse mask each head follows, scored on "
                "needle-in-a-haystack probes the model answers itself. Each score comes with the upper end of its "
                "null, so a real head stands apart from chance.")
    most = min(max_tokens(), model.max_tokens - 32)  # room for the answer the model generates
    if most < MIN_TOKENS:
        st.info(f"{model.key} takes at most {model.max_tokens:,} tokens: too few for a haystack with a needle.")
        return
    c1, c2, c3, c4 = st.columns(4)
    heads = model.n_layers * model.n_heads - 1
    tokens = int(linked_number(c1, "Probe tokens", MIN_TOKENS, most, "atlas_tokens", value=min(2048, most),
                               step=256))
    needles = int(linked_number(c2, "Needles (depths)", 1, 8, "atlas_needles", value=3))
    k = int(linked_number(c3, "Heads knocked out", 1, heads, "atlas_k", value=min(KNOCKOUT_K, heads),
                          disabled=model.kind != "decoder"))
    hay = c4.radio("Haystack", ["bundled sentences", "your text"], key="atlas_haystack", bind="query-params",
                   help="Your text: the needles are hidden in the text in the sidebar (cut to the probe's length).")
    text = f.text if hay == "your text" else None
    what = ("atlas", tokens, needles, k, text)
    result = held(model, what)
    # A toggle, not a button: the link keeps it, so a copied address reopens the atlas (from the shared views).
    on = st.toggle("Compute the head atlas", key="atlas_on", bind="query-params")
    if result is None and not on:
        st.caption(f"{needles} probes of {tokens:,} tokens" + (" and as many null probes, then the knock-out runs"
                   if model.kind == "decoder" else "") + ": a few forwards of the whole probe each.")
        return
    if result is None:
        try:
            result = derived(model, what, lambda: _run(model, text, tokens, needles, k))
        except ValueError as e:
            st.error(plain(str(e)))
            return
    frame, check = result
    probe = frame.attrs["probes"][0]
    start = probe["needle"][0]
    head_chart(atlas_grid(frame, f"Head classes on {len(frame.attrs['probes'])} probes of "
                                 f"{frame.attrs['tokens']:,} tokens · click a head to open it at the needle"),
               "atlas_grid", model.n_heads, text=probe["text"],
               at={"token": start, "zoom_start": max(0, start - 16)})
    counts = frame.role.value_counts()
    st.caption(" · ".join(f"{counts.get(r, 0)} {r}" for r in ("retrieval", "sink", "streaming", "full"))
               + (f" · the model answered the first probe's code {probe['answer']} with "
                  f"“{plain(probe['generated'].strip()[:40])}”" if frame.attrs["retrieval"] else
                  " · an encoder generates nothing: retrieval needs a causal language model"))
    if check is not None:
        st.subheader("Knocking out the retrieval heads")
        st.dataframe(check.table(), hide_index=True, key="atlas_knockout")
    with st.expander("What each score means"):
        st.markdown(ABOUT)
    st.dataframe(frame, hide_index=True, key="atlas_table")
    st.download_button("Download the atlas (CSV)", frame.to_csv(index=False), f"{file_stem(f.model_key)}_atlas.csv",
                       "text/csv", key="atlas_csv", on_click="ignore")
