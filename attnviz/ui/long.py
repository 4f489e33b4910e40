"""The Long text page's Streamlit pieces: the upload, the long trace with its survey and a progress bar."""

from __future__ import annotations

import threading
import time
import weakref
from functools import partial
from typing import NamedTuple

import numpy as np
import streamlit as st

from attnviz.backends import footprint
from attnviz.analysis.long import Reducer, Survey, block_size, survey, traced, window
from attnviz.backends import normalise
from attnviz.backends.common import MAX_CHARS
from attnviz.figures import long as figs
from attnviz.ui import jobs
from attnviz.ui.derived import nbytes
from attnviz.core.weights import TILE_FLOATS
from attnviz.ui.frame import BAR_KEY, resolve
from attnviz.ui.share import linked_number, max_chars

MAX_UPLOAD_BYTES = 2 * 2**20  # a .txt or .md of 2 MB is far more text than 16,384 tokens


def uploaded_text(text: str) -> str:
    """The uploaded file's text when there is one (a plain message when it cannot be read), else ``text``."""
    file = st.file_uploader("…or upload a document (.txt, .md)", type=["txt", "md"], key="upload",
                            max_upload_size=MAX_UPLOAD_BYTES // 2**20,  # refused before it is buffered
                            help="An uploaded document replaces the text box's text (which takes at most "
                                 f"{max_chars():,} characters); links cannot carry it.")
    if file is None:
        return text
    if file.size > MAX_UPLOAD_BYTES:
        st.error(f"{file.name!r} is {file.size / 2**20:.1f} MB; this page takes files up to "
                 f"{MAX_UPLOAD_BYTES / 2**20:.0f} MB. The text box's text is shown instead.")
        return text
    try:
        body = file.getvalue().decode("utf-8")
    except UnicodeDecodeError:
        st.error(f"{file.name!r} is not UTF-8 text. The text box's text is shown instead.")
        return text
    note = f" (its first {MAX_CHARS:,} characters are read)" if len(body) > MAX_CHARS else ""
    st.caption(f"Showing the uploaded document: {len(body):,} characters{note}. A shared link holds the text box's "
               "text, not the upload.")
    return body


DETAIL = 256  # blocks a side of a head at block resolution
BAR_AFTER_S = 0.3  # a progress bar shows once the forward has run this long (a bar that comes and goes delays the page)
BAR_EVERY_S = 1.0  # and moves at most this often: each move re-renders the page, and a browser on the server's
# machine (the benchmarks, a laptop demo) took CPU from the forward (a bar moved per tile doubled a 4,096-token forward)


class _Bar:
    """``progress(fraction)`` that draws a bar only once the work has taken BAR_AFTER_S and moves it at most every
    BAR_EVERY_S, in a container keyed BAR_KEY + ``name`` (the frame's CSS places it by that prefix; two bars in one
    run need two names); ``done()`` removes it."""

    def __init__(self, text: str, name: str):
        self.text, self.key, self.bar = text, f"{BAR_KEY}_{name}", None
        self.last = time.perf_counter() - BAR_EVERY_S + BAR_AFTER_S  # the first draw comes BAR_AFTER_S in

    def __call__(self, fraction: float) -> None:
        jobs.checkpoint()  # every tile: a closed tab or a rerun stops the work here
        now = time.perf_counter()
        if now - self.last < BAR_EVERY_S:
            return
        self.last = now
        if self.bar is None:
            with st.container(key=self.key):
                self.bar = st.progress(fraction, text=self.text)
        else:
            self.bar.progress(fraction, text=self.text)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.empty()


class _Survey(NamedTuple):
    reducer: Reducer  # the survey read during the forward
    surveys: dict  # overview size -> Survey

    @property
    def nbytes(self) -> int:
        return nbytes([vars(layer) for layer in self.reducer.layers]) + nbytes(self.surveys)


