"""Cyclic garbage collected every ATTNVIZ_GC_EVERY_S seconds, off the script threads.

.streamlit/config.toml turns off Streamlit's full collection after every run (with torch loaded it held the GIL for
a noticeable part of every rerun), but a finished page run's variables, its trace among them, form a cycle (the
page's functions hold its globals) that only a full collection frees: Python's own waits for many more objects than
a trace has. The objects alive when collection starts (the libraries, the models: hundreds of thousands of objects)
are frozen out of it, so each pass walks only what the sessions made since. A freeze also freezes the sessions alive
at that moment, and a frozen session is never freed, so every REFREEZE_PASSES passes the frozen objects are
collected once more (``sweep``): a session that ended is gone within a minute, not kept for the server's life with
its uploads and traces.

Freed memory goes back to the system too: glibc's malloc raises its threshold for giving large blocks their own
mapping each time one is freed, after which a freed trace stays in the heap; the threshold is held at 64 KiB, and
each pass trims the heap.

Memory handed back can be slow to take again. A virtual machine whose host takes back its free memory (virtio-balloon
free page reporting, as Firecracker hosts do) faults every page back in through the hypervisor the first
time it is touched after a pause, which slows the first heavy forward after a pause by a large part of its time. So
the server keeps a reserve of ATTNVIZ_WARM_MB touched while it is idle, and a heavy job that declares its memory
hands it back right before it runs (``release``): its allocations take those pages next, while the host still backs
them. After such a job the reserve is touched again in the background (``refill``), at the lowest priority.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import mmap
import os
import threading
import time

from attnviz import settings

_lock = threading.Lock()
_thread: threading.Thread | None = None


WARM_CHUNK = 32 << 20  # bytes per mapping of the reserve: a release checked between two, each handed back whole
REFILL_AFTER_S = 2.0  # a job's page draws first: the reserve is touched again this long after the job ends
_reserve: list[mmap.mmap] = []  # the reserve's mappings, touched
_generation = 0  # bumped by every release: a fill that began before it stops


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 1 << 16


def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc: its allocator is its own business
        return None


REFREEZE_PASSES = 6  # every sixth pass (a minute by default) also collects what was frozen


def sweep() -> None:
    """Collect everything, the frozen objects included, and freeze what is still alive."""
    with _lock:
        gc.unfreeze()
        gc.collect()
        gc.freeze()


def _loop(libc) -> None:
    for n in itertools.count(1):
        time.sleep(settings.gc_every_s())
        if n % REFREEZE_PASSES:
            gc.collect()
        else:
            sweep()
        if libc is not None:
            libc.malloc_trim(0)


def start() -> None:
    """Start the collector and touch the reserve, once per server (every page calls this; only the first call does
    anything)."""
    global _thread
    with _lock:
        if _thread is not None:
            return
        gc.collect()
        gc.freeze()  # what exists now lives as long as the server: never scanned again
        libc = _libc()
        if libc is not None:
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        _thread = threading.Thread(target=_loop, args=(libc,), name="attnviz-gc", daemon=True)
        _thread.start()
    refill(0)


def reserved_mb() -> float:
    """MB of the reserve touched now."""
    with _lock:
        return _reserved() / 2**20


def _reserved() -> int:
    """Bytes of the reserve touched now (under _lock)."""
    return sum(len(m) for m in _reserve)


def release() -> None:
    """Hand the reserve back to the system now (a heavy job is about to allocate): a fill under way stops."""
    global _generation
    with _lock:
        _generation += 1
        maps = _reserve[:]
        _reserve.clear()
    for m in maps:
        m.close()


def refill(delay: float = REFILL_AFTER_S) -> None:
    """Touch the reserve up to ATTNVIZ_WARM_MB again, in a background thread starting ``delay`` seconds from now,
    unless a ``release`` comes first."""
    with _lock:
        generation = _generation
    threading.Thread(target=_fill, args=(generation, delay), name="attnviz-warm", daemon=True).start()


def _fill(generation: int, delay: float) -> None:
    if not hasattr(mmap, "MADV_HUGEPAGE"):  # not Linux: no reserve (the hosts that take memory back run Linux guests)
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # Linux: this thread only, behind any page
    except (AttributeError, OSError):
        pass
    time.sleep(delay)
    want = int(settings.warm_mb() * 2**20)
    while True:
        with _lock:
            have = _reserved()
            if generation != _generation or have + mmap.PAGESIZE > want:
                return
        size = min(WARM_CHUNK, want - have) // mmap.PAGESIZE * mmap.PAGESIZE
        try:
            chunk = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError:  # no memory to spare: no more reserve
            return
        # Huge pages, as torch asks for its large tensors (the app sets THP_MEM_ALLOC_ENABLE): a forward's huge pages
        # are made of these freed whole; a reserve of small pages (MAP_POPULATE) left the next forward as slow as no
        # reserve at all. Each page written, so none is the shared zero page.
        chunk.madvise(mmap.MADV_HUGEPAGE)
        chunk[::mmap.PAGESIZE] = bytes(size // mmap.PAGESIZE)
        with _lock:
            keep = generation == _generation and _reserved() + size <= want  # one filler of two
            if keep:
                _reserve.append(chunk)
        if not keep:
            chunk.close()
            return
