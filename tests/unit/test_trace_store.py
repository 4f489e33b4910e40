"""The one store of traces (attnviz/ui/traces.py), on real traces of builtin:seed: two sessions asking one trace at
once compute it once, a forward runs outside the store's lock, a trace a page still draws is found again after
its entry went, a session model's trace counts against the job line's memory, and the byte budget bounds a store
with one (the views' LRU)."""

import gc
import threading
import time

import pytest

import attnviz
from attnviz.ui import jobs
from attnviz.ui.traces import LRU, STORE

TEXT = "The store keeps one copy of every trace, however many sessions draw it."


@pytest.fixture
def seed():
    return attnviz.load("builtin:seed")


def test_two_callers_of_one_key_compute_it_once_and_the_store_lock_is_free_meanwhile(seed):
    store, calls, started = LRU(entries={"cells": 8}), [], threading.Event()

    def compute():
        calls.append(1)
        started.set()
        assert store.get(("cells", "another")) is None  # the store's own lock is not held while computing
        time.sleep(0.3)
        return seed.trace(TEXT)

    got = []
    threads = [threading.Thread(target=lambda: got.append(store.make(("cells", TEXT), compute))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1 and len(got) == 2 and got[0] is got[1]
    again = seed.trace(TEXT)  # the model's own forward, outside the store: the same weights
    assert (got[0].attentions == again.attentions).all()


def test_a_trace_still_drawn_is_found_again_and_counts_once_gone_it_is_not(seed):
    store = LRU(entries={"cells": 1}, counted_live=("session",))
    drawn = seed.trace(TEXT)
    store.put(("cells", "a"), drawn)
    store.put(("cells", "b"), seed.trace(TEXT + " Another."))  # one entry of the kind: "a" is no longer kept
    assert list(store.kept("cells")) == [("b",)]
    assert store.get(("cells", "a")) is drawn  # still drawn: found again, and kept again
    assert list(store.kept("cells")) == [("a",)]
    del drawn
    store.evict()
    gc.collect()
    assert store.get(("cells", "a")) is None and store.held_bytes() == 0


def test_a_session_models_trace_counts_against_the_job_line(seed):
    """A model trained on the Train page has its traces in the store too (kind "session"): the job line sees them."""
    STORE.clear()
    gc.collect()
    before = jobs.held_mb()
    trace = STORE.make(("session", id(seed), TEXT, None, 64, False), lambda: seed.trace(TEXT))
    assert abs(jobs.held_mb() - before - trace.nbytes / 2**20) < 1e-9
    STORE.evict()  # evicted while a page still draws it: still counted, as it is still held
    assert abs(jobs.held_mb() - before - trace.nbytes / 2**20) < 1e-9
    del trace
    gc.collect()
    assert abs(jobs.held_mb() - before) < 1e-9
    STORE.clear()


def test_a_byte_budget_keeps_the_newest_and_never_a_value_over_it(seed):
    trace = seed.trace(TEXT)
    mb = trace.nbytes / 2**20
    store = LRU(budget_mb=lambda: 2.5 * mb)
    for i in range(3):
        store.put(("view", i), (None, trace))  # a tuple: no weak reference, found only while kept
    assert list(store.kept("view")) == [(1,), (2,)]
    assert store.held_bytes() == 2 * trace.nbytes
    store.put(("view", "big"), (None, [trace] * 3))  # over the whole budget: returned to its caller, never kept
    assert store.get(("view", "big")) is None and store.held_bytes() <= 2.5 * trace.nbytes


def test_a_session_models_traces_are_keyed_by_a_number_never_reused():
    """A Train-page model's traces are keyed by a number of its own, not its id(): CPython hands a freed model's
    address to the next object of its size, and another session's new model there must not find the old traces."""
    import gc

    from attnviz.ui import frame

    class Model:
        pass

    a = Model()
    first, where = frame._serial(a), id(a)
    assert frame._serial(a) == first  # stable while it lives
    del a
    gc.collect()
    b = Model()
    assert frame._serial(b) != first, f"same address: {id(b) == where}"
