"""The server as ``python -m attnviz.ui.serve`` starts it (the Dockerfile's command): its limits hold from the first
request, before any page has run. A link of 200 KB, 600 KB and 2 MB (Chromium's most) reaches the app, where
uvicorn's parser reset anything past 16 KiB; in public mode an upload before any page ran is capped as one after."""

import http.client
import os
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack

import pytest

from conftest import ROOT, free_port
from helpers import Tab
from test_upload_caps import FILE, Uploader, held

pytestmark = pytest.mark.server

ENV = {"ATTNVIZ_PUBLIC": "1", "ATTNVIZ_UPLOAD_SESSION_MB": "40", "ATTNVIZ_UPLOAD_TOTAL_MB": "50"}


@pytest.fixture(scope="module")
def served():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnviz.ui.serve", "--server.headless", "true", "--server.address", "127.0.0.1",
         "--server.port", str(port)],
        cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            assert time.time() < deadline, "the server did not become healthy"
            time.sleep(0.3)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_uploads_before_the_first_page_run_reaches_the_app_are_capped(served):
    """This server's first session: the PUTs go as soon as the server names the session, while its first run still
    imports the app (seconds), before any page's code has run. The caps already hold."""
    up = Uploader(served)
    with ExitStack() as tabs:
        tab = Tab(served, tabs)
        tab.send("")
        next(kind for kind, _ in tab._messages(60) if kind == "new_session")
        sent = [up.put(tab.session_id, f"a{i}") for i in range(3)]
        assert sent == [204, 204, 413], sent  # 45 MB in one session, over its 40
        assert held(served) == 2 * FILE
        tab.read()


@pytest.mark.parametrize("kb", [200, 600, 2000])
def test_a_long_link_reaches_the_app(served, kb):
    """The page's GET with a query of ``kb`` thousand characters is answered with the app's page, not reset."""
    conn = http.client.HTTPConnection(served.split("//")[1], timeout=60)
    conn.request("GET", "/?text=" + "a" * (kb * 1000))
    response = conn.getresponse()
    assert response.status == 200
    assert b"<title>" in response.read()


@pytest.mark.e2e
def test_a_200_kb_link_in_chromium_gets_the_apps_word_on_its_length(served, page):
    page.goto(served + "/?text=" + "a" * 200_000, timeout=60_000)
    alert = page.get_by_text("The link's text has 200,000 characters")
    alert.wait_for(timeout=120_000)
    assert "only the first" in alert.inner_text()


@pytest.mark.e2e
@pytest.mark.parametrize("kb", [600, 2000])
def test_a_link_streamlit_drops_whole_still_gets_a_note(served, page, kb):
    """Over Streamlit's 512 Ki characters the whole query string is dropped before the app runs: the page says how
    long the link was and that none of it was used, and the address no longer carries it."""
    query = "text=" + "a" * (kb * 1000 - 5)
    page.goto(served + "/?" + query, timeout=120_000)
    alert = page.get_by_text(f"This link has {len(query):,} characters, over the 524,288 Streamlit reads")
    alert.wait_for(timeout=120_000)
    assert "none of it could be used" in alert.inner_text()
    page.wait_for_function("() => !location.search.includes('aaaa')", timeout=30_000)
    assert "link_dropped" not in page.url
