"""Markdown in a link's parameters is shown as text, never as a link or an image (AppTest and Chromium).

A crafted link such as ``/Compare?model_b=[Session expired](https://evil.example/login)`` once put a
clickable link inside the red error box. Every message that can hold text from a visitor, a link or an
exception goes through ``escape.plain`` (or quotes values with ``escape.code``).
"""

import html
import re

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from attnviz.ui.escape import code, plain
from helpers import open_page

PAYLOADS = {
    "link": "[Session expired - click here](https://evil.example/login)",
    "image": "![x](http://127.0.0.1:9/pixel.png)",
    "bare": "Visit https://evil.example or www.evil.example or mail me@evil.example **now** <b>x</b> :red[x] $x^2$",
}
# Every parameter a page binds to the URL, and the shared ones on every page.
SHARED = ("model", "text", "layer", "head")
PAGES = {
    "app.py": (),
    "pages/1_Attention.py": ("hide_special", "renorm", "merge", "threshold", "log_scale", "direction", "focus",
                             "stack"),
    "pages/2_Positional.py": ("pos_view", "pe_len", "pe_dim", "pe_metric", "model_metric", "model_from", "pos_stack",
                              "pos_skip_special"),
    "pages/3_Norms.py": ("norm_stat", "norm_stack", "norm_rows"),
    "pages/4_Analysis.py": ("stat", "relevance_method", "analysis_stack"),
    "pages/5_Train.py": (),
    "pages/6_Compare.py": ("model_b", "text_b", "compare_stack"),
    "pages/7_Roles.py": ("roles_stack", "roles_on"),
    "pages/8_Generate.py": ("gen_new", "gen_temp", "gen_top_k", "gen_seed", "gen_step"),
    "pages/9_Long_text.py": ("pool", "zoom_start", "zoom_size", "token"),
    "pages/10_Corpus.py": (),
}
_MD = MarkdownIt("commonmark")
# What GitHub-flavoured Markdown (Streamlit's renderer) links by itself in plain text, outside code spans.
_AUTOLINK = re.compile(r"(?i)https?://|www\.|[-.\w+]+@[-\w]+\.\w")


def rendered(body: str) -> str:
    """A message's Markdown as HTML, the way a CommonMark renderer shows it."""
    return _MD.render(body)


def assert_inert(body: str) -> None:
    """No link, image or markup comes out of ``body``; no bare address sits outside a code span."""
    out = rendered(body)
    assert "<a" not in out and "<img" not in out and "<strong>now" not in out and "<b>x" not in out, (body, out)
    outside_code = re.sub(r"<code>.*?</code>", "", out, flags=re.S)
    assert not _AUTOLINK.search(outside_code), (body, out)


def messages(at: AppTest) -> list[str]:
    """Every Markdown body on the page: text, captions and alert boxes."""
    kinds = ("markdown", "caption", "error", "warning", "info", "success")
    return [el.value for kind in kinds for el in getattr(at, kind)]


@pytest.mark.parametrize("payload", list(PAYLOADS.values()), ids=list(PAYLOADS))
def test_plain_and_code_keep_markdown_inert(payload):
    for body in (plain(payload), plain(f"Could not run {payload}: ValueError: {payload}"), f"x {code(payload)} y"):
        assert_inert(body)
    assert words(plain(payload)) == payload  # what a visitor reads: the payload's characters, as typed


def words(body: str) -> str:
    """The text a visitor reads in ``body`` once rendered."""
    return html.unescape(re.sub(r"<[^>]+>", "", rendered(body))).strip()


@pytest.mark.parametrize("payload", list(PAYLOADS), ids=list(PAYLOADS))
@pytest.mark.parametrize("page", list(PAGES))
def test_markdown_in_every_url_parameter_is_shown_as_text(page, payload):
    at = open_page(page, **{name: PAYLOADS[payload] for name in SHARED + PAGES[page]})
    assert not at.exception, at.exception[0].value
    bodies = messages(at)
    for body in bodies:
        assert_inert(body)
    shown = " ".join(rendered(b) for b in bodies)
    # The link's model and layer are quoted in notes above the page: the visitor sees what the link held.
    assert "pixel.png" in shown or "evil.example" in shown, bodies


def test_compare_model_b_error_shows_the_link_as_text():
    """The reported attack: the error box quotes model B's name as typed, with no link in it."""
    at = open_page("pages/6_Compare.py", model_b=PAYLOADS["link"])
    assert not at.exception
    (error,) = at.error
    assert error.value.startswith("B: Unknown model ")
    assert_inert(error.value)
    assert f"B: Unknown model '{PAYLOADS['link']}'." in words(error.value)


BROWSER_LINKS = {
    "compare-link": ("/Compare", {"model_b": PAYLOADS["link"]}),
    "compare-image": ("/Compare", {"model_b": PAYLOADS["image"], "text_b": PAYLOADS["image"]}),
    "home-everything": ("/", {name: PAYLOADS["bare"] for name in SHARED}),
    "home-image": ("/", {"model": PAYLOADS["image"], "layer": PAYLOADS["link"], "head": PAYLOADS["image"]}),
}


@pytest.mark.parametrize("name", list(BROWSER_LINKS))
def test_markdown_in_a_link_renders_as_text_in_chromium(page, app_url, name):
    from urllib.parse import urlencode

    from playwright.sync_api import expect

    path, params = BROWSER_LINKS[name]
    fetched = []  # the image payload points at a port on this machine: the browser must never ask for it
    page.on("request", lambda r: fetched.append(r.url) if not r.url.startswith(app_url) else None)
    page.goto(app_url + path + "?" + urlencode(params))
    alert = page.get_by_test_id("stAlert").first
    expect(alert).to_be_visible(timeout=90_000)
    expect(page.get_by_test_id("stCaptionContainer").first).to_contain_text("tokens", timeout=90_000)
    page.wait_for_timeout(500)
    leaks = page.evaluate("""() => ({
        anchors: [...document.querySelectorAll('[data-testid="stAlert"] a, [data-testid="stMarkdown"] a')]
            .map(a => a.href),
        images: [...document.querySelectorAll('[data-testid="stAlert"] img, [data-testid="stMarkdown"] img')]
            .map(i => i.src),
        strong: [...document.querySelectorAll('[data-testid="stAlert"] strong')].map(s => s.textContent),
    })""")
    assert leaks == {"anchors": [], "images": [], "strong": []}, leaks
    assert not fetched, fetched
    shown = " ".join(page.get_by_test_id("stAlert").all_inner_texts())
    value = next(iter(params.values()))
    assert ("Session expired" in shown) if value == PAYLOADS["link"] else ("pixel.png" in shown or "evil" in shown)


@pytest.mark.parametrize("extra, why", [
    ({"text": "word " * 110_000}, "550,026 characters, over the 524,288 Streamlit reads"),
    ({f"p{i}": "1" for i in range(1000)}, "1,001 parameters, over the 1,000 Streamlit reads"),
], ids=["long", "many"])
def test_a_link_over_streamlits_query_string_limit_gets_a_note(extra, why):
    at = open_page(model="builtin:seed", **extra)
    assert not at.exception and not at.error
    assert [w.value for w in at.warning] == [f"This link has {why}, so none of it could be used; showing the "
                                             "default view."]
    assert at.selectbox(key="model").value == "builtin:minilm"
