"""The home page: the shared frame and one head's heatmap, in real Streamlit."""

import numpy as np

import attnviz
from attnviz.core.tokens import labels
from helpers import chart_specs, decode, open_page


def test_home_heatmap_equals_trace_for_url_state():
    text = "Dogs chase cats. Cats chase mice."
    at = open_page(timeout=90, text=text, layer="2", head="5")
    assert not at.exception and not at.error
    spec = chart_specs(at)[0]
    t = attnviz.trace(text)
    heat = spec["data"][0]
    np.testing.assert_allclose(decode(heat["z"]), t.attentions[2, 5], atol=1e-6)
    assert heat["y"] == labels(t.tokens)
    assert at.text_area(key="text").value == text


def test_home_escapes_markup_in_labels():
    at = open_page(timeout=90, text='<a href="x">click</a> <b>bold</b>')
    spec = chart_specs(at)[0]
    ticks = spec["data"][0]["x"]
    assert any("&lt;" in s for s in ticks) and not any("<" in s for s in ticks)


def test_empty_text_gets_a_message_not_a_traceback():
    at = open_page(timeout=90)
    at.text_area(key="text").set_value("   ").run()
    assert not at.exception
    assert "empty" in at.error[0].value
    assert at.text_area(key="text").value == "   "


def test_a_page_switch_after_editing_the_text_logs_no_widget_warning(monkeypatch):
    """Widgets get their value one way: a default beside a value set through session state makes Streamlit
    log a warning with a stack trace on every page switch."""
    import logging

    from streamlit.elements.lib import policies

    monkeypatch.setattr(policies, "_shown_default_value_warning", False)  # it is logged once per process
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    policies._LOGGER.addHandler(handler)
    try:
        at = open_page(timeout=90)
        at.text_area(key="text").set_value("Owls hunt at night.").run()
        at.switch_page("pages/1_Attention.py").run()
        assert not at.exception and not at.error
        assert at.text_area(key="text").value == "Owls hunt at night."
        at.switch_page("pages/3_Norms.py").run()
        assert at.text_area(key="text").value == "Owls hunt at night."
    finally:
        policies._LOGGER.removeHandler(handler)
    assert not [m for m in seen if "default value" in m], seen


def test_home_has_the_attention_pages_display_options():
    text = "The cat sat on the unbelievably soft mat."
    view = dict(text=text, layer="2", head="5", hide_special="true", merge="true", threshold="0.05")
    home = open_page(timeout=90, **view)
    assert not home.exception and not home.error
    attention = open_page("pages/1_Attention.py", alone=True, timeout=90, run=False)
    for k, v in view.items():
        attention.query_params[k] = v
    attention.run()
    detail = [s for c, s in zip(attention.get("plotly_chart"), chart_specs(attention)) if "detail" in c.proto.id]
    heat, want = chart_specs(home)[0]["data"][0], detail[0]["data"][0]
    assert heat["x"] == want["x"] and "[CLS]" not in heat["x"] and "unbelievably" in heat["x"]
    np.testing.assert_array_equal(decode(heat["z"]), decode(want["z"]))
    assert heat["zmax"] == want["zmax"] < 1  # colours up to the head's own high quantile
    home.checkbox(key="full_range").check().run()
    assert chart_specs(home)[0]["data"][0]["zmax"] == 1
