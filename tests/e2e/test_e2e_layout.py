"""What is drawn, in a real browser, at a desktop width, at 800 px and on a 390 px phone: no text on other text
in any chart, nothing cut off, columns stacked when two no longer fit, the overview filling its width."""

from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from attnviz.export import figure_html
from attnviz.figures.attention import attention_heatmap
from conftest import SCREENSHOTS
from helpers import settled
from test_e2e_share import TIMEOUT

CHECKS = (Path(__file__).parents[1] / "layout_checks.js").read_text(encoding="utf-8")
# Long words: merged into words they make long tick labels, the case that used to run into titles.
TEXT = quote("Antidisestablishmentarianism notwithstanding, supercalifragilistic incomprehensibilities "
             "overwhelmed everyone.")
LONG_TEXT = quote("Antidisestablishmentarianism notwithstanding, supercalifragilistic incomprehensibilities "
                  "overwhelmed everyone. " * 16)  # ~350 tokens: the Attention page's long view
PAGES = {
    "home": f"/?text={TEXT}&merge=true",
    "attention": f"/Attention?text={TEXT}&merge=true",
    "norms": f"/Norms?text={TEXT}",
    "compare": f"/Compare?text={TEXT}",
    "analysis": f"/Analysis?text={TEXT}",
}
WIDTHS = (1400, 800, 390)

FILLS = """() => {  // the overview's image against its plot area, in pixels
  const gd = document.querySelector('.st-key-overview_self .js-plotly-plot');
  const box = gd.querySelector('.layer-subplot image, image').getBoundingClientRect();
  return [box.width, box.height, gd._fullLayout.xaxis._length, gd._fullLayout.yaxis._length];
}"""
WIDTHS_JS = """() => {  // each chart's width and the main column's, and whether the page scrolls sideways
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const inner = main.getBoundingClientRect().width - parseFloat(getComputedStyle(main).paddingLeft)
                - parseFloat(getComputedStyle(main).paddingRight);
  const charts = [...document.querySelectorAll('.stPlotlyChart')].map(c => c.getBoundingClientRect().width);
  const scroller = document.querySelector('[data-testid="stMain"]') || document.documentElement;
  return {inner, charts, sideways: scroller.scrollWidth > scroller.clientWidth + 1
                                   || document.documentElement.scrollWidth > window.innerWidth + 1};
}"""


def open_page(browser, url: str, width: int, timeout: int = TIMEOUT):
    context = browser.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    page.goto(url, timeout=timeout)
    page.locator(".js-plotly-plot").first.wait_for(timeout=timeout)
    settled(page, 1500, 120_000)
    return context, page


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"layout_{name}.png"), full_page=True)


@pytest.mark.parametrize("width", WIDTHS)
def test_no_text_on_text_nothing_cut_and_columns_that_fit(browser, app_url, width):
    problems = []
    for name, path in PAGES.items():
        context, page = open_page(browser, app_url + path, width)
        try:
            page.set_viewport_size({"width": width, "height": 4000})  # every chart drawn at once
            settled(page, 1000)
            found = page.evaluate(CHECKS)
            assert found["charts"] >= 1, name
            problems += [f"{name}@{width}: overlap {o}" for o in found["overlaps"]]
            problems += [f"{name}@{width}: cut {c}" for c in found["cut"]]
            sizes = page.evaluate(WIDTHS_JS)
            if sizes["sideways"]:
                problems.append(f"{name}@{width}: the page scrolls sideways")
            if width <= 800:  # two charts do not fit side by side here: every chart gets the whole width
                narrow = [round(w) for w in sizes["charts"] if w < 0.9 * sizes["inner"]]
                if narrow:
                    problems.append(f"{name}@{width}: charts {narrow} px wide in a {sizes['inner']:.0f} px column")
            if name == "attention":
                iw, ih, aw, ah = page.evaluate(FILLS)
                if iw < 0.97 * aw or ih < 0.97 * ah:
                    problems.append(f"{name}@{width}: overview image {iw:.0f}×{ih:.0f} in a {aw:.0f}×{ah:.0f} plot")
            shot(page, f"{name}_{width}")
        finally:
            context.close()
    assert not problems, "\n".join(problems)


# Each chart's sides the plot area grew past the margin its figure set: plotly's automargin makes room for a tick
# label, an axis title, a colour bar or a legend by laying the whole figure out a second time.
GREW = """() => [...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const size = gd._fullLayout._size, margin = gd.layout.margin || {};
  const key = [...gd.closest('[class*="st-key-"]').classList].find(c => c.startsWith('st-key-'));
  return [key, ['l', 'r', 't', 'b'].filter(side => Math.round(size[side]) > (margin[side] ?? 80))];
})"""


