"""The Attention page's long view in a real browser at 8,192 tokens: a progress bar while the model runs (and nothing
gliding or fading beside it), a zoomed link draws the trace's own exact weights, a box dragged on the block map zooms
there and puts the window in the address, a new text shows the bar to a reader scrolled down and dims the old page,
which does not move, while it runs; an old /Long_text link opens the same zoomed view on the Attention page; a click
on a token's reach follows the token clicked."""

import os
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np
import pytest

import attnviz
from attnviz.analysis.long import trace_with_survey
from attnviz.ui.long import DETAIL
from conftest import SCREENSHOTS, start_server
from test_attention_long import N, TEXT

TIMEOUT = int(os.environ.get("E2E_LONG_TIMEOUT_MS", 1_200_000))  # the server's forward and survey at 8,192 tokens take minutes on a busy machine
WINDOW = """() => {
  const gd = document.querySelector('.st-key-long_window .js-plotly-plot');
  if (!gd || !gd.data || gd.closest('[data-stale="true"]')) return null;
  const t = gd.data[0];
  const arr = v => (v && v._inputArray) ? v._inputArray : v;  // plotly keeps a base64 array's decoded values here
  const x = arr(t.x), z = arr(t.z), n = x.length;
  const rows = (z[0] && z[0].length !== undefined) ? Array.from(z, r => Array.from(r))
    : Array.from({length: n}, (_, i) => Array.from(z.slice(i * n, (i + 1) * n)));
  return {x0: x[0], n: n, z: rows};
}"""


PIXEL = """([key, x, y]) => {  // where data point (x, y) is on screen in the chart keyed ``key``
  const gd = document.querySelector('.st-key-' + key + ' .js-plotly-plot'), r = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  return [r.left + xa._offset + xa.l2p(x), r.top + ya._offset + ya.l2p(y)];
}"""
# The reach chart's title and its row line, once drawn and fresh.
REACH = """() => {
  const gd = document.querySelector('.st-key-long_reach .js-plotly-plot');
  if (!gd || !gd.data || gd.closest('[data-stale="true"]')) return null;
  const y = gd.data[0].y;
  return {title: gd.layout.title.text, row: Array.from(y && y._inputArray ? y._inputArray : y)};
}"""
# The CSS transitions running now that take time (each of their frames is drawn on the CPU the model needs).
MOVING = """() => document.getAnimations()
  .filter(a => a instanceof CSSTransition && a.effect.getTiming().duration > 0)
  .map(a => a.transitionProperty + ' on ' + (a.effect.target.dataset.testid || a.effect.target.className))"""
# How many of the page's elements are stale and drawn dimmed.
DIMMED = """() => Array.from(document.querySelectorAll('[data-stale="true"]'))
  .filter(el => getComputedStyle(el).opacity === '0.33').length"""


@pytest.fixture(scope="module")
def long_server():
    proc, url = start_server({"ATTNVIZ_MAX_TOKENS": str(N), "ATTNVIZ_MAX_CHARS": "200000"})
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="module")
def head():
    trace, _ = trace_with_survey(attnviz.load("builtin:seed"), TEXT, N, DETAIL)  # as the page makes it (survey in the forward)
    return trace.head(2, 5)  # (T, T)


def window(page, start: int) -> dict:
    page.wait_for_function(f"() => {{ const w = ({WINDOW})(); return w && w.x0 === {start}; }}", timeout=TIMEOUT)
    return page.evaluate(WINDOW)


