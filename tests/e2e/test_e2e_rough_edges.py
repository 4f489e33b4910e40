"""Issue 57's explorer edges in a real browser, on one server: the main figure on the first screen at 1280×800;
head grids at a readable size on a 390 px phone (scrolling sideways inside their own box, not the page); the long
view's titles whole; a head opened from the grid at the foot of the Attention page is brought into view."""

from urllib.parse import quote

import pytest

from conftest import SCREENSHOTS
from helpers import settled
from test_e2e_layout import CHECKS, WORDS
from test_e2e_share import TIMEOUT

TEXT = quote("The animal didn't cross the street because it was too tired.")
SLOW = 300_000
# Each page's main figure; at 1280×800 at least FOLD px of it show on the first screen.
MAIN = {"/": "home_heatmap", "/Norms": "norm_heatmap", "/Interventions": "edit_grid", "/Compare": "compare_a"}
FOLD = 250
HEAD_PX = 20  # a head's cell in a grid: a number's width and a gap (at ~115 px, twelve heads piled up)
GRIDS = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const key = [...gd.closest('[class*="st-key-"]').classList].find(c => c.startsWith('st-key-')).slice(7);
  const box = gd.closest('.stElementContainer'), ax = gd._fullLayout.xaxis;
  const heads = (ax.tickvals || []).length;
  return {key, heads, plot: ax._length, chart: gd.getBoundingClientRect().width, box: box.clientWidth,
          scrolls: box.scrollWidth > box.clientWidth + 1, title: gd.layout.title?.text ?? gd.layout.title ?? ""};
})"""
GRID_KEYS = ("overview_self", "links_self", "edit_grid", "stat_map", "long_overview", "long_sinks")


def visit(browser, url: str, width: int, height: int, timeout: int = TIMEOUT):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(url, timeout=timeout)
    page.locator(".js-plotly-plot").first.wait_for(timeout=timeout)
    settled(page, 1500, timeout)
    return context, page


def shot(page, name: str, full: bool = True) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"rough_{name}.png"), full_page=full)


def test_the_main_figure_starts_on_the_first_screen_at_1280_by_800(browser, app_url):
    shown = {}
    for path, key in MAIN.items():
        context, page = visit(browser, f"{app_url}{path}?text={TEXT}" if path == "/" else app_url + path, 1280, 800)
        try:
            top = page.evaluate(f"() => document.querySelector('.st-key-{key} .js-plotly-plot')"
                                ".getBoundingClientRect().top")
            shown[path] = round(800 - top)
            shot(page, f"fold{path.replace('/', '_')}", full=False)
        finally:
            context.close()
    assert all(px >= FOLD for px in shown.values()), shown  # px of each main figure on the first screen


@pytest.mark.parametrize("width", (390, 1280))
def test_head_grids_keep_a_readable_size_and_titles_keep_their_words(browser, app_url, width):
    problems, seen = [], set()
    for path in (f"/Attention?text={TEXT}", "/Interventions", "/Analysis", "/Positional",
                 f"/Attention?model=builtin%3Aseed&text={WORDS}"):
        context, page = visit(browser, app_url + path, width, 800, SLOW)
        try:
            page.set_viewport_size({"width": width, "height": 5000})  # every chart drawn
            settled(page, 1000, SLOW)
            found = page.evaluate(CHECKS)
            problems += [f"{path[:30]}@{width}: cut {c}" for c in found["cut"]]
            for chart in page.evaluate(GRIDS):
                if chart["key"] not in GRID_KEYS:
                    continue
                seen.add(chart["key"])
                if chart["plot"] / max(1, chart["heads"]) < HEAD_PX:
                    problems.append(f"{chart['key']}@{width}: {chart['plot']:.0f} px for {chart['heads']} heads")
                if width == 390 and not chart["scrolls"]:
                    problems.append(f"{chart['key']}@390: shrank to its {chart['box']} px box instead of scrolling")
            sideways = page.evaluate("() => document.documentElement.scrollWidth > window.innerWidth + 1")
            if sideways:
                problems.append(f"{path[:30]}@{width}: the page itself scrolls sideways")
            if "builtin%3Aseed" in path:  # the long view's mosaic fills its plot: no blank band under it
                iw, ih, aw, ah = page.evaluate("""() => {
                  const gd = document.querySelector('.st-key-long_overview .js-plotly-plot');
                  const box = gd.querySelector('image').getBoundingClientRect();
                  return [box.width, box.height, gd._fullLayout.xaxis._length, gd._fullLayout.yaxis._length]; }""")
                if iw < 0.97 * aw or ih < 0.97 * ah:
                    problems.append(f"long_overview@{width}: image {iw:.0f}×{ih:.0f} in a {aw:.0f}×{ah:.0f} plot")
            shot(page, f"grids{path.split('?')[0].replace('/', '_')}_{'long_' if 'seed' in path else ''}{width}")
        finally:
            context.close()
    assert seen == set(GRID_KEYS), seen
    assert not problems, "\n".join(problems)


def test_a_head_opened_from_the_grid_at_the_foot_of_the_page_is_brought_into_view(browser, app_url):
    context, page = visit(browser, f"{app_url}/Attention?text={TEXT}", 1280, 800)
    try:
        grid = page.locator(".st-key-links_self .js-plotly-plot")
        grid.scroll_into_view_if_needed()
        settled(page, 1000)
        x, y = page.evaluate("""() => {
          const gd = document.querySelector('.st-key-links_self .js-plotly-plot'), r = gd.getBoundingClientRect();
          const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
          return [r.left + xa._offset + xa.l2p(7), r.top + ya._offset + ya.l2p(4)];
        }""")
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        page.locator(".st-key-detail_self .gtitle", has_text="layer 4, head 7").wait_for(timeout=TIMEOUT)
        page.wait_for_function("""() => {  // its title below Streamlit's header, near the top of the window
            const title = document.querySelector('.st-key-detail_self .gtitle').getBoundingClientRect().top;
            const header = document.querySelector('[data-testid="stHeader"]').getBoundingClientRect().bottom;
            return title >= header && title < 400; }""", timeout=10_000)
        shot(page, "opened_head_in_view", full=False)
    finally:
        context.close()


def test_stop_on_a_long_document_says_what_stopped_and_offers_to_run_it_again(browser, app_url):
    """Streamlit's Stop ends the script mid-forward: the page says what stopped and how far in (no frozen bar over
    an empty page), and one click runs it again to the end."""
    long_text = quote(" ".join(["the river stone cloud light paper window garden music water"] * 300))  # ~3,000
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"{app_url}/Attention?model=builtin%3Aseed&text={long_text}", timeout=TIMEOUT)
        bar = page.locator('[class*="st-key-progress_bar"]').first
        bar.wait_for(timeout=SLOW)
        said = page.locator('[class*="st-key-stopped_"]')
        assert not said.is_visible()  # hidden while the forward runs
        page.get_by_role("button", name="Stop").click()
        said.get_by_text("Stopped about").wait_for(timeout=TIMEOUT)
        assert "Running the model and reading all its heads" in said.inner_text()
        assert not bar.is_visible()  # the frozen bar is gone
        shot(page, "stopped", full=False)
        said.get_by_role("button", name="Run it again").click()
        page.locator(".st-key-long_overview .js-plotly-plot").wait_for(timeout=SLOW)
        assert not said.is_visible()
    finally:
        context.close()