@pytest.mark.parametrize("width", (1400, 800))
def test_the_attention_charts_short_and_long_are_laid_out_once(browser, app_url, width):
    """Their margins already hold every label (the long words' too), so plotly lays each out once. (On a phone the
    reach's legend wraps and the distance labels tilt: those two charts grow there, as the layout test allows.)"""
    grown = []
    for path in (PAGES["attention"], f"/Attention?text={LONG_TEXT}"):
        context, page = open_page(browser, app_url + path, width)
        try:
            page.set_viewport_size({"width": width, "height": 4000})
            settled(page, 1000)
            charts = page.evaluate(GREW)
            assert len(charts) >= 5, (path, charts)
            grown += [f"{path[:40]}@{width}: {key} grew {sides}" for key, sides in charts if sides]
        finally:
            context.close()
    assert not grown, "\n".join(grown)


def test_a_causal_models_masked_caption_is_whole(browser, app_url, tiny_model):
    folder = quote(str(tiny_model("gpt2")))
    for width in (1400, 390):
        context, page = open_page(browser, f"{app_url}/Attention?model={folder}&text={TEXT}", width)
        try:
            page.set_viewport_size({"width": width, "height": 4000})
            settled(page, 1000)
            caption = page.locator(".st-key-detail_self .annotation-text", has_text="grey: masked (future tokens)")
            caption.wait_for(timeout=TIMEOUT)
            found = page.evaluate(CHECKS)
            assert not found["overlaps"] and not found["cut"], found
            shot(page, f"causal_{width}")
        finally:
            context.close()


def test_the_cli_html_page_has_no_text_on_text(browser, tmp_path):
    names = ["[CLS]", "antidisestablishmentarianism", "notwithstanding", "supercalifragilisticexpialidocious", "[SEP]"]
    w = np.random.default_rng(0).dirichlet(np.ones(5), 5).astype(np.float32)
    title = "builtin:minilm · layer 3, head 7"
    (tmp_path / "f.html").write_text(figure_html(attention_heatmap(w, names, names, title)), encoding="utf-8")
    for width in (1400, 390):
        context = browser.new_context(viewport={"width": width, "height": 900})
        try:
            page = context.new_page()
            page.goto((tmp_path / "f.html").as_uri())
            page.locator(".gtitle").wait_for()
            found = page.evaluate(CHECKS)
            assert found["charts"] == 1 and not found["overlaps"] and not found["cut"], found
            assert page.title() == title
        finally:
            context.close()


# Issue 33's pages, at the widths a newcomer met them: each chart named is checked for text on text and for labels too
# close to read (axis labels piled up, dropped, or cell numbers wider than their cells).
WORDS = quote(" ".join(["the river stone cloud light paper window garden music water"] * 30))  # 302 tokens: long
SLOW = 300_000  # the Roles page runs the probe, the Attention page's long view its survey: minutes on a busy machine
CROWDED_CHECKS = {
    "/Roles": ("role_grid",),
    f"/Attention?model=builtin%3Aseed&text={WORDS}": ("long_sinks", "long_delims", "long_window"),
    "/": ("home_heatmap",),
}


@pytest.mark.parametrize("width", (1400, 800, 390))
@pytest.mark.parametrize("path", list(CROWDED_CHECKS))
def test_titles_clear_of_axes_and_labels_far_enough_apart_to_read(browser, app_url, path, width):
    if path.startswith("/Attention") and width == 390:
        pytest.skip("a phone has no room for a window's token labels; the block map and the reach are its view")
    context, page = open_page(browser, app_url + path, width, SLOW)
    try:
        page.set_viewport_size({"width": width, "height": 5000})
        settled(page, 1000)
        found = page.evaluate(CHECKS)
        keys = CROWDED_CHECKS[path]
        mine = lambda items: [i for i in items if i.split(":")[0] in keys]  # noqa: E731
        assert not mine(found["overlaps"]) and not mine(found["cut"]) and not mine(found["crowded"]), found
        plots = page.evaluate("""(keys) => keys.map(k => document.querySelector('.st-key-' + k + ' .js-plotly-plot'))
            .filter(Boolean).map(gd => [gd._fullLayout.xaxis._length, gd.getBoundingClientRect().width])""", list(keys))
        assert len(plots) == len(keys), plots
        for plot, chart in plots:  # each plot area has most of its chart's width (a phone's home heatmap had 105 px)
            assert plot >= 0.5 * chart, plots
        shot(page, f"edges_{keys[0]}_{width}")
    finally:
        context.close()


