"""Uploads held in the server's memory: bounded per session and in all (public mode), let go once a session is gone.

Streamlit keeps every uploaded file in memory (``MemoryUploadedFileManager``), per session, bounded only file by
file (``server.maxUploadSize``): a visitor's own PUTs to ``/_stcore/upload_file/<session>/<id>`` added 451 MB in 30
requests. In public mode the server's manager refuses, before keeping it, a file that would take its session past
ATTNVIZ_UPLOAD_SESSION_MB (413) or all sessions past ATTNVIZ_UPLOAD_TOTAL_MB (503). A local server is its one user's
own, who may raise ``server.maxUploadSize`` for a big corpus file: no caps there.

Streamlit also forgets files, in every mode: a closed tab's session waits ``server.disconnectedSessionTTL`` (120 s)
to be resumed, then drops out of its storage without a shutdown, and only a shutdown removes a session's files (the
probe found them held 18 minutes later). So a sweep removes the files of every session that has not been connected
for longer than that window.
"""

from __future__ import annotations

import threading
import time

from starlette.exceptions import HTTPException
from streamlit import config
from streamlit.runtime import Runtime
from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

from attnviz import settings
from attnviz.ui import access

SWEEP_S = 5.0  # how often the sweep looks for sessions gone; a session's files go within this of its window's end
_lock = threading.Lock()
_installed = False


class CappedUploads(MemoryUploadedFileManager):
    """Streamlit's own manager, checking the caps before it keeps a file and remembering when sessions were seen."""

    _adding: threading.Lock  # one check-then-keep or sweep at a time (Streamlit's removals meanwhile only make room)
    _seen: dict  # session id -> time.monotonic() it was last seen connected, for sessions holding files

    def add_file(self, session_id, file) -> None:
        with self._adding:
            if access.public():
                self._check(session_id, file.file_id, len(file.data))
            super().add_file(session_id, file)
            self._seen[session_id] = time.monotonic()

    def _check(self, session_id: str, file_id: str, size: int) -> None:
        """An HTTPException (the upload route's answer) when keeping ``size`` more bytes passes a cap."""
        with self._lock:
            mine = self.file_storage.get(session_id, {})
            replaced = len(mine[file_id].data) if file_id in mine else 0  # a file sent again replaces itself
            session = sum(len(f.data) for f in mine.values()) - replaced + size
            total = self._total_bytes - replaced + size
        cap = settings.upload_session_mb()
        if session > cap * 2**20:
            raise HTTPException(413, f"This session's uploads would hold {session / 2**20:,.1f} MB, over this "
                                     f"server's {cap:,g} MB per session (ATTNVIZ_UPLOAD_SESSION_MB).")
        cap = settings.upload_total_mb()
        if total > cap * 2**20:
            raise HTTPException(503, f"This server's memory for uploads ({cap:,g} MB, ATTNVIZ_UPLOAD_TOTAL_MB) is "
                                     "full. Try again later.")

    def sweep(self, connected, window: float) -> None:
        """Remove the files of every session not ``connected(id)`` for more than ``window`` seconds."""
        now = time.monotonic()
        with self._adding:
            with self._lock:
                holding = list(self.file_storage)
            for session_id in holding:
                if connected(session_id):
                    self._seen[session_id] = now
                elif now - self._seen.setdefault(session_id, now) > window:
                    self.remove_session_files(session_id)
            for session_id in set(self._seen) - set(holding):  # files gone with their session (shut down, swept)
                del self._seen[session_id]


def install() -> None:
    """Bound and sweep the running server's uploads: ``python -m attnviz.ui.serve`` calls this as the server starts,
    before any request; every page calls it too (a plain ``streamlit run app.py`` is bound from its first page run
    on). Only the first call on a real server does anything."""
    global _installed
    with _lock:
        if _installed or not Runtime.exists():
            return
        runtime = Runtime.instance()
        manager = runtime.uploaded_file_mgr
        if type(manager) is not MemoryUploadedFileManager:  # AppTest's stand-in, or a host's own manager
            return
        _installed = True
        manager._adding, manager._seen = threading.Lock(), {}
        # Changed in place: Streamlit's upload route and every session took this object when the server started.
        manager.__class__ = CappedUploads
    threading.Thread(target=_sweeping, args=(runtime, manager), name="attnviz-uploads", daemon=True).start()


def _sweeping(runtime, manager: CappedUploads) -> None:
    while True:
        time.sleep(SWEEP_S)
        manager.sweep(runtime.is_active_session, config.get_option("server.disconnectedSessionTTL"))
