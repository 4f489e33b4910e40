"""The Analysis and Compare pages in real Streamlit (AppTest): every figure equals the library's analysis."""

import json
import re

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest

import attnviz
from attnviz.analysis import attention_flow, difference, head_importance, head_stats, head_table, match, rollout
from attnviz.core.tokens import labels
from helpers import chart_specs, decode, ok, open_page

TEXT = "The animal didn't cross the street because it was too tired."
TEXT_B = "The animal didn't cross the river because it was too wide."


def charts(at) -> dict:
    """Figures by chart key."""
    return {c.proto.id.rsplit("-", 1)[-1]: spec for c, spec in zip(at.get("plotly_chart"), chart_specs(at))}


def select(at, chart_key: str, point: dict) -> AppTest:
    """What the browser sends when a point of a plotly chart is clicked (AppTest cannot click plotly)."""
    (chart,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith(chart_key)]
    state = at._tree.get_widget_states()
    state.widgets.append(WidgetState(id=chart.proto.id, string_value=json.dumps(
        {"selection": {"points": [point], "point_indices": [point["point_index"]], "box": [], "lasso": []}})))
    return at._run(state)


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace(TEXT)


def test_head_statistics_rollout_and_the_caveat(trace):
    at = ok(open_page("pages/4_Analysis.py", text=TEXT, stat="mean attention distance"))  # the URL holds the label
    assert "not an explanation" in at.info[0].value and "Jain & Wallace 2019" in at.info[0].value
    figs = charts(at)
    stats = head_stats(trace)
    heat, points = figs["stat_map"]["data"]
    np.testing.assert_allclose(decode(heat["z"]), stats["distance"], atol=1e-9)
    assert (heat["zmin"], heat["zmax"]) == (0, trace.n_tokens - 1)
    assert decode(points["customdata"]).tolist() == [[layer, head] for layer in range(6) for head in range(12)]
    table = at.dataframe[0].value
    np.testing.assert_allclose(table.to_numpy(float), head_table(stats).to_numpy(float), atol=1e-9)
    assert any("Σ_j α_ij |i − j|" in c.value for c in at.caption)
    # Rollout into [CLS] after the last layer: on the text (one span per token) and as an (L, T) map.
    r = rollout(trace.attentions)[:, 0]  # (L, T)
    np.testing.assert_allclose(decode(figs["relevance_map"]["data"][0]["z"]), r, atol=1e-9)
    (text,) = [h.proto.body for h in at.get("html")]
    np.testing.assert_allclose([float(x) for x in re.findall(r'title="([\d.]+)', text)], r[-1], atol=5e-5)
    assert any("Abnar & Zuidema 2020" in c.value for c in at.caption)
    (formula,) = at.latex  # the rollout formula typeset, not raw text
    assert r"R_l = \tilde A_l\, R_{l-1}" in formula.value


def test_flow_into_a_chosen_token_and_its_length_limit(trace):
    at = ok(open_page("pages/4_Analysis.py", text=TEXT, relevance_method="flow"))
    names = labels(trace.tokens)
    it = names.index("it")
    at.selectbox(key="relevance_target").set_value(it)
    at.selectbox(key="relevance_layer").set_value(2)
    ok(at.run())
    flow = attention_flow(trace.attentions, it)
    np.testing.assert_allclose(decode(charts(at)["relevance_map"]["data"][0]["z"]), flow, atol=1e-9)
    (text,) = [h.proto.body for h in at.get("html")]
    np.testing.assert_allclose([float(x) for x in re.findall(r'title="([\d.]+)', text)], flow[2], atol=5e-5)
    long = ok(open_page("pages/4_Analysis.py", text=" ".join(["word"] * 80), relevance_method="flow"))
    assert "limited to 64 tokens" in long.warning[0].value
    assert "relevance_map" not in charts(long)


def test_ablation_button_and_clicking_a_head_opens_it(trace):
    at = ok(open_page("pages/4_Analysis.py", text=TEXT))
    assert "1 − cos" in at.main.markdown[-1].value  # the sidebar has its own (the text box's limit)
    ok(at.button(key="ablate").click().run())
    scores, _ = head_importance(attnviz.load("builtin:minilm"), TEXT)
    heat, _ = charts(at)["importance_map"]["data"]
    np.testing.assert_allclose(decode(heat["z"]), scores, atol=1e-9)
    # A click on layer 4, head 9 of the statistics map opens that head on the attention page. The payload is
    # what Chromium sent for such a click (customdata arrives as an object with keys "0" and "1").
    select(at, "stat_map", {"curve_number": 1, "point_number": 57, "point_index": 57, "x": 9, "y": 4,
                            "customdata": {"0": 4, "1": 9}, "text": "0.5"})
    ok(at)
    assert at.title[0].value == "Attention"
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (4, 9)
    assert at.text_area(key="text").value == TEXT


def test_a_click_opens_that_head_whichever_page_was_open_before():
    # Home at layer 2 head 5 first: the page switch must not bring that head back over the clicked one.
    at = ok(open_page(text=TEXT))
    at.selectbox(key="layer").set_value(2)
    at.selectbox(key="head").set_value(5)
    ok(at.run())
    ok(at.switch_page("pages/4_Analysis.py").run())
    select(at, "stat_map", {"curve_number": 1, "point_number": 43, "point_index": 43, "x": 7, "y": 3,
                            "customdata": {"0": 3, "1": 7}, "text": "0.5"})
    ok(at)
    assert at.title[0].value == "Attention"
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (3, 7)
    assert [c for c in charts(at) if c.startswith("detail")]
    (detail,) = [s for k, s in charts(at).items() if k.startswith("detail")]
    assert detail["layout"]["title"]["text"] == "layer 3, head 7"


