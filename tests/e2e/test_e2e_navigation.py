"""Moving between pages in a real browser keeps the model, text, layer and head.

Streamlit's page links drop the query string and each page has its own widgets, so without the
frame's carry-over every page switch would reset the view to the defaults.
"""

from urllib.parse import quote

from helpers import settled
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


def test_the_sidebar_names_the_home_page_home(page, app_url):
    page.goto(app_url, timeout=TIMEOUT)
    nav = page.get_by_test_id("stSidebarNav")
    page.get_by_role("heading", name="attnviz").first.wait_for(timeout=TIMEOUT)
    settled(page)
    names = [n.strip() for n in nav.get_by_role("link").all_inner_texts()]
    assert names == ["Home", "Attention", "Positional", "Norms", "Analysis", "Train", "Compare", "Roles", "Generate",
                     "Corpus", "Interventions", "Faithfulness"], names  # Long text: the Attention page now (hidden)
    nav.get_by_role("link", name="Compare").click()
    page.get_by_role("heading", name="Compare").first.wait_for(timeout=TIMEOUT)
    assert page.url.rstrip("/").split("?")[0].endswith("/Compare")
    nav.get_by_role("link", name="Home").click()
    page.get_by_role("heading", name="attnviz").first.wait_for(timeout=TIMEOUT)


def test_a_visitor_who_opens_a_page_first_sees_home_too(browser):
    """Streamlit names the home page after its file ("app") until a run calls st.navigation: a fresh
    server whose first visitor opens /Attention must still say Home."""
    from conftest import start_server

    proc, url = start_server()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pg = context.new_page()
        pg.goto(f"{url}/Attention", timeout=TIMEOUT)
        pg.get_by_role("heading", name="Attention").first.wait_for(timeout=TIMEOUT)
        settled(pg)
        names = [n.strip() for n in pg.get_by_test_id("stSidebarNav").get_by_role("link").all_inner_texts()]
        assert names[0] == "Home", names
        assert pg.url.split("?")[0].endswith("/Attention")
    finally:
        context.close()
        proc.terminate()
        proc.wait(timeout=20)
