"""The one store of traces shared by every session: the cell-by-cell traces, the long traces with their surveys,
and what a stopped long forward read whole, each an entry whose key starts with its kind.

Traces are frozen with read-only arrays, so one object is shared safely between sessions. The store keeps the
last few of each kind (``ENTRIES``) and a live table of every value it made that is still alive: a trace a page
still draws is found again, not redone (a zoom's fragment rerun must not wait in line for room its own trace
takes). What it holds counts against ATTNVIZ_MAX_TRACE_MB through the job line (ui/jobs.py), which drops the
oldest kept entry to make room for a job. Not ``st.cache_resource``: that records a function's element calls (a
progress bar, the line's notice) and replays them in another session.

``LRU`` is the one byte-bounded least-recently-used cache of the app; ui/derived.py's views use it too, with
their own budget (ATTNVIZ_MAX_VIEWS_MB).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Callable

from attnviz.ui import jobs


def nbytes(value) -> int:
    """The bytes of the arrays and traces inside ``value`` (anything with ``nbytes``; tuples, lists, dicts of them)."""
    if isinstance(getattr(value, "nbytes", None), int):  # numpy and torch arrays, traces
        return value.nbytes
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    return 0


class LRU:
    """Values by key, least recently used first out: at most ``entries[kind]`` of a kind (``key[0]``), and at
    most ``budget_mb()`` MB in all when given (a value over it alone is returned, never kept). A value that takes
    weak references stays found (``get``) for as long as anything holds it, kept or not; ``attach`` hangs an extra
    on a value for as long as its ``handle`` lives (a long trace's survey on its weights)."""

    def __init__(self, budget_mb: Callable[[], float] | None = None, entries: dict | None = None,
                 counted_live: tuple = ()):
        self._lock = threading.Lock()
        self._kept: OrderedDict = OrderedDict()  # key -> (value, bytes), last used last
        self._live: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> value still alive
        self._making: dict = {}  # key -> [lock, users]: one computation per key at a time
        self.extras: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # handle -> extra
        self.budget_mb, self.entries, self.counted_live = budget_mb, entries or {}, counted_live

    def get(self, key):
        """The value of ``key``, kept or still alive (kept again: last used), else None."""
        with self._lock:
            hit = self._kept.get(key)
            if hit is not None:
                self._kept.move_to_end(key)
                return hit[0]
            value = self._live.get(key)
            if value is not None:
                self._keep(key, value)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            try:
                self._live[key] = value
            except TypeError:  # no weak references: found only while kept
                pass
            self._keep(key, value)

    def _keep(self, key, value) -> None:
        size = nbytes(value)
        self._kept.pop(key, None)
        budget = None if self.budget_mb is None else self.budget_mb() * 2**20
        if budget is None or size <= budget:
            self._kept[key] = (value, size)
        most = self.entries.get(key[0]) if isinstance(key, tuple) else None
        while most is not None and sum(k[0] == key[0] for k in self._kept) > most:
            del self._kept[next(k for k in self._kept if k[0] == key[0])]
        while budget is not None and sum(s for _, s in self._kept.values()) > budget:
            self._kept.popitem(last=False)

    def make(self, key, compute: Callable[[], object]):
        """The value of ``key``, computed by ``compute()`` when the store has none: two callers asking the same key
        at once compute it once. ``compute`` runs outside the store's lock (it may wait in the job line)."""
        value = self.get(key)
        if value is None:
            with self.making(key):
                value = self.get(key)
                if value is None:
                    value = compute()
                    self.put(key, value)
        return value

    @contextmanager
    def making(self, key):
        """The per-key lock of ``make`` for a caller that puts its value itself (``put``) or not at all."""
        with self._lock:
            entry = self._making.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if not entry[1]:
                    del self._making[key]

    def pop(self, key):
        """Drop ``key`` from what is kept (a live value is still found) and return its value, or None."""
        with self._lock:
            hit = self._kept.pop(key, None)
            return None if hit is None else hit[0]

    def attach(self, handle, extra) -> None:
        with self._lock:
            self.extras[handle] = extra

    def extra(self, handle):
        with self._lock:
            return self.extras.get(handle)

    def kept(self, kind) -> dict:
        """The values of ``kind`` kept now, by key (the kind left out), oldest first."""
        with self._lock:
            return {k[1:]: v for k, (v, _) in self._kept.items() if k[0] == kind}

    def drop(self, match: Callable[[tuple], bool]) -> None:
        """Forget every key ``match`` accepts, kept or alive."""
        with self._lock:
            for k in [k for k in self._kept if match(k)]:
                del self._kept[k]
            for k in [k for k in list(self._live.keys()) if match(k)]:
                self._live.pop(k, None)

    def held_bytes(self) -> int:
        """Bytes of what is kept, with the values still alive of the ``counted_live`` kinds and their extras."""
        with self._lock:
            counted = {k: s for k, (_, s) in self._kept.items()}
            for k, v in list(self._live.items()):
                if k[0] in self.counted_live and k not in counted:
                    counted[k] = nbytes(v)
            extras = sum(nbytes(e) for e in self.extras.values())
        return sum(counted.values()) + extras

    def evict(self) -> bool:
        """Drop the least recently used value kept; False when none is."""
        with self._lock:
            if not self._kept:
                return False
            self._kept.popitem(last=False)
            return True

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._live.clear()
            self.extras.clear()


class Kind(Mapping):
    """The values of one kind the store keeps, by key without the kind, each as ``show(value)``; ``clear`` forgets
    them (kept or alive)."""

    def __init__(self, store: LRU, kind: str, show: Callable = lambda value: value):
        self.store, self.kind, self.show = store, kind, show

    def __getitem__(self, key):
        return self.show(self.store.kept(self.kind)[key])

    def __iter__(self):
        return iter(self.store.kept(self.kind))

    def __len__(self) -> int:
        return len(self.store.kept(self.kind))

    def clear(self) -> None:
        self.store.drop(lambda key: key[0] == self.kind)


# Kinds: "cells" (a page's trace, cell by cell), "session" (the same of a model trained on the Train page, keyed by
# its number, frame._serial), "long" (a long trace; its survey attached to its weights), "stopped" (what a stopped long
# forward read whole). A very long trace holds gigabytes: two of them at most.
ENTRIES = {"cells": 8, "session": 2, "long": 2, "stopped": 2}
STORE = LRU(entries=ENTRIES, counted_live=("long", "session"))
jobs.keeper(lambda: STORE.held_bytes() / 2**20, STORE.evict)
