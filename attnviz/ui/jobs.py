"""One line for heavy work (long forwards, generation, training, head ablation, attention flow), shared by all
sessions, admitted by count and by memory.

At most ATTNVIZ_MAX_JOBS run at once, and a job starts only while what the running jobs will hold plus the
traces the store keeps (ui/traces.py) stays under ATTNVIZ_MAX_TRACE_MB (kept traces go first, oldest first, to make room); a
job that cannot fit alone is refused up front with its number. The others wait in order and their visitors
see their place in line. Waiting touches Streamlit every half second and working calls ``checkpoint()`` at every
step (a tile of a long forward), so a job that is no longer wanted ends there: a rerun of the same session
(``runner.fastReruns = false`` hands the running script the rerun) and a closed tab (Streamlit stops a
disconnected session's script) both raise inside it. A job that declares its memory takes the server's warm
reserve (``collect.release``), touched again once it ends with the line idle (``collect.refill``).
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager, nullcontext
from typing import Callable, NamedTuple

import streamlit as st
from streamlit.runtime.scriptrunner_utils.script_run_context import get_run_yield_check

from attnviz import settings
from attnviz.ui import collect

_cond = threading.Condition()
_line: list = []  # tickets of the jobs waiting, first in line first
_running: list = []  # tickets of the jobs running


class _Ticket:
    """One job's place: compared by identity (two visitors' equal jobs are two places)."""

    def __init__(self, what: str, mb: float):
        self.what, self.mb = what, mb  # mb: what the job will hold while it runs (and after, in a cache)


class _Keeper(NamedTuple):
    held_mb: Callable[[], float]  # MB of traces alive now that the store made
    evict: Callable[[], bool]  # drop its oldest entry; False when it keeps none


_keepers: list[_Keeper] = []


def keeper(held_mb: Callable[[], float], evict: Callable[[], bool]) -> None:
    """Count the traces the store made (kept, or still drawn by a page) against ATTNVIZ_MAX_TRACE_MB; ``evict``
    makes room for a job that would not fit. The trace store (ui/traces.py) registers once (tests/unit/test_layers.py).

    Neither may call into this module (they run under its lock)."""
    _keepers.append(_Keeper(held_mb, evict))


def running() -> int:
    with _cond:
        return len(_running)


def waiting() -> int:
    with _cond:
        return len(_line)


def held_mb() -> float:
    """MB the running jobs will hold plus the traces the store keeps: what ATTNVIZ_MAX_TRACE_MB bounds."""
    with _cond:
        return _held()


def _held() -> float:
    return sum(t.mb for t in _running) + sum(k.held_mb() for k in _keepers)


def _take(ticket: _Ticket) -> int:
    """0 once ``ticket`` holds a slot, else its place in line (1: next)."""
    with _cond:
        if _line[0] is ticket and len(_running) < settings.max_jobs():
            budget = settings.max_trace_mb()
            while _held() + ticket.mb > budget and any(k.evict() for k in _keepers):
                pass  # one kept trace fewer each time round
            if _held() + ticket.mb > budget:
                gc.collect()  # finished page runs' traces wait in cycles for a full collection (ui/collect.py)
            if _held() + ticket.mb <= budget:
                _line.pop(0)
                _running.append(ticket)
                _cond.notify_all()
                return 0
        return _line.index(ticket) + 1


def checkpoint() -> None:
    """Where a job that is no longer wanted (a rerun, a closed tab) stops: call it at every step of the work."""
    check = get_run_yield_check()
    if check is not None:
        check()


def for_tokens(n: int, mb: Callable[[int], float]):
    """A slot for a forward of ``n`` tokens that will hold ``mb(n)`` MB, when ``n`` is over ATTNVIZ_HEAVY_TOKENS;
    a shorter text runs at once, beside the line (and its size is never estimated)."""
    if n <= settings.heavy_tokens():
        return nullcontext()
    return slot(f"This {n:,}-token text", mb(n))


HEAVY_READ_MB = 64  # a file read that decodes more than this at once is heavy work
_in_job = threading.local()  # .job: this thread runs inside a slot


def for_bytes(what: str, nbytes: int):
    """A slot for reading a file that decodes up to ``nbytes`` at once, when that is over HEAVY_READ_MB (a Parquet
    file with huge pages): it waits for room like a long forward. Ordinary files are read at once, beside the line."""
    if nbytes <= HEAVY_READ_MB * 2**20:
        return nullcontext()
    return slot(what, nbytes / 2**20, advice="Try a smaller file.")


@contextmanager
def slot(what: str, mb: float = 0.0, advice: str = "Try a shorter text."):
    """Run the body as one heavy job that will hold ``mb`` MB: wait for a free slot and room first, saying where in
    line this session is. A job over ATTNVIZ_MAX_TRACE_MB alone is refused with a ValueError in plain words, ending in
    ``advice``. A slot asked for inside another one of the same thread is part of that job: it runs at once."""
    if getattr(_in_job, "job", False):
        yield
        return
    budget = settings.max_trace_mb()
    if mb > budget:
        raise ValueError(f"{what} would hold about {mb:,.0f} MB, over this server's memory for traces of "
                         f"{budget:,.0f} MB (ATTNVIZ_MAX_TRACE_MB). {advice}")
    ticket, shown = _Ticket(what, float(mb)), None
    with _cond:
        _line.append(ticket)
    try:
        while place := _take(ticket):
            if shown is None:
                shown = st.empty()
            room = f", {budget:,.0f} MB for traces" if mb else ""
            # Also where a rerun or a closed tab ends the wait: Streamlit raises in the script here.
            shown.info(f"Waiting for a free slot: {settings.max_jobs()} heavy jobs run at once on this server{room}. "
                       f"{what} is number {place} in line.", icon=":material/hourglass_top:")
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
    if mb:
        collect.release()  # its allocations take the reserve's warm pages next
    _in_job.job = True
    try:
        yield
    finally:
        _in_job.job = False
        with _cond:
            _running.remove(ticket)
            _cond.notify_all()
            idle = not _running and not _line
    if mb and idle:  # reached when the body ended: a job stopped by a closed tab or a rerun leaves the server idle
        collect.refill()
