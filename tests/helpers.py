"""Small helpers shared by the tests: one way to open the app in AppTest, one browser tab on a real server without
a browser (``Tab``), and readers of rendered charts."""

import base64
import json
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pyarrow as pa
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.testing.v1 import AppTest
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parent.parent


def open_page(page: str = "app.py", *, alone: bool = False, timeout: float = 120, secrets: dict | None = None,
              run: bool = True, **query) -> AppTest:
    """A fresh session on ``page`` ("app.py" or "pages/…py") with ``query`` in its URL and ``secrets`` as the
    host's secrets, run once unless ``run=False``. The app's own navigation opens the page, as a browser does;
    ``alone=True`` runs the page file by itself instead (each page draws the shared frame too)."""
    at = AppTest.from_file(str(ROOT / (page if alone else "app.py")), default_timeout=timeout)
    if page != "app.py" and not alone:
        at.switch_page(page)
    for k, v in query.items():
        at.query_params[k] = v
    for k, v in (secrets or {}).items():
        at.secrets[k] = v
    return at.run() if run else at


def ok(at: AppTest) -> AppTest:
    """``at`` after checking the page ran without an exception or an error box."""
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at


class Tab:
    """A browser tab on a real server, speaking Streamlit's websocket protocol: ``open`` reruns a page with a URL's
    query (and widget values) and returns what the run showed; ``read_until`` waits for one element mid-run.

    Given ``tabs`` (an ExitStack) the tab closes with it; else use it as a context manager or call ``close``.
    """

    def __init__(self, url: str, tabs: ExitStack | None = None, max_size: int = 2**27, pings: bool = True):
        # pings=False: no pings of its own, as a browser sends none (a server too busy to answer one in 20 s would
        # otherwise lose the visitor, which a browser would keep)
        ws = connect(url.replace("http", "ws", 1) + "/_stcore/stream", subprotocols=["streamlit"], max_size=max_size,
                     open_timeout=60, ping_interval=20 if pings else None)
        self.ws = tabs.enter_context(ws) if tabs is not None else ws
        self.page = ""  # the script hash of the page the session is on, from its first message
        self.session_id = None
        self.ids: dict[str, str] = {}  # a widget's key -> its id, as the page last drew it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.ws.close()

    def send(self, page: str | None = None, query: str | dict = "", widgets=()) -> None:
        """Ask for a rerun of ``page`` (its URL name, "" for Home), or of the page the tab is on."""
        msg = BackMsg()
        msg.rerun_script.query_string = query if isinstance(query, str) else urlencode(query)
        if page is not None:
            msg.rerun_script.page_name = page
        else:
            msg.rerun_script.page_script_hash = self.page
        msg.rerun_script.widget_states.widgets.extend(widgets)
        self.ws.send(msg.SerializeToString())

    def open(self, page: str | None = None, query: str | dict = "", widgets=(), timeout: float = 180) -> dict:
        """Rerun (see ``send``) and read to the run's end: its charts (figure dicts), markdown bodies, alerts that
        give a place in line, other alerts and exceptions ("trouble"), progress bars drawn, tables (as pandas), and
        every element."""
        self.send(page, query, widgets)
        return self.read(timeout)

    def read(self, timeout: float = 180) -> dict:
        """Read to the end of the run under way (see ``open``)."""
        shown = _nothing_shown()
        for kind, fwd in self._messages(timeout):
            if kind == "script_finished":
                if fwd.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                    return shown
                shown = _nothing_shown()  # the script asked for a rerun: the page is what comes next
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                what = el.WhichOneof("type")
                shown["all"].append(str(el))
                if what == "plotly_chart":
                    shown["charts"].append(json.loads(el.plotly_chart.spec))
                elif what == "markdown":
                    shown["markdown"].append(el.markdown.body)
                elif what == "dataframe":
                    shown["tables"].append(pa.ipc.open_stream(el.dataframe.arrow_data.data).read_pandas())
                elif what == "progress":
                    shown["progress"] += 1
                elif what == "alert" and "in line" in el.alert.body:
                    shown["line"].append(el.alert.body)
                elif what in ("alert", "exception"):
                    shown["trouble"].append(str(getattr(el, what))[:300])

    def read_until(self, seen, timeout: float = 90) -> str:
        """Read the run's elements until one (as protobuf text, e.g. "progress {…") satisfies ``seen``; the run
        ending first fails."""
        for kind, fwd in self._messages(timeout):
            if kind == "script_finished":
                assert fwd.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN, "the run ended first"
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element" and seen(str(fwd.delta.new_element)):
                return str(fwd.delta.new_element)

    def _messages(self, timeout: float):
        """(kind, message) as the server sends them, noting the session and the widgets' ids; TimeoutError after
        ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the page did not show what was expected in time")
            fwd = ForwardMsg()
            fwd.ParseFromString(self.ws.recv(timeout=left))
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                self.page, self.session_id = fwd.new_session.page_script_hash, fwd.new_session.initialize.session_id
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                el = fwd.delta.new_element
                widget = getattr(el, el.WhichOneof("type"))
                if getattr(widget, "id", ""):
                    self.ids[widget.id.rsplit("-", 1)[-1]] = widget.id
            yield kind, fwd


def _nothing_shown() -> dict:
    return {"charts": [], "markdown": [], "line": [], "trouble": [], "progress": 0, "tables": [], "all": []}


def decode(v):
    """A plotly array as numpy: plotly ≥ 6 sends numpy arrays as {dtype, bdata (base64), shape}."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        shape = v.get("shape")
        if isinstance(shape, str):
            shape = [int(s) for s in shape.split(",")]
        return a.reshape(shape) if shape else a
    return np.asarray(v)


def chart_specs(at) -> list[dict]:
    """Every plotly chart on an AppTest page, as its figure dict."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def settled(page, quiet_ms: int = 750, timeout: int = 60_000) -> None:
    """Wait until the app's script has stopped and stayed stopped for ``quiet_ms``: a rerun (a link's
    fallback, a URL update) redraws download buttons with new file ids, so a click during one is lost."""
    page.wait_for_function(
        """quiet => {
            const idle = document.querySelector('[data-test-script-state="notRunning"]') !== null;
            const now = performance.now();
            if (!idle || window.__busy === undefined) { window.__busy = now; return false; }
            return now - window.__busy > quiet;
        }""",
        arg=quiet_ms, timeout=timeout, polling=100)


def steady(locator, quiet_ms: int = 300, timeout: int = 60_000) -> None:
    """Scroll ``locator`` into view and wait until its box has not moved for ``quiet_ms``. An expander
    grows for a moment after it opens: a click then can press on a button and release on its parent,
    which is no click on the button at all (this lost a download in CI)."""
    locator.scroll_into_view_if_needed(timeout=timeout)
    element = locator.element_handle(timeout=timeout)
    locator.page.wait_for_function(
        """([el, quiet]) => {
            const r = el.getBoundingClientRect(), box = [r.x, r.y, r.width, r.height].join();
            const now = performance.now();
            if (el.__box !== box) { el.__box = box; el.__since = now; return false; }
            return now - el.__since > quiet;
        }""",
        arg=[element, quiet_ms], timeout=timeout, polling=50)
