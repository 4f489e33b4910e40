"""A page that needs another kind of model offers it in one click (AppTest): a causal LM on Generate, Interventions
and Faithfulness (the real decoder when installed), and a model that takes a long document whole; the picker
describes each model in a line."""

import pytest
from helpers import ok, open_page

from attnviz.backends import causal_model, describe
from attnviz.backends.packaged import PACKAGED, SMOLLM2
from attnviz.data.samples import GENERAL

CAUSAL = causal_model()


def offers(at) -> list:
    """The page's one-click model switches: to a causal model (switch_to_…) or one that reads the text whole."""
    return [b for b in at.button if b.key.startswith(("switch_to_", "whole_to_"))]


def switch(at, key: str):
    (button,) = [b for b in offers(at) if b.key.endswith(f"_to_{key}")]
    return button


def test_the_picker_describes_each_model_and_seed_says_its_weights_are_random():
    at = ok(open_page("app.py", model="builtin:seed"))
    picker = at.selectbox(key="model")
    for key in picker.options:
        assert f"`{key}`: {describe(key)}" in picker.help
    lines = [m.value for m in at.sidebar.markdown]
    assert f":gray[{describe('builtin:seed')}]" in lines
    assert "random weights (for structure, not meaning)" in describe("builtin:seed")


def test_the_real_decoder_is_offered_and_is_the_causal_model_a_page_offers():
    assert (SMOLLM2 in PACKAGED) == (CAUSAL == SMOLLM2)
    if SMOLLM2 in PACKAGED:
        assert SMOLLM2 in open_page("app.py").selectbox(key="model").options


def test_generate_on_an_encoder_switches_to_a_causal_lm_in_one_click():
    at = ok(open_page("pages/8_Generate.py"))  # the default model, an encoder
    assert any("not a causal language model" in i.value for i in at.info)
    button = switch(at, CAUSAL)
    assert button.label.startswith(f"Switch to {CAUSAL}: ") and describe(CAUSAL) in button.label
    button.click().run(timeout=600)  # smollm2's first load dequantises (later ones read the cache)
    ok(at)
    assert at.selectbox(key="model").value == CAUSAL and at.query_params["model"] == CAUSAL  # the link keeps the switch
    assert not any("not a causal language model" in i.value for i in at.info)
    assert at.text_area(key="text").value == GENERAL["Coreference"] or CAUSAL == "builtin:lm"
    assert at.get("plotly_chart")  # the generation's figures


@pytest.mark.parametrize("page", ["pages/11_Interventions.py", "pages/12_Faithfulness.py"])
def test_interventions_and_faithfulness_on_an_encoder_offer_a_causal_lm(page):
    at = ok(open_page(page))
    assert any("predicts nothing of its own" in i.value for i in at.info)
    assert switch(at, CAUSAL).label.startswith(f"Switch to {CAUSAL}")
    at = ok(open_page(page, model=CAUSAL if CAUSAL != SMOLLM2 else "builtin:lm"))  # a causal LM: nothing offered
    assert not offers(at)


def test_a_document_longer_than_the_model_takes_offers_one_that_takes_it_whole():
    words = (GENERAL["Coreference"] + " ") * 60  # ~1,000 tokens: MiniLM reads 512
    at = ok(open_page("pages/1_Attention.py", text=words))
    n = len(__import__("attnviz").load(SMOLLM2 if SMOLLM2 in PACKAGED else "builtin:seed").tokenizer(words)["input_ids"])
    target = SMOLLM2 if SMOLLM2 in PACKAGED else "builtin:seed"
    button = switch(at, target)
    assert button.label.startswith("Read all ") and describe(target) in button.label
    button.click().run(timeout=600)
    ok(at)
    assert at.selectbox(key="model").value == target
    assert "cut to fit" not in at.caption[0].value and f"{n:,}" in " ".join(c.value for c in at.caption)
    assert not offers(at)


def test_a_document_no_trained_model_takes_is_offered_builtin_seed():
    at = ok(open_page("pages/1_Attention.py", text="a " * 9000))  # 9,002 tokens: more than the real decoder's 8,192
    button = switch(at, "builtin:seed")
    assert "random weights (for structure, not meaning)" in button.label
    assert not [b for b in offers(at) if b.key.endswith(f"_to_{SMOLLM2}")]
