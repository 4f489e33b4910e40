"""The Generate page in real Streamlit (AppTest): step through a continuation; every figure equals the library's."""

import html

import numpy as np
import pytest

from attnviz.backends.hf import load_hf
from attnviz.backends.generation import Sampling
from attnviz.core.tokens import clean, labels
from helpers import decode, ok, open_page
from test_analysis_pages import charts

PROMPT = "The quick brown fox jumps over the lazy dog. The quick"


@pytest.fixture(scope="module")
def gpt2(tiny_model):
    folder = str(tiny_model("gpt2"))
    return folder, load_hf(folder)


def test_each_step_of_a_sampled_continuation(gpt2):
    folder, backend = gpt2
    view = dict(model=folder, text=PROMPT, gen_new="6", gen_temp="1.2", gen_top_k="30", gen_seed="5")
    g = backend.generate(PROMPT, Sampling(6, 1.2, 30, 5))
    names = labels(g.trace.tokens)
    for step in range(1, g.n_new + 1):  # each step from a link (a typed model folder does not survive set_value)
        figs = charts(ok(open_page("pages/8_Generate.py", **view, layer="1", head="2", gen_step=str(step))))
        pos = g.prompt_len + step - 1
        bars = figs["gen_step_attention"]["data"][0]
        np.testing.assert_allclose(decode(bars["y"]), g.trace.row(1, 2, pos - 1)[:pos], atol=1e-6)
        assert len(decode(bars["y"])) == pos  # keys 0..pos − 1: nothing later
        boundary = [s for s in figs["gen_step_attention"]["layout"]["shapes"] if s["type"] == "line"]
        assert boundary[0]["x0"] == g.prompt_len - 0.5
        top = figs["gen_top"]["data"][0]
        np.testing.assert_allclose(decode(top["x"]), g.top_probs[step - 1], atol=1e-9)
        assert figs["gen_top"]["layout"]["yaxis"]["ticktext"] == [html.escape(clean(x), quote=False)
                                                                  for x in g.top_tokens[step - 1]]
        assert names[pos] in figs["gen_step_attention"]["layout"]["title"]["text"] or "&" in names[pos]
    heat = figs["gen_heatmap"]
    np.testing.assert_allclose(decode(heat["data"][0]["z"]), g.trace.head(1, 2), atol=1e-6)
    assert {s["x0"] for s in heat["layout"]["shapes"] if s["type"] == "line"} >= {g.prompt_len - 0.5}


def test_a_link_opens_the_same_step_and_an_encoder_gets_a_message(gpt2):
    folder, backend = gpt2
    g = backend.generate(PROMPT, Sampling(5))
    at = ok(open_page("pages/8_Generate.py", model=folder, text=PROMPT, gen_new="5", gen_step="4", layer="0", head="1"))
    bars = charts(at)["gen_step_attention"]["data"][0]
    np.testing.assert_allclose(decode(bars["y"]), g.trace.row(0, 1, g.prompt_len + 2)[:g.prompt_len + 3], atol=1e-6)
    at = ok(open_page("pages/8_Generate.py", text=PROMPT))  # builtin:minilm, an encoder
    assert "not a causal language model" in at.info[0].value and not at.get("plotly_chart")


def test_user_text_is_escaped(gpt2):
    folder, _ = gpt2
    at = ok(open_page("pages/8_Generate.py", model=folder, text="<b id=pwn>bold</b> and <img src=x onerror=alert(1)>",
                gen_new="3"))
    shown = " ".join(h.proto.body for h in at.get("html"))
    assert "<b id=pwn>" not in shown and "<img" not in shown and "&lt;" in shown


def test_stepping_with_the_slider_on_builtin_lm():
    """The shipped language model: the slider walks the steps, the link follows, every figure follows."""
    import attnviz

    prompt = "anna saw the red ball . then ben found the box . anna saw the"
    g = attnviz.load("builtin:lm").generate(prompt, Sampling(5))
    at = ok(open_page("pages/8_Generate.py", model="builtin:lm", text=prompt, gen_new="5", layer="1", head="0"))
    for step in range(1, g.n_new + 1):
        if step > 1:
            at.slider(key="gen_step").set_value(step)
            at = ok(at.run())
            assert at.slider(key="gen_step").value == step  # (the address bar: tests/e2e/test_e2e_generate.py)
        figs = charts(at)
        pos = g.prompt_len + step - 1
        np.testing.assert_allclose(decode(figs["gen_step_attention"]["data"][0]["y"]),
                                   g.trace.row(1, 0, pos - 1)[:pos], atol=1e-6)
        np.testing.assert_allclose(decode(figs["gen_top"]["data"][0]["x"]), g.top_probs[step - 1], atol=1e-9)
