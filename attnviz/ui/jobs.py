"""One line for heavy work (training, head ablation, attention flow), shared by all sessions.

At most ATTNVIZ_MAX_JOBS run at once; the others wait in order and their visitors see their place in
line. Waiting and working both touch Streamlit regularly, so a job that is no longer wanted ends at its
next step: a rerun of the same session (``runner.fastReruns = false`` hands the running script the rerun)
and a closed tab (Streamlit stops a disconnected session's script) both raise inside it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import streamlit as st

from attnviz import settings

_cond = threading.Condition()
_line: list = []  # tickets of the jobs waiting, first in line first
_running = 0


def running() -> int:
    with _cond:
        return _running


def waiting() -> int:
    with _cond:
        return len(_line)


def _take(ticket) -> int:
    """0 once ``ticket`` holds a slot, else its place in line (1: next)."""
    global _running
    with _cond:
        if _line[0] is ticket and _running < settings.max_jobs():
            _line.pop(0)
            _running += 1
            _cond.notify_all()
            return 0
        return _line.index(ticket) + 1


@contextmanager
def slot(what: str):
    """Run the body as one heavy job: wait for a free slot first, saying where in line this session is."""
    global _running
    ticket, shown = object(), None
    with _cond:
        _line.append(ticket)
    try:
        while place := _take(ticket):
            if shown is None:
                shown = st.empty()
            # Also where a rerun or a closed tab ends the wait: Streamlit raises in the script here.
            shown.info(f"Waiting for a free slot: {settings.max_jobs()} heavy jobs run at once on this server. "
                       f"{what} is number {place} in line.", icon="⏳")
            with _cond:
                _cond.wait(0.5)
    except BaseException:
        with _cond:
            if ticket in _line:
                _line.remove(ticket)
                _cond.notify_all()
        raise
    if shown is not None:
        shown.empty()
    try:
        yield
    finally:
        with _cond:
            _running -= 1
            _cond.notify_all()
