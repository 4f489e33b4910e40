"""The attention page in real Streamlit (AppTest): figures equal the trace, options, overview clicks, other model kinds."""

import json
import re

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest

import attnviz
from attnviz.figures.common import safe
from attnviz.core.tokens import labels, merge_subwords, word_labels
from helpers import chart_specs, decode

TEXT = "The cat sat on the unbelievably soft mat."


def run(**params) -> AppTest:
    at = AppTest.from_file("../../pages/1_Attention.py", default_timeout=90)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception and not at.error, (at.exception, at.error)
    return at


def charts(at) -> dict:
    """Figures by their chart key's prefix: overview, detail, focus, focus_heads."""
    ids = [c.proto.id.rsplit("-", 1)[-1].rsplit("_", 1)[0] for c in at.get("plotly_chart")]
    return dict(zip(ids, chart_specs(at)))


def heat(spec) -> np.ndarray:
    return decode(spec["data"][0]["z"])


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace(TEXT)


def test_every_figure_carries_the_trace(trace):
    at = run(text=TEXT, layer="3", head="7", focus="cat")
    figs = charts(at)
    assert set(figs) == {"overview", "detail", "focus", "focus_heads", "links"}
    names = labels(trace.tokens)
    detail = figs["detail"]
    np.testing.assert_allclose(heat(detail), trace.attentions[3, 7], atol=1e-7)
    assert detail["data"][0]["x"] == detail["data"][0]["y"] == names
    assert detail["layout"]["title"]["text"] == "layer 3, head 7"
    cat = names.index("cat")
    np.testing.assert_allclose(decode(figs["focus"]["data"][0]["y"]), trace.attentions[3, 7, cat], atol=1e-7)
    np.testing.assert_allclose(heat(figs["focus_heads"]), trace.attentions[3, :, cat], atol=1e-7)
    points = figs["overview"]["data"][1]
    assert decode(points["customdata"]).tolist() == [[layer, head] for layer in range(6) for head in range(12)]
    # The focus text: one span per token, shaded by the weights of "cat" in layer 3, head 7.
    (page,) = [h.proto.body for h in at.get("html")]
    titles = [float(x) for x in re.findall(r'title="([\d.]+)', page)]
    np.testing.assert_allclose(titles, trace.attentions[3, 7, cat], atol=5e-5)


def test_the_mean_of_a_layer_and_what_attends_to_a_token(trace):
    at = run(text=TEXT, layer="1", head="mean", direction="attended by", focus="sat")
    figs = charts(at)
    mean = trace.attentions[1].mean(0)
    np.testing.assert_allclose(heat(figs["detail"]), mean, atol=1e-7)
    assert figs["detail"]["layout"]["title"]["text"] == "layer 1, mean of 12 heads"
    sat = labels(trace.tokens).index("sat")
    np.testing.assert_allclose(decode(figs["focus"]["data"][0]["y"]), mean[:, sat], atol=1e-7)
    np.testing.assert_allclose(heat(figs["focus_heads"]), trace.attentions[1, :, :, sat], atol=1e-7)


def test_selecting_a_head_in_the_overview_opens_it(trace):
    at = run(text=TEXT)
    overview = at.get("plotly_chart")[0]
    # AppTest cannot click plotly, so send the selection the browser would send for the head at layer 4,
    # head 9: the frontend's payload for a clicked point, through the chart's own on_select callback.
    point = {"curve_number": 1, "point_number": 57, "point_index": 57, "x": 9 * 16 + 7, "y": 4 * 16 + 7}
    state = at._tree.get_widget_states()
    state.widgets.append(WidgetState(id=overview.proto.id, string_value=json.dumps(
        {"selection": {"points": [point], "point_indices": [57], "box": [], "lasso": []}})))
    at._run(state)
    assert not at.exception
    assert (at.session_state["layer"], at.session_state["head"]) == (4, 9)
    assert (at.query_params["layer"], at.query_params["head"]) == ("4", "9")  # the link follows
    figs = charts(at)
    assert figs["detail"]["layout"]["title"]["text"] == "layer 4, head 9"
    np.testing.assert_allclose(heat(figs["detail"]), trace.attentions[4, 9], atol=1e-7)
    (rect,) = figs["overview"]["layout"]["shapes"]
    x, y = decode(figs["overview"]["data"][1]["x"])[57], decode(figs["overview"]["data"][1]["y"])[57]
    assert rect["x0"] < x < rect["x1"] and rect["y0"] < y < rect["y1"]


