"""Deep links in a real browser: a link opens the view it names, a bad link falls back with a note,
and the downloaded trace is the library's trace."""

import re
from urllib.parse import quote

import numpy as np

import attnviz
from attnviz.export import from_npz
from helpers import settled, steady

TEXT = "Bees make honey, and honey feeds the bees."
TIMEOUT = 60_000


def picked(page, label: str) -> str:
    """The value a selectbox shows."""
    box = page.get_by_test_id("stSelectbox").filter(has=page.get_by_text(label, exact=True))
    return box.locator("input").first.input_value() or box.inner_text().split("\n")[-1]


def test_deep_link_opens_the_named_head(page, app_url):
    page.goto(f"{app_url}/?text={quote(TEXT)}&layer=3&head=7", timeout=TIMEOUT)
    page.locator(".gtitle", has_text="layer 3, head 7").wait_for(timeout=TIMEOUT)
    assert picked(page, "Layer") == "3" and picked(page, "Head") == "7"
    assert page.get_by_test_id("stTextArea").locator("textarea").input_value() == TEXT
    assert not page.get_by_test_id("stAlertContentWarning").count()


def test_deep_link_to_the_attention_page(page, app_url):
    page.goto(f"{app_url}/Attention?text={quote(TEXT)}&layer=3&head=7", timeout=TIMEOUT)
    page.locator(".gtitle", has_text="layer 3, head 7").first.wait_for(timeout=TIMEOUT)
    assert picked(page, "Layer") == "3" and picked(page, "Head") == "7"


def test_bad_link_falls_back_with_a_note_and_a_clean_url(page, app_url):
    model = "[nonsense](https://example.test) **bold**"  # a crafted link's text shows as typed, not as Markdown
    page.goto(f"{app_url}/?model={quote(model)}&layer=99&text={quote(TEXT)}", timeout=TIMEOUT)
    page.get_by_text(f"The link's model {model} could not be opened").wait_for(timeout=TIMEOUT)
    assert not page.get_by_test_id("stAlert").locator("a, strong").count()
    page.get_by_text("Layer 99 in the link is out of range for builtin:minilm (0–5); showing layer 0.").wait_for()
    page.locator(".gtitle", has_text="layer 0, head 0").wait_for(timeout=TIMEOUT)
    assert picked(page, "Model") == "builtin:minilm"
    page.wait_for_function("() => !location.search.includes('model=') && !location.search.includes('layer=99')",
                           timeout=TIMEOUT)

    settled(page)
    page.get_by_text("Share and export").click()
    link = page.get_by_test_id("stCode").inner_text()
    assert re.match(rf"{re.escape(app_url)}/\?model=builtin%3Aminilm&text=Bees\+make", link.strip())
    button = page.get_by_role("button", name="Whole trace (.npz)")
    steady(button)
    with page.expect_download(timeout=TIMEOUT) as download:
        button.click()
    got = from_npz(download.value.path())
    want = attnviz.trace(TEXT)
    assert download.value.suggested_filename == "attnviz_builtin-minilm.npz"
    assert got.tokens == want.tokens
    np.testing.assert_allclose(got.attentions, want.attentions, atol=1e-6)
