"""The Corpus page's files: one private work folder under a disk budget, and uploads that live with their session.

Visitors' uploads and the shards of their jobs sit in ATTNVIZ_CORPUS_WORK, a 0700 folder of 0600 files. An upload
stays on disk while a session holds it: the hold is an object in the session's state, whose finaliser removes the
file once no session holds it (the session ended, chose another file, or its job finished; the page writes it
again from the uploader if it needs it later). A job's results are held the same way while a session shows them.
Before a job starts, the folder is trimmed to ATTNVIZ_CORPUS_DISK_MB: uploads nobody holds first, then the least
recently used finished jobs, never a held upload, a shown job or a running one; a run that cannot fit even so is
refused with nothing removed.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from contextlib import contextmanager
from pathlib import Path

import streamlit as st

from attnviz import corpus as cp
from attnviz import settings

_lock = threading.Lock()
_held: dict[Path, int] = {}  # upload or shown job's shard folder -> how many sessions hold it
_running: set[Path] = set()  # shard folders of the jobs running now, all sessions together
HOLD = "corpus_upload_hold"  # session-state key of this session's hold on its upload
SHOWN = "corpus_job_hold"  # session-state key of this session's hold on the job whose results it shows


def work() -> Path:
    """The work folder, created readable by the server's user only."""
    folder = Path(settings.corpus_work() or Path(tempfile.gettempdir()) / "attnviz-corpus")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


def budget() -> int:
    """ATTNVIZ_CORPUS_DISK_MB in bytes."""
    return int(settings.corpus_disk_mb() * 2**20)


def _release(path: Path, remove: bool) -> None:
    with _lock:
        left = _held.get(path, 0) - 1
        if left > 0:
            _held[path] = left
            return
        _held.pop(path, None)
    if remove:
        path.unlink(missing_ok=True)


class _Hold:
    """One session's hold on one path; the last hold on an upload to go removes the file (a job's results stay,
    for the trim to weigh)."""

    def __init__(self, path: Path, remove: bool = True):
        self.path = path
        with _lock:
            _held[path] = _held.get(path, 0) + 1
        weakref.finalize(self, _release, path, remove)


def upload_path(up) -> Path:
    """Where upload ``up`` is kept: named by its bytes' digest (computed once per file), with its suffix."""
    digests = st.session_state.setdefault("corpus_digests", {})
    if up.file_id not in digests:
        digests.clear()
        digests[up.file_id] = cp.digest(up.getvalue())
    return work() / f"{digests[up.file_id]}{Path(up.name).suffix.lower()}"


def keep(up) -> Path:
    """Upload ``up`` on disk (0600) while this session holds it; written again if its job had removed it."""
    path = upload_path(up)
    hold = st.session_state.get(HOLD)
    if hold is None or hold.path != path:
        make_room(up.size)
        st.session_state[HOLD] = _Hold(path)
    if not path.exists():
        cp.write_private(path, up.getvalue())
    return path


def show(out: Path) -> None:
    """This session shows the results of the job writing to ``out``: they are not trimmed while it does, and count as
    just used for the least-recently-used order."""
    folder = cp.shard_dir(out)
    hold = st.session_state.get(SHOWN)
    if hold is None or hold.path != folder:
        st.session_state[SHOWN] = _Hold(folder, remove=False)
    try:
        os.utime(folder)
    except OSError:  # trimmed or never written: nothing to mark
        pass


def let_go() -> None:
    """This session no longer needs its upload on disk (its job finished)."""
    st.session_state.pop(HOLD, None)


def make_room(need: int) -> None:
    """Trim the work folder so ``need`` more bytes fit its budget; a ValueError in plain words, with nothing removed,
    when they cannot."""
    with _lock:
        used = cp.trim(work(), budget() - need, set(_held) | _running)
    if used + need > budget():
        raise ValueError(f"The server's space for corpus runs is full ({used / 2**20:,.0f} of "
                         f"{budget() / 2**20:,.0f} MB in use by other visitors' runs; this one needs "
                         f"{need / 2**20:,.1f} MB). Try fewer texts, or again later.")


@contextmanager
def running(out: Path):
    """Mark the job writing to ``out`` as running (its shards are not trimmed); one session at a time."""
    folder = cp.shard_dir(out)
    with _lock:
        if folder in _running:
            raise ValueError("This very run is already running in another tab or session: its results show here "
                             "when it finishes.")
        _running.add(folder)
    try:
        yield
    finally:
        with _lock:
            _running.discard(folder)
