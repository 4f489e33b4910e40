"""Cyclic garbage collected every ATTNVIZ_GC_EVERY_S seconds, off the script threads.

.streamlit/config.toml turns off Streamlit's full collection after every run (with torch loaded it held the GIL
~160 ms a rerun), but a finished page run's variables, its trace among them, form a cycle (the page's functions
hold its globals) that only a full collection frees: Python's own waits for many more objects than a trace has.
The objects alive when collection starts (the libraries, the models) are frozen out of it, so each pass is short
(with torch, transformers and a model loaded, ~269,000 objects: a full collection 137 ms before, under 1 ms after).

Freed memory goes back to the system too: glibc's malloc raises its threshold for giving large blocks their own
mapping each time one is freed, after which a freed trace stays in the heap (one 700-token long text left
+133 MB behind; with the threshold held at 64 KiB, +4 MB), and each pass trims the heap.
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time

from attnviz import settings

_lock = threading.Lock()
_thread: threading.Thread | None = None


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 1 << 16


def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:  # not glibc: its allocator is its own business
        return None


def _loop(libc) -> None:
    while True:
        time.sleep(settings.gc_every_s())
        gc.collect()
        if libc is not None:
            libc.malloc_trim(0)


def start() -> None:
    """Start the collector once per server (every page calls this; only the first call does anything)."""
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