def test_a_head_clicked_on_roles_opens_on_the_attention_page_and_in_its_address(browser, app_url):
    context, page = open_page(browser, f"{app_url}/Roles?text={TEXT}", 1400, SLOW)
    try:
        for layer, head in ((2, 7), (4, 3)):  # the second must not reopen the first
            grid = page.locator(".st-key-role_grid .js-plotly-plot")
            grid.wait_for(timeout=SLOW)
            settled(page, 1000)
            x, y = page.evaluate("""([l, h]) => {
              const gd = document.querySelector('.st-key-role_grid .js-plotly-plot'), r = gd.getBoundingClientRect();
              const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
              return [r.left + xa._offset + xa.l2p(h), r.top + ya._offset + ya.l2p(l)];
            }""", [layer, head])
            page.mouse.move(x, y)
            page.mouse.click(x, y)
            page.locator(".st-key-detail_self .gtitle", has_text=f"layer {layer}, head {head}").wait_for(timeout=SLOW)
            page.wait_for_function(f"() => /[?&]layer={layer}(&|$)/.test(location.search) "
                                   f"&& /[?&]head={head}(&|$)/.test(location.search)", timeout=SLOW)
            page.get_by_test_id("stSidebarNav").get_by_role("link", name="Roles").click()
    finally:
        context.close()


# Each chart's plotly toolbar, its first title line and Streamlit's own toolbar (full screen), while the pointer is
# on the chart (the toolbars show then): boxes in pixels, [left, top, right, bottom].
TOOLBARS = """(key) => {
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
                      return r.width > 0 ? [r.left, r.top, r.right, r.bottom] : null; };
  const chart = document.querySelector('.st-key-' + key), gd = chart.querySelector('.js-plotly-plot');
  const line = gd.querySelector('.gtitle tspan.line') || gd.querySelector('.gtitle');
  const buttons = [...gd.querySelectorAll('.modebar-btn')].map(box).filter(Boolean);
  return {modebar: box(gd.querySelector('.modebar')), title: box(line), buttons,
          streamlit: box(chart.querySelector('[data-testid="stElementToolbar"]')),
          seen: getComputedStyle(gd.querySelector('.modebar')).opacity,
          reach: Math.max(window.innerWidth, chart.getBoundingClientRect().left + chart.scrollWidth)};
}"""


def meets(a, b) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


@pytest.mark.parametrize("width", (390, 1280))
def test_a_charts_toolbar_covers_no_title_and_stays_in_reach(browser, app_url, width):
    """While the pointer is on a chart its toolbar shows: at 390 px it sits in a strip above the chart (it covered
    the first line of a long title), clear of Streamlit's own toolbar; every button within reach (inside the
    window, or the box a head grid scrolls sideways in)."""
    problems, seen = [], 0
    for name in ("home", "attention", "norms", "analysis"):
        context, page = open_page(browser, app_url + PAGES[name], width)
        try:
            keys = page.evaluate("""() => [...document.querySelectorAll('.stPlotlyChart')].map(c =>
                [...c.closest('[class*="st-key-"]').classList].find(k => k.startsWith('st-key-')).slice(7))""")
            for key in keys:
                chart = page.locator(f".st-key-{key} .js-plotly-plot")
                chart.scroll_into_view_if_needed()
                chart.hover(position={"x": 5, "y": 5})
                page.wait_for_timeout(300)
                found = page.evaluate(TOOLBARS, key)
                if not found["title"]:
                    continue
                seen += 1
                bar, title = found["modebar"], found["title"]
                if float(found["seen"]) < 0.5:
                    problems.append(f"{name}@{width}: {key}'s toolbar does not show on hover")
                if meets(bar, title):
                    problems.append(f"{name}@{width}: {key}'s toolbar {bar} covers its title {title}")
                if found["streamlit"] and meets(bar, found["streamlit"]):
                    problems.append(f"{name}@{width}: {key}'s toolbar {bar} under Streamlit's {found['streamlit']}")
                if not found["buttons"] or any(b[0] < 0 or b[2] > found["reach"] + 0.5 for b in found["buttons"]):
                    problems.append(f"{name}@{width}: {key}'s toolbar buttons out of reach {found['buttons']}")
            if width == 390:
                shot(page, f"toolbar_{name}")
        finally:
            context.close()
    assert seen >= 6, seen
    assert not problems, "\n".join(problems)
