"""The Long text page's Streamlit pieces: the upload, the cached survey with a progress bar, cached columns."""

from __future__ import annotations

import threading

import streamlit as st

from attnviz.analysis.long import column, survey
from attnviz.backends.common import MAX_CHARS
from attnviz.ui.share import max_chars

MAX_UPLOAD_BYTES = 2 * 2**20
QUICK_SURVEY = 2**25  # weights (L·H·T²) a survey reads without a progress bar: 512 tokens of a 6×12-head model  # a .txt or .md of 2 MB is far more text than 16,384 tokens


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


# The last two surveys, shared by every session, keyed by what made the trace (model, text, length). Not
# st.cache_resource: it records the progress bar's calls and cannot replay them in another session.
_SURVEYS: dict = {}
_lock = threading.Lock()


def cached_survey(stack, sizes: tuple):
    """``survey(weights, *sizes)`` with a progress bar while it runs."""
    key = (stack.queries.model, stack.queries.text, stack.queries.n_tokens, sizes)
    with _lock:
        if key in _SURVEYS:
            return _SURVEYS[key]
    L, H, Tq, Tk = stack.weights.shape
    if L * H * Tq * Tk <= QUICK_SURVEY:  # milliseconds: a bar that comes and goes would only delay the page
        result = survey(stack.weights, *sizes)
    else:
        bar = st.progress(0.0, text=f"Reading all {L * H} heads, tile by tile…")
        result = survey(stack.weights, *sizes, progress=bar.progress)
        bar.empty()
    with _lock:
        _SURVEYS[key] = result
        while len(_SURVEYS) > 2:
            _SURVEYS.pop(next(iter(_SURVEYS)))
    return result


def cached_column(stack, layer: int, head: int | None, key: int):
    """``column`` of the stack's weights, remembered for this session's last few (layer, head, key)."""
    kept = st.session_state.setdefault("long_columns", {})
    k = (stack.queries.model, stack.queries.text, stack.queries.n_tokens, layer, head, key)
    if k not in kept:
        if len(kept) >= 8:
            kept.pop(next(iter(kept)))
        kept[k] = column(stack.weights, layer, head, key)
    return kept[k]
