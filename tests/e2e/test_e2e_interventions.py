"""The Interventions page in a real browser: pick a head on the grid, knock it out, and read the changed
next-token probabilities from the drawn chart; the address bar keeps the edit."""

import re
import urllib.parse

import numpy as np
from playwright.sync_api import expect

import attnviz
from attnviz.analysis.roles import repeated_tokens
from attnviz.analysis.interventions import Knockout, run

POINT_XY = """(i) => {
  const gd = document.querySelector('.st-key-edit_grid .js-plotly-plot');
  const points = gd._fullData[1], full = gd._fullLayout, box = gd.getBoundingClientRect();
  return [box.left + full._size.l + full.xaxis.d2p(points.x[i]), box.top + full._size.t + full.yaxis.d2p(points.y[i])];
}"""
CELL_XY = """([q, k]) => {  // where heatmap cell (query q, key k) is on screen: category axes count from 0
  const gd = document.querySelector('.st-key-edit_heatmap .js-plotly-plot'), r = gd.getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  return [r.left + xa._offset + xa.l2p(k), r.top + ya._offset + ya.l2p(q)];
}"""
# The edited bars as drawn, once the chart is not stale (during a rerun the old one stays on screen).
EDITED = """() => {
  const gd = document.querySelector('.st-key-next_token_bars .js-plotly-plot');
  if (!gd || !gd.data || gd.closest('[data-stale="true"]')) return null;
  const arr = v => Array.from(v && v._inputArray ? v._inputArray : v);  // a base64 array's decoded values
  return [arr(gd.data[0].y), arr(gd.data[1].y)];
}"""


def drawn(page, differ: bool):
    """(before, after) bars once they are drawn and (``differ``) the edit has reached them."""
    page.wait_for_function(f"""() => {{ const b = ({EDITED})(); if (!b) return false;
        return b[0].some((v, i) => Math.abs(v - b[1][i]) > 1e-4) === {str(differ).lower()}; }}""", timeout=90_000)
    before, after = page.evaluate(EDITED)
    return np.array(before), np.array(after)


def test_knock_out_a_head_picked_on_the_grid(page, app_url):
    lm = attnviz.load("builtin:lm")
    text = lm.vocab.decode(repeated_tokens(lm.plain_ids(), 20, 0))
    page.goto(f"{app_url}/Interventions?{urllib.parse.urlencode(dict(model='builtin:lm', text=text))}")
    expect(page.locator(".st-key-next_token_bars .js-plotly-plot")).to_be_visible(timeout=90_000)
    before, after = drawn(page, differ=False)
    effect = run(lm, text, [Knockout(1, 1)])
    np.testing.assert_allclose(before, np.exp(effect.base.logprobs), atol=1e-6)

    x, y = page.evaluate(POINT_XY, 1 * 2 + 1)  # builtin:lm: 2 heads a layer
    page.mouse.click(x, y)
    add = page.get_by_role("button", name="Add: ko:1.1")
    expect(add).to_be_visible(timeout=60_000)
    add.click()
    expect(page.get_by_role("textbox", name="Edits (kept in the link)")).to_have_value("ko:1.1", timeout=60_000)
    before, after = drawn(page, differ=True)
    np.testing.assert_allclose(after, np.exp(effect.edited.logprobs), atol=1e-6)
    assert after[21:].mean() < before[21:].mean()  # the induction head helped predict the repeat
    expect(page).to_have_url(re.compile(r"[?&]edits=ko%3A1\.1(&|$)"), timeout=30_000)

    # A cell of the head's heatmap: its query and key become the next knock-out's.
    page.locator(".st-key-edit_heatmap .js-plotly-plot").scroll_into_view_if_needed()
    x, y = page.evaluate(CELL_XY, [30, 11])
    page.mouse.click(x, y)
    expect(page.get_by_role("button", name="Add: ko:1.1:q30:k11")).to_be_visible(timeout=60_000)
