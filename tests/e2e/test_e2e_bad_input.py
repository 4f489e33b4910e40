"""Bad input in a real browser: typed markup stays text; an oversized paste and odd links keep the page alive."""

import re
from urllib.parse import quote_from_bytes

import pytest
from playwright.sync_api import expect

import attnviz
from attnviz.core.tokens import labels

# HTML that would run script or add an element if it reached the page as markup, plus plotly's own markup.
MARKUP = '<b id=pwn>bold</b><img src=x onerror="window.pwned=1"> <a href="https://evil.example/">click</a><br>%{x}'
LEAKS = """() => ({
  pwn: document.getElementById('pwn') !== null || document.getElementById('pwn2') !== null,
  pwned: window.pwned !== undefined,
  img: document.querySelectorAll('img[src="x"]').length,
  anchors: document.querySelectorAll('a[href*="evil.example"]').length,
  // Streamlit's theme sets chart titles in bold; anywhere else bold text came from markup
  bold: [...document.querySelectorAll('.js-plotly-plot tspan[style*="bold"]')]
    .filter(t => !t.closest('.gtitle')).length,
})"""
NO_LEAKS = {"pwn": False, "pwned": False, "img": 0, "anchors": 0, "bold": 0}
PAGES = {"home": ("", "home_heatmap"), "attention": ("/Attention", "detail_self")}


def open_page(page, url):
    page.goto(url)
    box = page.get_by_role("textbox", name="Text", exact=True)
    expect(box).to_be_visible(timeout=90_000)
    return box


def status(page):
    return page.get_by_test_id("stCaptionContainer").first


def ticks(page, chart_key: str) -> list[str]:
    """The key axis's tick labels as the browser drew them (plotly shows every n-th when they crowd)."""
    return page.locator(f".st-key-{chart_key} .xtick text").all_text_contents()


@pytest.mark.parametrize("name", list(PAGES))
def test_markup_typed_into_the_text_box_stays_text(page, app_url, name):
    path, chart = PAGES[name]
    box = open_page(page, app_url + path)
    box.fill(MARKUP)
    box.press("Control+Enter")
    names = labels(attnviz.trace(MARKUP).tokens)
    expect(status(page)).to_contain_text(f"· {len(names)} tokens", timeout=90_000)
    # the chart redraws after the status line: wait for a tick from this text
    new_tick = page.locator(f".st-key-{chart} .xtick text", has_text=re.compile(r"^[<>]")).first
    expect(new_tick).to_be_visible(timeout=60_000)

    assert page.evaluate(LEAKS) == NO_LEAKS
    drawn = ticks(page, chart)
    assert len(drawn) >= 10 and set(drawn) <= set(names), drawn  # the labels themselves, not escapes or markup
    assert any("<" in t for t in drawn) and any('"' in t for t in drawn)
    assert box.input_value() == MARKUP
    if name == "attention":  # the token focus shows the text itself (as tokens, spaced), character for character
        focus = page.get_by_test_id("stHtml").first.inner_text()
        assert re.sub(r"\s", "", focus) == "[CLS]" + re.sub(r"\s", "", MARKUP) + "[SEP]"


def test_markup_in_a_model_name_is_shown_as_text(page, app_url):
    box = open_page(page, app_url)
    expect(status(page)).to_contain_text("tokens", timeout=90_000)
    page.get_by_role("combobox", name="Model").click()
    page.keyboard.type("hf:/no/such/<b id=pwn2>folder</b>")
    page.keyboard.press("Enter")
    alert = page.get_by_test_id("stAlert")
    expect(alert).to_have_text("There is no folder '/no/such/<b id=pwn2>folder</b>'.", timeout=60_000)
    assert page.evaluate(LEAKS) == NO_LEAKS
    assert box.input_value() == "The animal didn't cross the street because it was too tired."


def test_a_paste_over_the_limit_leaves_the_text_as_it_was(page, app_url):
    """A change past 20,000 characters is refused whole: the old text and its chart stay, and the main area says so."""
    box = open_page(page, app_url)
    box.fill("Pasting too much keeps this.")
    box.press("Control+Enter")
    expect(status(page)).to_contain_text(f"· {attnviz.trace('Pasting too much keeps this.').n_tokens} tokens",
                                         timeout=90_000)
    box.select_text()
    page.keyboard.insert_text("attention " * 10_000)  # a 100,000-character paste
    box.press("Control+Enter")
    said = page.get_by_test_id("stMain").get_by_test_id("stAlert")
    expect(said).to_contain_text("The paste of 100,000 characters is over the 20,000", timeout=90_000)
    expect(box).to_have_value("Pasting too much keeps this.", timeout=10_000)
    expect(page.locator(".st-key-home_heatmap .xtick text", has_text=re.compile(r"^keeps$"))).to_have_count(1)
    assert not page.get_by_test_id("stException").count()
    box.select_text()  # the refused paste may have dropped the selection
    box.select_text()
    page.keyboard.insert_text("A short paste.")  # the same way in, within the limit: it lands
    assert box.input_value() == "A short paste."


def test_a_link_with_lone_surrogates_runs_with_replacement_characters(page, app_url):
    raw = "lone \ud800 half".encode("utf-8", "surrogatepass")
    box = open_page(page, f"{app_url}/?text={quote_from_bytes(raw)}")
    shown = raw.decode("utf-8", "replace")
    expect(status(page)).to_contain_text(f"· {attnviz.trace(shown).n_tokens} tokens", timeout=90_000)
    assert box.input_value() == shown
    assert not page.get_by_test_id("stException").count() and not page.get_by_test_id("stAlert").count()