def test_user_text_is_escaped_on_the_page():
    at = ok(open_page("pages/4_Analysis.py", text='<b>bold</b> & <a href="x">link</a>'))
    (text,) = [h.proto.body for h in at.get("html")]
    assert "&lt;" in text and "<b>" not in text and "<a " not in text
    ticks = charts(at)["relevance_map"]["data"][0]["x"]
    assert any("&lt;" in t for t in ticks) and not any("<" in t for t in ticks)


def test_an_encoder_decoder_gets_a_stack_choice_and_no_ablation(tiny_model):
    folder = tiny_model("bart")
    at = ok(open_page("pages/4_Analysis.py", text=TEXT, model=f"hf:{folder}", analysis_stack="decoder"))
    t = attnviz.load(f"hf:{folder}").trace(TEXT)
    stats = head_stats(t.decoder)
    np.testing.assert_allclose(decode(charts(at)["stat_map"]["data"][0]["z"]), stats["entropy"], atol=1e-9)
    assert any("encoder–decoder models are not supported" in i.value for i in at.info)
    assert not [b for b in at.button if b.key == "ablate"]


def test_compare_two_texts_side_by_side_and_their_difference(trace):
    at = ok(open_page("pages/6_Compare.py", text=TEXT, text_b=TEXT_B, layer="2", head="5"))
    t_b = attnviz.trace(TEXT_B)
    figs = charts(at)
    np.testing.assert_allclose(decode(figs["compare_a"]["data"][0]["z"]), trace.attentions[2, 5], atol=1e-7)
    np.testing.assert_allclose(decode(figs["compare_b"]["data"][0]["z"]), t_b.attentions[2, 5], atol=1e-7)
    ia, ib = match(trace.tokens, t_b.tokens)
    assert len(ia) == trace.n_tokens - 2  # everything but "street" / "tired" against "river" / "wide"
    want = trace.attentions[2, 5][np.ix_(ia, ia)] - t_b.attentions[2, 5][np.ix_(ib, ib)]
    diff = figs["compare_diff"]["data"][0]
    np.testing.assert_allclose(decode(diff["z"]), want, atol=1e-7)
    assert diff["x"] == [labels(trace.tokens)[i] for i in ia]  # A's labels, not the shared tokens renumbered
    assert any("token sequences differ" in c.value for c in at.caption)
    # The mean over heads, and B the same as A.
    at.selectbox(key="head").set_value("mean")
    at.text_area(key="text_b").set_value("")
    ok(at.run())
    assert any("B is the same as A" in i.value for i in at.info)
    np.testing.assert_allclose(decode(charts(at)["compare_diff"]["data"][0]["z"]), 0.0, atol=0)


def test_compare_starts_with_a_contrasting_pair_and_keeps_as_labels():
    at = ok(open_page("pages/6_Compare.py"))  # A: the default text
    text_b = at.text_area(key="text_b").value
    assert text_b == "The animal didn't cross the street because it was too wide."
    assert not any("B is the same as A" in i.value for i in at.info)
    a, b = attnviz.trace(TEXT), attnviz.trace(text_b)
    ia, ib = match(a.tokens, b.tokens)
    diff = charts(at)["compare_diff"]["data"][0]
    assert np.abs(decode(diff["z"])).max() > 0.01  # a difference to look at, on a scale that shows it
    names = labels(a.tokens)
    assert diff["x"] == [names[i] for i in ia]
    second_the = [n for n in names if n.startswith("the (")][1]
    assert second_the in diff["x"]  # numbered by its place in A, whatever tokens B lacks
    # B without tokens before the second "the": the shared tokens renumbered would call it "the (4)".
    at.text_area(key="text_b").set_value("The animal cross the street because it was too tired.")
    x = charts(ok(at.run()))["compare_diff"]["data"][0]["x"]
    assert second_the in x and not [n for n in x if n.startswith("the (") and n not in names]


def test_compare_two_models_with_different_shapes_and_no_common_tokens(tiny_model):
    folder = tiny_model("gpt2")
    text_b = "!!! ???"
    gpt2 = attnviz.load(f"hf:{folder}").trace(text_b)
    a = attnviz.trace("Dogs")
    assert not set(gpt2.tokens) & set(a.tokens)
    at = ok(open_page("pages/6_Compare.py", text="Dogs", model_b=f"hf:{folder}", text_b=text_b, layer="1", head="3"))
    assert any("6 layers × 12 heads, B 2 × 4" in c.value for c in at.caption)
    figs = charts(at)
    np.testing.assert_allclose(decode(figs["compare_b"]["data"][0]["z"]), gpt2.attentions[1, 3], atol=1e-7)
    assert "compare_diff" not in figs
    assert any("no token in common" in i.value for i in at.info)
    d = difference(a.attentions[1, 3], gpt2.attentions[1, 3], a.tokens, gpt2.tokens)
    assert d.diff.size == 0


def test_compare_says_what_is_wrong_with_model_b():
    at = open_page("pages/6_Compare.py", text=TEXT, model_b="builtin:nope")
    assert not at.exception
    assert at.error[0].value.startswith("B: Unknown model 'builtin:nope'")


def test_compare_reads_model_b_in_its_one_spelling():
    """B's model typed with spaces around it is A's model: one spelling (``frame.entered``), so the page says B is A
    rather than comparing a model with itself."""
    at = ok(open_page("pages/6_Compare.py", text=TEXT, text_b=TEXT, model_b="  builtin:minilm  "))
    assert any("B is the same as A" in i.value for i in at.info)
