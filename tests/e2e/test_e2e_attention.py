"""The attention page in a real browser: paste text, see every head and one in detail, click a head to open it."""

import re

from playwright.sync_api import expect

TEXT = "Bananas ripen quickly in warm kitchens."

# The pixel position of one overview point, from plotly's own axes (the page has no other way to find a head).
POINT_XY = """(i) => {
  const gd = document.querySelector('.st-key-overview_self .js-plotly-plot');
  const points = gd._fullData[1], full = gd._fullLayout, box = gd.getBoundingClientRect();
  return [box.left + full._size.l + full.xaxis.d2p(points.x[i]), box.top + full._size.t + full.yaxis.d2p(points.y[i])];
}"""


def test_paste_text_then_click_a_head_in_the_overview(page, app_url):
    page.goto(f"{app_url}/Attention")
    box = page.get_by_role("textbox", name="Text", exact=True)
    expect(box).to_be_visible(timeout=60_000)
    box.fill(TEXT)
    box.press("Control+Enter")

    detail = page.locator(".st-key-detail_self")
    # the pasted tokens appear as the detail's tick labels (the tokenizer lowercases)
    expect(detail.locator("text", has_text=re.compile(r"^bananas$")).first).to_be_visible(timeout=60_000)
    expect(detail.locator(".gtitle")).to_have_text(["layer 0, head 0"])
    overview = page.locator(".st-key-overview_self")
    expect(overview.locator("image")).to_have_count(1)
    expect(page.locator(".st-key-focus_self")).to_be_visible()

    x, y = page.evaluate(POINT_XY, 3 * 12 + 8)  # MiniLM: 12 heads a layer
    page.mouse.move(x, y)
    expect(overview.locator(".hovertext")).to_contain_text("layer 3, head 8")
    page.mouse.click(x, y)
    expect(detail.locator(".gtitle")).to_have_text(["layer 3, head 8"], timeout=30_000)  # the old chart gone
    expect(detail.locator("text", has_text=re.compile(r"^bananas$")).first).to_be_visible()
    assert re.search(r"[?&]layer=3(&|$)", page.url) and re.search(r"[?&]head=8(&|$)", page.url)
