"""Views derived from a trace (display options applied, rollout, head statistics), shared by all sessions.

A view can be as large as its trace, so a copy per session grew with the visitors. Here every session asks one
cache, bounded in bytes (ATTNVIZ_MAX_VIEWS_MB): sessions looking at the same trace with the same options share one
view, and the least recently used go first.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict


from attnviz import settings

_lock = threading.Lock()
_items: OrderedDict = OrderedDict()  # (id(trace), what) -> (reference to the trace, value, bytes)


def nbytes(value) -> int:
    """The bytes of the arrays and traces inside ``value`` (anything with ``nbytes``; tuples, lists, dicts of them)."""
    if isinstance(getattr(value, "nbytes", None), int):  # numpy and torch arrays, traces
        return value.nbytes
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    return 0


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
    key = (id(trace), what)
    with _lock:
        hit = _items.get(key)
        if hit is not None and hit[0]() is trace:
            _items.move_to_end(key)
            return hit[1]
    value = compute()  # outside the lock: other sessions' views are not held up
    size, budget = nbytes(value), settings.max_views_mb() * 2**20
    with _lock:
        _items.pop(key, None)
        if size <= budget:
            _items[key] = (_ref(trace), value, size)
        total = sum(item[2] for item in _items.values())
        while total > budget:
            total -= _items.popitem(last=False)[1][2]
    return value


def held(trace, what):
    """The view of ``trace`` described by ``what`` if the cache holds it, else None (nothing is computed)."""
    with _lock:
        hit = _items.get((id(trace), what))
        return hit[1] if hit is not None and hit[0]() is trace else None


def held_bytes() -> int:
    """Bytes of views the cache holds now, all sessions together."""
    with _lock:
        return sum(item[2] for item in _items.values())


def clear() -> None:
    with _lock:
        _items.clear()
