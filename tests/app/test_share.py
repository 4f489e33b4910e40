"""Links in real Streamlit (AppTest): URL state sets the view; bad links fall back with a note; operator lock."""

import json
from urllib.parse import parse_qs

import numpy as np
import pytest

import attnviz
from attnviz.settings import DEFAULT_MAX_CHARS
from helpers import chart_specs, decode, open_page

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired."


def _state(at):
    return (at.selectbox(key="model").value, at.text_area(key="text").value,
            at.selectbox(key="layer").value, at.selectbox(key="head").value)


def _link(at) -> dict:
    """The query of the copy-link box, parsed."""
    (code,) = at.code
    return {k: v[0] for k, v in parse_qs(code.value.split("?", 1)[1]).items()}


def test_link_sets_model_text_layer_and_head():
    text = "Bees make honey; honey feeds bees."
    at = open_page(timeout=90, model="builtin:seed", text=text, layer="3", head="7")
    assert not at.exception and not at.error and not at.warning
    assert _state(at) == ("builtin:seed", text, 3, 7)
    heat = chart_specs(at)[0]["data"][0]
    np.testing.assert_allclose(decode(heat["z"]), attnviz.trace(text, "builtin:seed").attentions[3, 7], atol=1e-6)
    assert _link(at) == {"model": "builtin:seed", "text": text, "layer": "3", "head": "7"}
    config = json.loads(at.get("plotly_chart")[0].proto.config)
    assert config["toImageButtonOptions"] == {"format": "png", "filename": "attnviz_builtin-seed_L3_H7", "scale": 2}
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["This head (CSV)", "Head statistics (CSV)", "Whole trace (.npz)", "Figure (HTML)"]
    at.radio(key="share_image_format").set_value("SVG").run()
    assert json.loads(at.get("plotly_chart")[0].proto.config)["toImageButtonOptions"]["format"] == "svg"


LONG = "word " * 40_000  # 200,000 characters
GARBAGE = [
    (dict(model="nonsense"), ("builtin:minilm", DEFAULT_TEXT, 0, 0),
     ["The link's model nonsense could not be opened: ` Unknown model 'nonsense'."]),
    (dict(model="hf:/no/such/folder", layer="2"), ("builtin:minilm", DEFAULT_TEXT, 2, 0),
     ["The link's model ` hf:/no/such/folder ` could not be opened"]),
    (dict(layer="99", head="-1"), ("builtin:minilm", DEFAULT_TEXT, 0, 0),
     ["Layer 99 in the link is out of range for builtin:minilm (0–5); showing layer 0.",
      "Head -1 in the link is out of range for builtin:minilm (0–11); showing head 0."]),
    (dict(layer="1.5", head="[1](https://e.test)"), ("builtin:minilm", DEFAULT_TEXT, 0, 0),
     ["Layer 1.5 in the link is not a whole number",  # a crafted value shows as code, not as a link:
      "Head ` [1](https://e.test) ` in the link is not a whole number"]),
    (dict(layer=["1", "4"], head=["2", "2"]), ("builtin:minilm", DEFAULT_TEXT, 4, 2),
     ["The link gives layer 2 times (1, 4); using the last one.", "gives head 2 times (2, 2)"]),
    (dict(text=LONG), ("builtin:minilm", LONG[:DEFAULT_MAX_CHARS], 0, 0),
     ["text has 200,000 characters; this app takes at most 20,000"]),
]


@pytest.mark.parametrize("params, state, notes", GARBAGE, ids=["model", "hf-folder", "range", "nan", "repeat", "long"])
def test_garbage_link_falls_back_with_a_note(params, state, notes):
    at = open_page(timeout=90, **params)
    assert not at.exception and not at.error
    assert _state(at) == state
    warnings = " | ".join(w.value for w in at.warning)
    assert all(n in warnings for n in notes), warnings
    assert len(at.warning) == len(notes)
    assert _link(at)["model"] == state[0] and int(_link(at)["layer"]) == state[2]
    at.run()  # the next run is the user's: the notes about the link are gone
    assert not at.warning and _state(at) == state


def test_operator_allowlist_locks_the_picker(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MODELS", "builtin:seed")
    at = open_page(timeout=90, model="builtin:minilm")
    assert not at.exception and not at.error
    picker = at.selectbox(key="model")
    assert picker.options == ["builtin:seed"] and picker.value == "builtin:seed"
    assert not picker.proto.accept_new_options
    assert [w.value for w in at.warning] == ["The link's model ` builtin:minilm ` is not offered here; showing builtin:seed."]


def test_operator_settings_from_secrets():
    at = open_page(timeout=90, secrets={"attnviz": {"models": ["builtin:seed", "builtin:minilm"], "max_chars": 30}}, text="x" * 50)
    assert at.selectbox(key="model").options == ["builtin:seed", "builtin:minilm"]
    assert at.text_area(key="text").value == "x" * 30
    assert "text has 50 characters; this app takes at most 30" in at.warning[0].value


def test_attention_page_detail_has_the_share_box():
    at = open_page("pages/1_Attention.py", alone=True, timeout=90, model="builtin:seed", text="Owls hunt at night.",
                   layer="2", head="4")
    assert not at.exception and not at.error
    names = [json.loads(c.proto.config).get("toImageButtonOptions", {}).get("filename") for c in at.get("plotly_chart")]
    assert "attnviz_builtin-seed_L2_H4" in names
    assert [b.proto.label for b in at.get("download_button")] == [
        "This head (CSV)", "Head statistics (CSV)", "Whole trace (.npz)", "Figure (HTML)"]
    assert _link(at)["layer"] == "2" and _link(at)["head"] == "4"


WORDS_400 = " ".join(["river", "stone", "cloud", "light", "paper"] * 80)
NON_FINITE = [  # every numeric link parameter, each page once, inf / -inf / 1e309 (which Python reads as inf)
    ("pages/1_Attention.py", "builtin:seed", WORDS_400, dict(zoom_start="inf", zoom_size="-inf", token="1e309")),
    ("pages/8_Generate.py", "builtin:lm", "Once upon a time", dict(gen_new="inf", gen_temp="-inf", gen_top_k="1e309",
                                                                   gen_seed="inf")),
    ("pages/3_Norms.py", "builtin:seed", WORDS_400, dict(norm_from="-inf")),
    ("pages/2_Positional.py", "builtin:seed", WORDS_400, dict(model_from="1e309")),
    ("pages/6_Compare.py", "builtin:seed", WORDS_400, dict(compare_from="inf")),
]


@pytest.mark.parametrize("page, model, text, numbers", NON_FINITE, ids=lambda v: v if isinstance(v, str) else None)
def test_a_non_finite_number_in_a_link_falls_back_with_a_note(page, model, text, numbers):
    at = open_page(page, timeout=300, model=model, text=text, **numbers)
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    warnings = [w.value for w in at.warning]
    for key, raw in numbers.items():
        widget = at.number_input(key=key)
        assert widget.value is not None and abs(widget.value) < 2**31, (key, widget.value)
        assert any(raw in w and "in the link is not a" in w for w in warnings), (key, warnings)
        assert at.query_params.get(key) != [raw]  # the address no longer carries it
