"""Uploads held in the server's memory, on real servers with real PUTs to Streamlit's upload endpoint (loopback):
in public mode one session may hold ATTNVIZ_UPLOAD_SESSION_MB and all sessions ATTNVIZ_UPLOAD_TOTAL_MB, a file past
either is refused (413 / 503) and not kept; in every mode a closed session's files go once its reconnect window
(``server.disconnectedSessionTTL``, 2 s here) has passed, where Streamlit 1.67 kept them for good. What the server
holds is read from Streamlit's own metrics endpoint (its upload manager's byte count)."""

import http.client
import re
import time
import urllib.request
from contextlib import ExitStack

import pytest

from conftest import start_server
from helpers import Tab

MB = 2**20
FILE = 15 * MB  # under server.maxUploadSize (16 MB): Streamlit's own check lets each one through
ENV = {"STREAMLIT_SERVER_DISCONNECTED_SESSION_TTL": "2", "ATTNVIZ_UPLOAD_SESSION_MB": "40",
       "ATTNVIZ_UPLOAD_TOTAL_MB": "50"}


@pytest.fixture
def server(request):
    proc, url = start_server({**ENV, "ATTNVIZ_PUBLIC": request.param})
    yield url
    proc.terminate()
    proc.wait(timeout=30)


class Uploader:
    """PUTs as the browser's file uploader sends them: multipart, with the XSRF cookie and header."""

    def __init__(self, url: str):
        with urllib.request.urlopen(url + "/_stcore/health") as r:  # where Streamlit sets its XSRF cookie
            cookie = next(c.split(";")[0] for c in r.headers.get_all("Set-Cookie") if c.startswith("_streamlit_xsrf="))
        self.host = url.split("//")[1]
        self.headers = {"X-Xsrftoken": cookie.split("=", 1)[1], "Cookie": cookie}

    def put(self, session: str, file_id: str, size: int = FILE) -> int:
        head = (f'--b\r\nContent-Disposition: form-data; name="file"; filename="{file_id}.txt"\r\n'
                f"Content-Type: text/plain\r\n\r\n").encode()
        body = head + b"x" * size + b"\r\n--b--\r\n"
        conn = http.client.HTTPConnection(self.host, timeout=60)
        conn.request("PUT", f"/_stcore/upload_file/{session}/{file_id}", body,
                     {**self.headers, "Content-Type": "multipart/form-data; boundary=b"})
        status = conn.getresponse().status
        conn.close()
        return status


def held(url: str) -> int:
    """Bytes Streamlit's upload manager holds, as its metrics endpoint reports them."""
    with urllib.request.urlopen(url + "/_stcore/metrics?families=cache_memory_bytes") as r:
        text = r.read().decode()
    found = re.search(r'cache_memory_bytes\{cache_type="UploadedFileManager",cache=""\} (\d+)', text)
    return int(found.group(1)) if found else 0


def held_becomes(url: str, want: int, timeout: float = 30) -> int:
    """What the server holds once it is ``want`` (the endpoint caches its count for 5 s), or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while (now := held(url)) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    return now


def session(url: str, tabs: ExitStack) -> tuple[Tab, str]:
    tab = Tab(url)
    tabs.callback(tab.close)
    tab.open(timeout=120)  # a real session (the home page's run), for the upload endpoint to take files into
    return tab, tab.session_id


@pytest.mark.parametrize("server", ["1"], indirect=True)
def test_public_mode_bounds_each_session_and_all_of_them_and_lets_go_once_a_session_is_gone(server):
    url, up = server, Uploader(server)
    with ExitStack() as tabs:
        tab_a, a = session(url, tabs)
        assert [up.put(a, "a1"), up.put(a, "a2")] == [204, 204]  # 30 MB of its 40
        assert up.put(a, "a3") == 413  # 45 MB: refused, and not kept
        assert held_becomes(url, 2 * FILE) == 2 * FILE
        assert up.put(a, "a1") == 204  # the same file sent again replaces itself: still 30 MB
        tab_b, b = session(url, tabs)
        assert up.put(b, "b1") == 204  # 45 MB of the server's 50
        assert up.put(b, "b2") == 503  # 60 MB in all, though b's own 30 MB would fit its session
        assert up.put(b, "b3", 4 * MB) == 204  # what still fits is taken
        assert held_becomes(url, 3 * FILE + 4 * MB) == 3 * FILE + 4 * MB
        tab_a.close()  # a's window to reconnect passes: its 30 MB go, b's stay
        assert held_becomes(url, FILE + 4 * MB) == FILE + 4 * MB
        assert up.put(b, "b2") == 204  # room again
        tab_b.close()
        assert held_becomes(url, 0) == 0


@pytest.mark.parametrize("server", ["0"], indirect=True)
def test_a_local_server_takes_what_its_user_sends_and_still_lets_go_after_the_session(server):
    url, up = server, Uploader(server)
    with ExitStack() as tabs:
        tab, s = session(url, tabs)
        assert [up.put(s, f"f{i}") for i in range(4)] == [204] * 4  # 60 MB: over both caps, which bind public mode
        assert held_becomes(url, 4 * FILE) == 4 * FILE
        tab.close()
        assert held_becomes(url, 0) == 0
