"""Stop on a long document in a real browser: once the forward has read some layers whole, Streamlit's Stop leaves
a message that says how many of the model's layers are kept, and "Run it again" reads only the others (its bar
says which), to the long view. (AppTest checks the survey it ends with: tests/app/test_long_stop.py.)"""

import re
from urllib.parse import quote

from test_e2e_share import TIMEOUT

SLOW = 600_000  # a ~3,000-token forward of builtin:seed on a busy machine
TEXT = quote(" ".join(["a harbour lantern drifted past seven quiet orchards toward morning"] * 280))  # ~3,000


def test_stop_keeps_the_layers_read_and_run_it_again_reads_the_rest(browser, app_url):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(f"{app_url}/Attention?model=builtin%3Aseed&text={TEXT}", timeout=TIMEOUT)
        said = page.locator('[class*="st-key-stopped_forward"]')
        # Hidden while the forward runs, and kept current: wait until it says a layer is kept.
        said.filter(has_text="were read and are kept").wait_for(state="attached", timeout=SLOW)
        page.get_by_role("button", name="Stop").click()
        said.get_by_text("Stopped about").wait_for(timeout=TIMEOUT)
        words = said.inner_text()
        kept, layers = map(int, re.search(r"the first (\d+) of its (\d+) layers were read and are kept", words).groups())
        assert 1 <= kept < layers, words
        said.get_by_role("button", name="Run it again").click()
        last = "its last layer" if layers - kept == 1 else f"its last {layers - kept} layers"
        rest = page.locator('[class*="st-key-progress_bar_forward"]', has_text=last)
        rest.wait_for(state="attached", timeout=SLOW)  # the rerun reads only the layers not kept
        page.locator(".st-key-long_overview .js-plotly-plot").wait_for(timeout=SLOW)
        assert not said.is_visible()
    finally:
        context.close()
