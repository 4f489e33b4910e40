"""Small helpers shared by the tests: one way to open the app in AppTest, and readers of rendered charts."""

import base64
import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

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