def _job_mb(model, n: int) -> float:
    """MB a long forward of ``n`` tokens and its page hold: the trace, its survey (pooled maps of DETAIL blocks a
    side, what each key receives, the distance profile) twice (as read, and as the page's arrays) and one tile."""
    L, H, nb = model.n_layers, model.n_heads, -(-n // block_size(n, DETAIL))
    survey_bytes = L * (4 * (2 * H + 1) * nb * nb + 4 * H * n + 8 * H * (2 * n + 1))
    return footprint.trace_mb(model, n) + (2 * survey_bytes + 4 * TILE_FLOATS) / 2**20


class _Entry(NamedTuple):
    model: object  # the backend that made the trace (a session's own model is not another session's)
    trace: object
    survey: _Survey


# The last two long traces with their surveys, shared by every session, keyed by (model key, text, limit). Not
# st.cache_resource: it records the progress bar's calls and cannot replay them in another session. Every long
# trace still alive (kept here, or by a page still drawing it) counts against ATTNVIZ_MAX_TRACE_MB: the job line
# drops the oldest kept one to make room for a job.
_LONG: dict = {}
_lock = threading.Lock()
# A trace's survey, found by its weights for as long as anything holds them: a page mid-run keeps its survey
# though other sessions push its trace out of _LONG.
_SURVEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Every long trace not yet freed, by (model key, text, limit, model): a trace pushed out of _LONG that a page still
# draws is found again (a zoom's fragment rerun must not wait in line for room that its own trace takes).
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _kept_mb() -> float:
    with _lock:
        return sum(t.nbytes + _SURVEYS[t.stack(None).weights].nbytes for t in list(_LIVE.values())) / 2**20


def _evict() -> bool:
    with _lock:
        if not _LONG:
            return False
        _LONG.pop(next(iter(_LONG)))
        return True


jobs.keeper(_kept_mb, _evict)


def long_trace(key: str, text: str, limit: int):
    """The trace of ``text`` (up to ``limit`` tokens) with a survey of every head read during the same forward
    (``capture.reducing``: each weight is computed once), a progress bar while it runs."""
    model = resolve(key)
    k = (normalise(key), text, limit)
    with _lock:
        if k in _LONG and _LONG[k].model is model:
            return _LONG[k].trace
        alive = _LIVE.get((*k, id(model)))
        if alive is not None:
            _keep(k, _Entry(model, alive, _SURVEYS[alive.stack(None).weights]))
            return alive
    n = footprint.n_tokens(model, text, limit)
    bar = _Bar("Running the model and reading all its heads…", "forward")
    with jobs.for_tokens(n, partial(_job_mb, model)):
        trace, reducer = traced(model, text, limit, DETAIL, bar)
    bar.done()
    reducer.progress = None  # the bar is this run's: a shared survey must not keep it
    paired = _Survey(reducer, {})
    with _lock:
        _LIVE[(*k, id(model))] = trace
        _SURVEYS[trace.stack(None).weights] = paired
        _keep(k, _Entry(model, trace, paired))
    return trace


def _keep(k, entry: _Entry) -> None:
    """Keep ``entry`` in _LONG (under _lock), dropping the oldest beyond two."""
    _LONG[k] = entry
    while len(_LONG) > 2:  # a 16,384-token builtin:seed trace holds ~1.5 GB
        _LONG.pop(next(iter(_LONG)))


def cached_survey(stack, overview: int) -> Survey:
    """The survey of ``stack`` (a long trace's self-attention): the one read during its forward, or, for a model
    whose attention the forward could not hand over (held eager), one pass over its weights with a progress bar."""
    with _lock:
        entry = _SURVEYS.get(stack.weights)
    if entry is None:
        raise ValueError("this trace was not made by long_trace")
    if overview not in entry.surveys:
        if entry.reducer.complete(stack.weights.shape):
            entry.surveys[overview] = entry.reducer.result(overview)
        else:
            L, H = stack.weights.shape[:2]
            bar = _Bar(f"Reading all {L * H} heads, tile by tile…", "survey")
            entry.surveys[overview] = survey(stack.weights, overview, DETAIL, progress=bar)
            bar.done()
    return entry.surveys[overview]


WINDOW_MAX = 256  # tokens a side of the exact window: 65,536 cells, ~0.35 MB of float32 in the page


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
def detail(key: str, text: str, cap: int, overview: int, layer: int, head: int | None, reduce: str, name: str) -> None:
    """The block map and its exact window: a zoom (typed, or a box dragged on the map) reruns only this. It takes
    keys, not the trace: a fragment lives in the session's state."""
    stack = long_trace(key, text, cap).stack(None)
    survey, T = cached_survey(stack, overview), stack.queries.n_tokens
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
    blocks = (survey.layer_max[layer] if reduce == "max" else survey.pooled("detail", reduce)[layer].mean(0)) \
        if head is None else survey.pooled("detail", reduce)[layer, head]  # (s, s)
    # One above the other: beside the block map, a window's 24 key labels and 64 rows had ~160 px.
    st.plotly_chart(figs.blocks_heatmap(blocks, survey.starts["detail"], survey.block("detail"), T, name, reduce,
                                        (start, stop)), key="long_blocks", on_select=partial(zoom_to_box, T),
                    selection_mode="box")
    w = window(stack.weights, layer, head, start, stop)  # (n, n) exact
    st.plotly_chart(figs.window_heatmap(w, start, stack.queries.tokens, name), key="long_window")
    st.caption(f"These rows keep {w.sum(1).mean():.1%} of their weight inside the window on average; "
               "the rest goes to tokens outside it.")
