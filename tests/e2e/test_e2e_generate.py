"""The Generate page in a real browser: open a continuation from a link, step through it with the slider's keys,
and watch the step's figures and the address bar follow."""

import re
import urllib.parse

from playwright.sync_api import expect

from attnviz.backends.hf import load_hf
from attnviz.backends.generation import Sampling
from attnviz.core.tokens import labels

PROMPT = "The quick brown fox jumps over the lazy dog. The quick"


def test_step_through_a_continuation(page, app_url, tiny_model):
    folder = str(tiny_model("gpt2"))
    g = load_hf(folder).generate(PROMPT, Sampling(4))
    names = labels(g.trace.tokens)
    query = urllib.parse.urlencode(dict(model=folder, text=PROMPT, gen_new=4))
    page.goto(f"{app_url}/Generate?{query}")
    title = page.locator(".st-key-gen_step_attention .gtitle")  # during a rerun the old chart stays: filter
    expect(title.filter(has_text="(step 1)")).to_be_visible(timeout=90_000)
    slider = page.get_by_role("slider")
    for step in range(2, g.n_new + 1):
        slider.focus()
        slider.press("ArrowRight")
        chosen = names[g.prompt_len + step - 1]
        expect(title.filter(has_text=f"“{chosen}” (step {step})")).to_be_visible(timeout=30_000)
        expect(title).to_have_count(1)
        assert re.search(rf"[?&]gen_step={step}(&|$)", page.url)
    # The boundary: one dashed line before the first generated token on the step's bars.
    expect(page.locator(".st-key-gen_step_attention .shapelayer path")).to_have_count(1)