def test_a_zoomed_link_and_a_dragged_box_show_exact_weights(page, long_server, head):
    page.goto(f"{long_server}/Attention?model=builtin%3Aseed&layer=2&head=5&zoom_start=4000&zoom_size=48"
              f"&text={quote(TEXT)}", timeout=TIMEOUT)
    # While the model runs: the forward's own progress bar, and no spinner beside it (its endless animation kept a
    # browser on the server's machine drawing frames, CPU taken from the forward).
    bar = page.get_by_test_id("stProgress").filter(has_text="Running the model and reading all its heads")
    bar.wait_for(timeout=TIMEOUT)
    page.wait_for_timeout(1_000)  # past st.spinner's own delay before it shows
    assert bar.is_visible() and page.get_by_test_id("stSpinner").count() == 0
    moving = set()  # the bar moves every few seconds: it used to glide for 0.5 s each time, the status widget to fade in
    for _ in range(25):
        moving.update(page.evaluate(MOVING))
        page.wait_for_timeout(100)
    assert not moving
    got = window(page, 4000)
    assert got["n"] == 48
    np.testing.assert_allclose(np.array(got["z"]), head[4000:4048, 4000:4048], rtol=1e-6, atol=1e-9)
    page.locator(".gtitle", has_text="all 6 layers × 8 heads over 8,192 tokens").wait_for(timeout=TIMEOUT)

    # Drag a box on the block map from token 2,000 to 2,250, placed by the axes' own data-to-pixel maps (the plot
    # area need not be square, and plotly turns a drag under 12 px on a side into a whole-axis band).
    area = page.locator(".st-key-long_blocks .nsewdrag").first
    area.scroll_into_view_if_needed()
    at = lambda token: page.evaluate(PIXEL, ["long_blocks", token, token])  # noqa: E731
    page.mouse.move(*at(2000))
    page.mouse.down()
    page.mouse.move(*at(2125), steps=5)
    page.mouse.move(*at(2250), steps=5)
    page.mouse.up()
    # Both parameters: each comes back with its own widget's message, so the first may be in the address alone.
    page.wait_for_function("() => !location.search.includes('zoom_start=4000') && !location.search.includes('zoom_size=48')",
                           timeout=TIMEOUT)
    link = parse_qs(urlsplit(page.url).query)
    start, size = int(link["zoom_start"][0]), int(link["zoom_size"][0])
    assert abs(start - 2000) < 40 and abs(start + size - 2250) < 40, (start, size)
    got = window(page, start)
    np.testing.assert_allclose(np.array(got["z"]), head[start:start + size, start:start + size], rtol=1e-6, atol=1e-9)
    # The zoom reran the detail alone: the link's old window is no note ("4000 in the link is not …": it was valid).
    assert page.get_by_text("in the link is not").count() == 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(".st-key-long_blocks").screenshot(path=str(SCREENSHOTS / "long_text_blocks.png"))
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.locator(".st-key-long_blocks").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "long_text_zoom.png"))

    # A new text, sent by a reader scrolled down to the block map: the bar shows in the window and the old page stays
    # where it was (no layout shift: every chart would be laid out and painted again), dimmed in one step at
    # Streamlit's 0.5 s, not in a 1 s fade.
    top = lambda: page.evaluate("() => document.querySelector('.st-key-long_blocks').getBoundingClientRect().top")  # noqa: E731
    before = top()
    box = page.get_by_role("textbox", name="Text", exact=True)
    box.fill("Once more. " + TEXT)
    box.press("Control+Enter")
    bar.wait_for(timeout=TIMEOUT)
    shown = bar.bounding_box()
    assert shown["y"] >= 0 and shown["y"] + shown["height"] <= 1000, shown
    assert top() == before
    page.wait_for_function(DIMMED, timeout=TIMEOUT)
    assert page.evaluate(MOVING) == []
    page.wait_for_function(f"() => ({DIMMED})() === 0", timeout=TIMEOUT)


def test_an_old_long_text_link_opens_the_same_zoomed_view_on_the_attention_page(page, long_server, head):
    page.goto(f"{long_server}/Long_text?model=builtin%3Aseed&layer=2&head=5&zoom_start=4000&zoom_size=48"
              f"&text={quote(TEXT)}", timeout=TIMEOUT)
    got = window(page, 4000)
    assert got["n"] == 48
    np.testing.assert_allclose(np.array(got["z"]), head[4000:4048, 4000:4048], rtol=1e-6, atol=1e-9)
    page.wait_for_function("() => location.pathname.endsWith('/Attention')", timeout=60_000)
    link = parse_qs(urlsplit(page.url).query)
    assert (link["zoom_start"], link["zoom_size"], link["layer"], link["head"]) == (["4000"], ["48"], ["2"], ["5"])
    assert link["text"] == [TEXT]
    page.get_by_role("heading", name="Attention").first.wait_for(timeout=60_000)


def reach(page, token: int, timeout: int = TIMEOUT) -> dict:
    """The reach chart once it shows ``token``."""
    page.wait_for_function(f"() => {{ const r = ({REACH})(); return r && / at {token:,}(<|$)/.test(r.title); }}",
                           timeout=timeout)
    return page.evaluate(REACH)


def test_clicking_a_peak_of_a_tokens_reach_follows_the_token_clicked(page, long_server, head):
    page.goto(f"{long_server}/Attention?model=builtin%3Aseed&layer=2&head=5&token=1&text={quote(TEXT)}",
              timeout=TIMEOUT)
    np.testing.assert_allclose(reach(page, 1)["row"], head[1], rtol=1e-6, atol=1e-9)
    key = int(np.argmax(head[1]))  # token 1 attends most to this key
    page.locator(".st-key-long_reach").scroll_into_view_if_needed()
    # 8,192 positions share ~760 px: drag across 600 of them first (a drag still zooms; under ~10 px it would be a
    # click), so that each point has a pixel or more of its own and the peak is the point under the mouse.
    y = float(head[1, key])
    lo, hi = max(0, key - 300), min(N - 1, key + 300)
    page.mouse.move(*page.evaluate(PIXEL, ["long_reach", lo, y / 2]))
    page.mouse.down()
    page.mouse.move(*page.evaluate(PIXEL, ["long_reach", hi, y / 2]), steps=5)
    page.mouse.up()
    page.wait_for_function("() => { const xa = document.querySelector('.st-key-long_reach .js-plotly-plot')"
                           f"._fullLayout.xaxis; return xa.range[1] - xa.range[0] < 1000; }}", timeout=60_000)
    assert parse_qs(urlsplit(page.url).query).get("token", ["1"]) == ["1"]  # the drag zoomed, picked nothing
    page.wait_for_timeout(500)  # a click within plotly's 300 ms of the drag's release is a double click: zoom out
    page.mouse.click(*page.evaluate(PIXEL, ["long_reach", key, y]))
    page.wait_for_function(f"() => location.search.includes('token={key}')", timeout=60_000)
    assert parse_qs(urlsplit(page.url).query)["token"] == [str(key)]
    np.testing.assert_allclose(reach(page, key, 60_000)["row"], head[key], rtol=1e-6, atol=1e-9)
