"""Views derived from a trace (display options applied, rollout, head statistics), shared by all sessions.

A view is large (a trace's worth of arrays with "hide special tokens" on), so sessions do not keep their own: every
session asks one cache, bounded in bytes (ATTNVIZ_MAX_VIEWS_MB): sessions looking at the same trace with the same
options share one view, and the least recently used go first. It is the trace store's LRU (ui/traces.py) with its
own budget: a view is not a trace the job line could drop.
"""

from __future__ import annotations

import weakref

from attnviz import settings
from attnviz.ui.traces import LRU

_views = LRU(budget_mb=settings.max_views_mb)  # (id(trace), what) -> (reference to the trace, view)


def _ref(trace):
    try:
        return weakref.ref(trace)
    except TypeError:  # a trace type without weak references: hold it (the cache is bounded all the same)
        return lambda: trace


def derived(trace, what, compute):
    """``compute()``, a view of ``trace`` described by ``what`` (hashable), from the shared cache if there.

    Entries are keyed by the trace's identity, checked through a weak reference, so a new trace never gets
    an old trace's view, and a session's own trace (a model trained on the Train page) only its own.
    """
    value = held(trace, what)
    if value is None:
        value = compute()  # outside the lock: other sessions' views are not held up
        _views.put((id(trace), what), (_ref(trace), value))
    return value


def held(trace, what):
    """The view of ``trace`` described by ``what`` if the cache holds it, else None (nothing is computed)."""
    hit = _views.get((id(trace), what))
    return hit[1] if hit is not None and hit[0]() is trace else None


def held_bytes() -> int:
    """Bytes of views the cache holds now, all sessions together."""
    return _views.held_bytes()


def clear() -> None:
    _views.clear()
