"""Dark mode in a real browser: the app follows the browser's preference, keeps the theme menu, and its
figures and the token-focus text stay readable."""

import pytest

from conftest import SCREENSHOTS
from helpers import settled
from test_e2e_share import TIMEOUT

LUMINANCE = """(sel) => {  // relative luminance (0 black … 1 white) of an element's colour or SVG fill
  const el = document.querySelector(sel);
  const css = getComputedStyle(el);
  const colour = el instanceof SVGElement ? css.fill : css.color;
  const [r, g, b] = colour.match(/[\\d.]+/g).slice(0, 3).map(Number).map(v => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}"""
BACKGROUND = """() => {
  const [r, g, b] = getComputedStyle(document.querySelector('.stApp')).backgroundColor.match(/[\\d.]+/g).map(Number);
  return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
}"""


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_the_app_follows_the_browsers_theme_and_stays_readable(browser, app_url, scheme):
    context = browser.new_context(viewport={"width": 1400, "height": 1600}, color_scheme=scheme)
    page = context.new_page()
    try:
        page.goto(f"{app_url}/Attention?text=Owls%20hunt%20at%20night.", timeout=TIMEOUT)
        page.locator(".st-key-detail_self .xtick text").first.wait_for(timeout=TIMEOUT)
        settled(page)
        dark = scheme == "dark"
        assert (page.evaluate(BACKGROUND) < 0.2) == dark
        # Chart text and the token-focus text contrast with the background they sit on.
        for sel in (".st-key-detail_self .xtick text", ".st-key-detail_self .gtitle", ".st-key-overview_self .gtitle",
                    "[data-testid='stHtml'] span:not([style*='color:white'])"):
            lum = page.evaluate(LUMINANCE, sel)
            assert (lum > 0.5) if dark else (lum < 0.25), (sel, lum)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"theme_{scheme}.png"))
        # The menu keeps the theme choice: the other theme, picked there, applies at once.
        page.get_by_test_id("stMainMenuButton").click()
        page.get_by_test_id(f"stMainMenuItem-theme-{'Light' if dark else 'Dark'}").click()
        page.wait_for_function(f"() => ({BACKGROUND})() {'>' if dark else '<'} 0.5", timeout=10_000)
        assert (page.evaluate(LUMINANCE, ".st-key-detail_self .xtick text") > 0.5) != dark
    finally:
        context.close()
