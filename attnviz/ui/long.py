"""The Attention page past CELLS tokens: the long trace with its survey and a progress bar, and the explorer drawn
from them (every head pooled, a head at block resolution with an exact zoomed window, a token's reach across the
document, attention sinks and distance profiles)."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd
import streamlit as st

from attnviz import analysis, settings
from attnviz.backends import footprint
from attnviz.analysis.long import SURVEY_TILES, Reducer, Survey, survey, survey_tile, trace_with_survey
from attnviz.core.tokens import clean
from attnviz.core.weights import block_size
from attnviz.figures import long as figs
from attnviz.figures.explorer import CELLS, DETAIL, WINDOW_MAX, Explorer, is_long, overview_size
from attnviz.ui import jobs
from attnviz.ui.frame import STILL_CSS, layer_head, max_tokens, resolve
from attnviz.ui.heads import head_chart
from attnviz.ui.progress import Bar
from attnviz.ui.traces import STORE, Kind, nbytes
from attnviz.ui.escape import plain
from attnviz.ui.links import linked_number


FOCUS = 1  # the token a long text's reach opens on: the survey keeps its column, read during the forward
class _Survey(NamedTuple):
    reducer: Reducer  # the survey read during the forward
    surveys: dict  # overview size -> Survey
    model: object = None  # the backend that made the trace (a session's own model is not another session's)

    @property
    def nbytes(self) -> int:
        return nbytes([vars(layer) for layer in self.reducer.layers]) + nbytes(self.surveys)


def _job_mb(model, n: int, tiles: int = SURVEY_TILES) -> float:
    """MB a long forward of ``n`` tokens and its page hold: the trace, its survey (pooled maps of DETAIL blocks a
    side, what each key receives, the distance profile, the FOCUS column) twice (as read, and as the page's arrays)
    and one survey tile of ``tiles`` TILE_FLOATS with the buffers its reductions are written into."""
    L, H, b = model.n_layers, model.n_heads, block_size(n, DETAIL)
    nb = -(-n // b)
    survey_bytes = L * (4 * (2 * H + 1) * nb * nb + 2 * 4 * H * n + 8 * H * (2 * n + 1))
    return footprint.trace_mb(model, n) + (2 * survey_bytes + survey_tile(H, n, b, tiles)[2]) / 2**20


def _tiles(model, n: int) -> int:
    """The survey's tiles for ``n`` tokens: SURVEY_TILES TILE_FLOATS (fewer operations, faster beside a busy
    browser), or one where a job with those would not fit ATTNVIZ_MAX_TRACE_MB."""
    return SURVEY_TILES if _job_mb(model, n, SURVEY_TILES) <= settings.max_trace_mb() else 1


class _Stopped(NamedTuple):
    model: object  # the backend whose forward was stopped
    layers: list  # the survey's layers it read whole (Reducer.whole)

    @property
    def nbytes(self) -> int:
        return nbytes([vars(layer) for layer in self.layers])


class _Entry(NamedTuple):
    trace: object
    survey: _Survey


# Long traces are entries of the trace store (ui/traces.py) keyed ("long", model key, text, limit, chat), their
# survey attached to their weights for as long as anything holds them (a page mid-run keeps its survey though other
# sessions push its trace out of the store); what a stopped long forward read whole is an entry keyed ("stopped", …):
# a Stop, a rerun or a closed tab mid-forward keeps it, and the next run of that text reads only the layers it lacks.
_SURVEYS = STORE.extras  # weights -> _Survey
_LONG = Kind(STORE, "long", lambda trace: _Entry(trace, _SURVEYS.get(trace.stack(None).weights)))
_STOPPED = Kind(STORE, "stopped")


def _found(k: tuple, model):
    """The long trace of key ``k`` that ``model`` made, kept or still alive, else None."""
    trace = STORE.get(k)
    if trace is None:
        return None
    paired = STORE.extra(trace.stack(None).weights)
    return trace if paired is not None and paired.model is model else None


def surveyed_if_long(model_key: str, text: str, chat: bool = False, model=None):
    """The Attention page's path for a long text (``frame(when_long=…)``, which hands it the backend ``model``): over
    CELLS tokens (counted by the model's tokenizer before any forward), the long trace with its survey; else None,
    and the frame traces the text for the cell-by-cell explorer. A text is traced once, one way or the other.
    ``chat``: in the model's chat template."""
    model, cap = resolve(model_key) if model is None else model, max_tokens()
    if not (_found(("long", model_key, text, cap, chat), model) is not None
            or is_long(model.limit(cap)) and is_long(footprint.n_tokens(model, text, cap, chat))):
        return None
    st.markdown(f"<style>{STILL_CSS}</style>", unsafe_allow_html=True)  # our own constant, no user text
    return surveyed_trace(model_key, text, cap, chat, model)


def made_long(trace) -> bool:
    """Whether ``trace`` was made by ``surveyed_trace`` (the Attention page shows it with ``explore``)."""
    return STORE.extra(trace.stack(None).weights) is not None


def surveyed_trace(model_key: str, text: str, limit: int, chat: bool = False, model=None):
    """The trace of ``text`` (up to ``limit`` tokens; ``chat``: in the model's chat template) under ``model_key``'s
    backend ``model`` (resolved here when not given) with a survey of every head read during the same forward
    (``capture.reducing``: each weight is computed once), a progress bar while it runs. Two sessions asking the same
    text at once run it once. A forward stopped (Stop, a rerun, a closed tab) keeps the survey's layers it read
    whole, as its message says: the next run of this text runs the model again but reads only the other layers'
    heads (the part of the forward that costs most), to the survey an uninterrupted run reads."""
    model = resolve(model_key) if model is None else model
    k = ("long", model_key, text, limit, chat)
    trace = _found(k, model)
    if trace is not None:
        return trace
    with STORE.making(k):  # the store's lock is not held: the forward waits in line below
        trace = _found(k, model)
        if trace is None:
            trace = _read(k, model, text, limit, chat)
    return trace


def _read(k: tuple, model, text: str, limit: int, chat: bool):
    """``surveyed_trace``'s forward, kept in the store with its survey."""
    n = footprint.n_tokens(model, text, limit, chat)
    stopped = STORE.pop(("stopped", *k[1:]))
    kept = stopped.layers if stopped is not None and stopped.model is model else []
    L = model.n_layers
    rest = "all its heads" if not kept else "the heads of its last " + (
        "layer" if L - len(kept) == 1 else f"{L - len(kept)} layers")
    bar = Bar(f"Running the model and reading {rest}…", "forward", L)
    tiles = _tiles(model, n)
    reducer = Reducer(DETAIL, L, bar, tiles, (FOCUS,), kept)
    try:
        with jobs.for_tokens(n, partial(_job_mb, model, tiles=tiles)):
            trace, reducer = trace_with_survey(model, text, limit, chat=chat, reducer=reducer)
    except BaseException:  # a Stop, a rerun, a closed tab: the layers read whole wait for this text's next run
        whole = bar.keeps(reducer.whole())
        if whole:
            STORE.put(("stopped", *k[1:]), _Stopped(model, whole))
        raise
    bar.done()
    reducer.progress = None  # the bar is this run's: a shared survey must not keep it
    STORE.attach(trace.stack(None).weights, _Survey(reducer, {}, model))
    STORE.put(k, trace)
    return trace


def cached_survey(stack, overview: int) -> Survey:
    """The survey of ``stack`` (a long trace's self-attention): the one read during its forward, or, for a model
    whose attention the forward could not hand over (held eager), one pass over its weights with a progress bar."""
    entry = STORE.extra(stack.weights)
    if entry is None:
        raise ValueError("this trace was not made by surveyed_trace")
    if overview not in entry.surveys:
        if entry.reducer.complete(stack.weights.shape):
            entry.surveys[overview] = entry.reducer.result(overview)
        else:
            L, H = stack.weights.shape[:2]
            bar = Bar(f"Reading all {L * H} heads, tile by tile…", "survey")
            entry.surveys[overview] = survey(stack.weights, overview, DETAIL, progress=bar, keys=(FOCUS,))
            bar.done()
    return entry.surveys[overview]


def initial(key: str, value: int) -> dict:
    """A widget's default, unless a click or a box already set it (a default beside that makes Streamlit warn)."""
    return {} if key in st.session_state else {"value": value}


# Callbacks and the fragment live here, not in the page: a function defined in a page keeps the page's variables
# (its trace among them) alive in the session's state for as long as the widget lives.


def zoom_to_box(n_tokens: int) -> None:
    """A box dragged on the block map: the window becomes the tokens it spans (at most WINDOW_MAX). A drag of a few
    pixels on one side is a band across the whole of the other axis (plotly's one-axis selection): that axis is left out."""
    boxes = st.session_state["long_blocks"].selection.box
    if boxes:
        spans = [sorted(boxes[0][a]) for a in ("x", "y") if len(boxes[0].get(a) or ()) == 2]
        spans = [s for s in spans if s[1] - s[0] < 0.99 * n_tokens] or spans  # (lo, hi) per axis the drag chose
        if not spans:
            return
        first = int(np.clip(min(lo for lo, _ in spans), 0, n_tokens - 1))
        st.session_state["zoom_start"] = first
        st.session_state["zoom_size"] = int(np.clip(np.ceil(max(hi for _, hi in spans)) - first, 1, WINDOW_MAX))


def follow_point() -> None:
    """A point clicked on either line of the reach chart: its position becomes the token followed."""
    points = st.session_state["long_reach"].selection.points
    if points and "x" in points[0]:
        st.session_state["token"] = int(points[0]["x"])


def follow_row(key: str, positions: list[int]) -> None:
    """A row picked in the table of strongest positions: its position becomes the token followed."""
    rows = st.session_state[key].selection.rows
    if rows:
        st.session_state["token"] = positions[rows[0]]


@st.fragment
def detail(model_key: str, text: str, cap: int, overview: int, layer: int, head: int | None, reduce: str, name: str,
           chat: bool = False) -> None:
    """The block map and its exact window: a zoom (typed, or a box dragged on the map) reruns only this. It takes
    keys, not the trace: a fragment lives in the session's state."""
    trace = surveyed_trace(model_key, text, cap, chat)
    ex = Explorer(trace, survey=cached_survey(trace.stack(None), overview))
    T = ex.Tq
    # The window's default size follows the text (a short text's 16 stays no longer than that text does).
    default, before = min(64, T), st.session_state.get("zoom_default")
    if before is not None and before != default and st.session_state.get("zoom_size") == before:
        st.session_state["zoom_size"] = default
    st.session_state["zoom_default"] = default
    c1, c2 = st.columns(2)
    start = linked_number(c1, "Window from token", 0, T - 1, "zoom_start", **initial("zoom_start", 0))
    size = linked_number(c2, "Window size", 1, WINDOW_MAX, "zoom_size",
                         help=f"At most {WINDOW_MAX} tokens: every cell is drawn with its exact weight.",
                         **initial("zoom_size", default))
    start, stop = int(start), min(T, int(start) + int(size))
    blocks = ex.block_map(layer, head, reduce)  # (s, s)
    # One above the other: beside the block map, a window's 24 key labels and 64 rows had ~160 px.
    st.plotly_chart(figs.blocks_heatmap(blocks, ex.starts(), ex.block()[0], T, name, reduce, (start, stop)),
                    key="long_blocks", on_select=partial(zoom_to_box, T), selection_mode="box")
    w = ex.window(layer, head, start, stop)  # (n, n) exact
    st.plotly_chart(figs.window_heatmap(w, start, ex.q_tokens, name), key="long_window")
    st.caption(f"These rows keep {w.sum(1).mean():.1%} of their weight inside the window on average; "
               "the rest goes to tokens outside it.")


TOP_K = 10
RANGE_LIMITS = {  # analyses that need every weight at once, with what they cost
    "Attention rollout and flow (Analysis page)": "multiply L dense T×T matrices (rollout is O(L·T³)); "
                                                   "they run on a text's first ATTNVIZ_PAGE_TOKENS tokens (512 by default)",
    "Head importance by ablation (Analysis page)": "runs the model once per head: at this length each run is a full forward",
    "Token focus and every head cell by cell (this page)": f"draws T×T cells per head: up to {CELLS} tokens",
}


def explore(f) -> None:
    """The Attention page past CELLS tokens, from the frame ``f`` of a long trace: every head pooled, detail and
    zoom, a token's reach, attention received and sinks, distance profiles."""
    cap = max_tokens()
    stack = f.trace.stack(None)  # self-attention; an encoder–decoder's encoder
    tokens, T = stack.queries.tokens, stack.queries.n_tokens
    L, H = stack.weights.shape[:2]
    if f.trace.truncated:  # the status line says so too; this says which limit
        st.info(f"The text has more tokens than this page takes: the first {T:,} are shown and "
                f"{f.trace.truncated:,} were cut (limit {f.model.limit(cap):,}: ATTNVIZ_MAX_TOKENS "
                "or the model's own position limit).")

    st.title("Attention")
    st.caption(f"{T:,} tokens: more than {CELLS} are drawn as pooled blocks, with an exact window to zoom into.")
    if f.trace.kind == "encoder-decoder":
        st.caption("An encoder–decoder: this page shows the encoder's self-attention.")
    reduce = st.radio("Pool blocks by their", list(figs.REDUCES), key="pool", bind="query-params", horizontal=True,
                      help="max keeps a single sharp weight visible; mean shows where weight lies.")
    small = overview_size(L, H)
    surveyed = cached_survey(stack, small)
    ex = Explorer(f.trace, survey=surveyed)
    layer, head = layer_head(L, H, with_mean=True)
    name = ex.head_name(layer, head)

    st.subheader("Every head")
    mosaic = figs.head_mosaic(ex.pooled("overview", reduce), reduce, T, ex.block("overview")[0], (layer, head))
    head_chart(mosaic, "long_overview", H, page=None)  # point i of the mosaic is head i, row by row

    st.subheader("Detail and zoom")
    detail(f.model_key, f.text, cap, small, layer, head, reduce, name, f.chat)

    st.subheader("A token's reach")
    c1, c2 = st.columns([1, 2])
    word = c2.text_input("Find a word", key="find",
                         help="Lists where each word that reads this starts, however the tokenizer cut it into pieces.")
    if word:
        hits = analysis.long.find(tokens, word, stack.queries.word_ids)
        if hits:
            c2.caption(f"{len(hits):,} positions: " + ", ".join(f"{i:,}" for i in hits[:40])
                       + (" …" if len(hits) > 40 else ""))
            if c2.button(f"Go to the first ({hits[0]:,})", key="find_go"):
                st.session_state["token"] = hits[0]
        else:
            c2.caption(f"No word reads {plain(word)!s}.")
    focus = int(linked_number(c1, "Token position", 0, T - 1, "token", **initial("token", min(FOCUS, T - 1))))
    heads = stack.weights.heads(head)  # the heads a view reads
    row, col = ex.line(layer, head, focus, "to"), ex.line(layer, head, focus, "from")  # (Tk,), (Tq,)
    st.plotly_chart(figs.reach_lines(row, col, focus, clean(tokens[focus]), name), key="long_reach",
                    on_select=follow_point, selection_mode="points")
    direction = st.radio("Shade the text by", ["what it attends to", "what attends to it"], key="reach_dir",
                         horizontal=True, bind="query-params")
    by_row = direction == "what it attends to"
    shade = row if by_row else col
    st.html(figs.reach_html(tokens, stack.queries.word_ids, shade, focus))
    top = analysis.long.top_keys(shade, TOP_K)
    table = f"reach_top_{focus}_{'row' if by_row else 'column'}"  # a new token's table starts with no row picked
    st.dataframe(pd.DataFrame(
        [(int(i), float(shade[i]), *analysis.long.context(tokens, int(i))) for i in top],
        columns=["position", "weight", "before", "token", "after"],
    ), hide_index=True, key=table, on_select=partial(follow_row, table, [int(i) for i in top]),
        selection_mode="single-row")
    st.caption("Click a point on either line, or pick a row of the table, to follow that token.")

    st.subheader("Attention received and sinks")
    share = analysis.long.first_token_share(surveyed)
    st.plotly_chart(figs.sink_grid(share, analysis.long.SINK_SHARE), key="long_sinks")
    delim = analysis.long.delimiters(tokens, stack.queries.special)
    found = analysis.long.sinks(surveyed)
    st.caption((f"{len(found)} sink heads: " + ", ".join(f"L{l} H{h} ({s:.0%})" for l, h, s in found[:12])) if found
               else f"No head puts {analysis.long.SINK_SHARE:.0%} or more of its weight on the first token.")
    if delim.any():
        st.plotly_chart(figs.sink_grid(analysis.long.delimiter_share(surveyed, delim), analysis.long.SINK_SHARE,
                                       "delimiters (punctuation and special tokens)"), key="long_delims")
    received = surveyed.received[layer, heads].mean(0)  # (Tk,)
    st.plotly_chart(figs.received_line(received, T, name), key="long_received")

    st.subheader("Distance profile")
    st.plotly_chart(figs.distance_profile(surveyed.distance[layer], analysis.long.distance_labels(surveyed.edges),
                                          f"layer {layer}", head), key="long_distance")

    with st.expander("What does not run at this length"):
        st.markdown("\n".join(f"- **{k}**: {v}." for k, v in RANGE_LIMITS.items()))