def test_options_change_the_data_as_they_say(trace):
    at = run(text=TEXT, layer="2", head="3")
    a = trace.attentions[2, 3]
    keep = ~trace.special

    at.checkbox(key="hide_special").check().run()
    detail = charts(at)["detail"]
    kept = a[keep][:, keep]
    np.testing.assert_allclose(heat(detail), kept / kept.sum(-1, keepdims=True), atol=1e-6)
    assert detail["data"][0]["x"] == labels(np.array(trace.tokens)[keep])

    at.checkbox(key="renorm").uncheck().run()
    np.testing.assert_allclose(heat(charts(at)["detail"]), kept, atol=1e-7)

    at.checkbox(key="hide_special").uncheck().run()
    at.checkbox(key="merge").check().run()
    detail = charts(at)["detail"]
    merged = merge_subwords(a, trace.word_ids)
    assert "unbelievably" in detail["data"][0]["x"]
    assert detail["data"][0]["x"] == word_labels(trace.tokens, trace.word_ids)
    np.testing.assert_allclose(heat(detail), merged, atol=1e-6)
    np.testing.assert_allclose(heat(detail).sum(-1), 1, atol=1e-5)

    at.slider(key="threshold").set_value(0.1).run()
    np.testing.assert_allclose(heat(charts(at)["detail"]), np.where(merged < 0.1, 0, merged), atol=1e-6)

    at.checkbox(key="log_scale").check().run()
    data = charts(at)["detail"]["data"][0]
    shown = np.where(merged < 0.1, 0, merged)
    np.testing.assert_allclose(decode(data["customdata"]), shown, atol=1e-6)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(heat(charts(at)["detail"]), np.clip((np.log10(shown) + 4) / 4, 0, 1), atol=1e-6)
    assert data["colorbar"]["ticktext"] == ["0.0001", "0.001", "0.01", "0.1", "1"]
    # every option is bound to the link, so a link reproduces the view
    linked = run(text=TEXT, layer="2", head="3", merge="true", threshold="0.1", log_scale="true")
    assert charts(linked)["detail"] == charts(at)["detail"]


def test_user_text_is_escaped_everywhere():
    at = run(text='<b>bold</b> <a href="x">link</a>', focus="b")
    figs = charts(at)
    ticks = figs["detail"]["data"][0]["x"] + figs["focus"]["data"][0]["x"]
    assert any("&lt;" in t for t in ticks) and not any("<" in t for t in ticks)
    assert "<" not in figs["focus"]["layout"]["title"]["text"].replace("<br />", "")  # our own line breaks only
    (page,) = [h.proto.body for h in at.get("html")]
    assert "<b>" not in page and "<a " not in page and "&lt;" in page


def test_a_causal_model_shows_its_masked_triangle(tiny_model):
    folder = str(tiny_model("gpt2"))
    text = "the cat sat on the mat"
    trace = attnviz.load(folder).trace(text)
    at = run(text=text, model=folder, layer="1", head="2")
    detail = charts(at)["detail"]
    np.testing.assert_allclose(heat(detail), trace.attentions[1, 2], atol=1e-7)
    (mask,) = detail["layout"]["shapes"]
    assert mask["type"] == "path" and mask["fillcolor"] == "#d9d9d9"
    assert "masked" in detail["layout"]["annotations"][0]["text"]
    assert np.allclose(np.triu(trace.attentions[1, 2], 1), 0)


