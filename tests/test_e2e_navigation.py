"""Moving between pages in a real browser keeps the model, text, layer and head.

Streamlit's page links drop the query string and each page has its own widgets, so without the
frame's carry-over every page switch would reset the view to the defaults.
"""

from urllib.parse import quote

from test_e2e_share import TIMEOUT, picked

TEXT = "Navigation keeps pelicans in view."


def test_page_switch_keeps_the_shared_view(page, app_url):
    page.goto(f"{app_url}/?model=builtin:seed&text={quote(TEXT)}&layer=2&head=5", timeout=TIMEOUT)
    page.locator(".gtitle", has_text="layer 2, head 5").wait_for(timeout=TIMEOUT)

    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Attention").click()
    page.get_by_role("heading", name="Attention").first.wait_for(timeout=TIMEOUT)
    page.locator(".gtitle", has_text="layer 2, head 5").first.wait_for(timeout=TIMEOUT)
    assert picked(page, "Model") == "builtin:seed"
    assert picked(page, "Layer") == "2" and picked(page, "Head") == "5"
    assert page.get_by_test_id("stTextArea").locator("textarea").input_value() == TEXT

    page.get_by_test_id("stSidebarNav").get_by_role("link", name="Norms").click()
    page.get_by_role("heading", name="Norms").first.wait_for(timeout=TIMEOUT)
    page.get_by_text("builtin:seed · encoder").wait_for(timeout=TIMEOUT)
    assert page.get_by_test_id("stTextArea").locator("textarea").input_value() == TEXT
    page.wait_for_function("() => location.search.includes('model=builtin%3Aseed')", timeout=TIMEOUT)
