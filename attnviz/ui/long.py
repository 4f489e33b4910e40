"""The Long text page's Streamlit pieces: the upload, the long trace with its survey and a progress bar."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

import streamlit as st

from attnviz.analysis.long import Reducer, Survey, survey, traced
from attnviz.backends import normalise
from attnviz.backends.common import MAX_CHARS
from attnviz.ui.frame import BAR_KEY, resolve
from attnviz.ui.share import max_chars

MAX_UPLOAD_BYTES = 2 * 2**20  # a .txt or .md of 2 MB is far more text than 16,384 tokens


def uploaded_text(text: str) -> str:
    """The uploaded file's text when there is one (a plain message when it cannot be read), else ``text``."""
    file = st.file_uploader("…or upload a document (.txt, .md)", type=["txt", "md"], key="upload",
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


class _Entry(NamedTuple):
    model: object  # the backend that made the trace (a session's own model is not another session's)
    trace: object
    reducer: Reducer  # the survey read during the forward
    surveys: dict  # overview size -> Survey


# The last two long traces with their surveys, shared by every session, keyed by (model key, text, limit). Not
# st.cache_resource: it records the progress bar's calls and cannot replay them in another session.
_LONG: dict = {}
_lock = threading.Lock()


def long_trace(key: str, text: str, limit: int):
    """The trace of ``text`` (up to ``limit`` tokens) with a survey of every head read during the same forward
    (``capture.reducing``: each weight is computed once), a progress bar while it runs."""
    model = resolve(key)
    k = (normalise(key), text, limit)
    with _lock:
        if k in _LONG and _LONG[k].model is model:
            return _LONG[k].trace
    bar = _Bar("Running the model and reading all its heads…", "forward")
    trace, reducer = traced(model, text, limit, DETAIL, bar)
    bar.done()
    with _lock:
        _LONG[k] = _Entry(model, trace, reducer, {})
        while len(_LONG) > 2:  # a 16,384-token builtin:seed trace holds ~1.5 GB
            _LONG.pop(next(iter(_LONG)))
    return trace


def cached_survey(stack, overview: int) -> Survey:
    """The survey of ``stack`` (a long trace's self-attention): the one read during its forward, or, for a model
    whose attention the forward could not hand over (held eager), one pass over its weights with a progress bar."""
    with _lock:
        entry = next((e for e in _LONG.values() if e.trace.stack(None).weights is stack.weights), None)
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