def test_an_encoder_decoder_model_gets_three_tabs_with_the_right_axes(tiny_model):
    folder = str(tiny_model("bart"))
    trace = attnviz.load(folder).trace(TEXT)
    src, tgt = safe(labels(trace.encoder.tokens)), safe(labels(trace.decoder.tokens))
    at = run(text=TEXT, model=folder, stack="Cross", layer="1", head="0")
    assert [t.label for t in at.tabs] == ["Encoder", "Decoder", "Cross"]
    detail = charts(at)["detail"]["data"][0]
    assert detail["y"] == tgt and detail["x"] == src  # queries: target tokens; keys: source tokens
    np.testing.assert_allclose(decode(detail["z"]), trace.cross_attentions[1, 0], atol=1e-7)
    decoder = run(text=TEXT, model=folder, stack="Decoder", layer="0", head="3")
    figs = charts(decoder)
    assert figs["detail"]["data"][0]["x"] == tgt
    np.testing.assert_allclose(heat(figs["detail"]), trace.decoder.attentions[0, 3], atol=1e-7)
    assert figs["detail"]["layout"]["shapes"][0]["type"] == "path"  # the decoder is causal


def test_which_heads_link_two_tokens_and_a_click_opens_one():
    text = "The animal didn't cross the street because it was too tired."
    trace = attnviz.trace(text)
    names = labels(trace.tokens)
    at = run(text=text, link_query="it", link_key="animal")
    figs = charts(at)
    heat, points = figs["links"]["data"]
    it, animal = names.index("it"), names.index("animal")
    np.testing.assert_allclose(decode(heat["z"]), trace.attentions[:, :, it, animal], atol=1e-9)
    assert "“it” attends to “animal”" in figs["links"]["layout"]["title"]["text"]
    # A click on layer 3, head 7 of that grid opens the head, as the overview does.
    (chart,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith("links_self")]
    point = {"curve_number": 1, "point_number": 43, "point_index": 43, "x": 7, "y": 3}
    state = at._tree.get_widget_states()
    state.widgets.append(WidgetState(id=chart.proto.id, string_value=json.dumps(
        {"selection": {"points": [point], "point_indices": [43], "box": [], "lasso": []}})))
    at._run(state)
    assert not at.exception
    assert (at.session_state["layer"], at.session_state["head"]) == (3, 7)
    assert charts(at)["detail"]["layout"]["title"]["text"] == "layer 3, head 7"
    assert (at.query_params["link_query"], at.query_params["link_key"]) == ("it", "animal")  # the link keeps them


def test_the_cell_by_cell_view_never_reads_every_weight_at_once(monkeypatch):
    """Up to CELLS tokens the page draws every cell, yet reads one layer and the overview's tiles layer by layer:
    with ATTNVIZ_MAX_DENSE_MB=1 (under the 17 MB of MiniLM's heads at ~240 tokens) every figure still equals the
    model's own weights."""
    from attnviz.figures.overview import head_grid
    from attnviz.ui.display import CELLS
    from test_figures_attention import png_pixels

    text = "The cat sat on the mat. " * 34 + "Finally the dog barked."
    trace = attnviz.trace(text)
    ref = trace.attentions  # the reference, every weight read before the limit is set (the page's trace is its own)
    assert 200 < trace.n_tokens <= CELLS
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "1")
    at = run(text=text, layer="4", head="2", focus="dog", link_query="barked", link_key="dog")
    figs = charts(at)
    names = labels(trace.tokens)
    np.testing.assert_allclose(heat(figs["detail"]), ref[4, 2], atol=1e-7)
    dog, barked = names.index("dog"), names.index("barked")
    np.testing.assert_allclose(heat(figs["focus_heads"]), ref[4, :, dog], atol=1e-7)
    np.testing.assert_allclose(decode(figs["links"]["data"][0]["z"]), ref[:, :, barked, dog], atol=1e-7)
    want = head_grid(ref, None, (4, 2))
    assert figs["overview"]["data"][0]["source"] == want.data[0].source  # the same image, pixel for pixel
    T = trace.n_tokens
    side = -(-T // -(-T // 64))  # pixels a tile: blocks of ceil(T / 64) tokens, the one block rule (core.weights)
    assert side == 62 and png_pixels(want).shape[:2] == (6 * (side + 1) - 1, 12 * (side + 1) - 1)
