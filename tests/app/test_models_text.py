"""Models fed text they cannot read, and models with an output of their own (AppTest, real models)."""

from streamlit.testing.v1 import AppTest

import attnviz
from attnviz.data.samples import DATES, GENERAL, REVIEWS
from helpers import ok, open_page

DEFAULT = GENERAL["Coreference"]


def run(page: str = "app.py", **params) -> AppTest:
    return ok(open_page(page, alone=True, timeout=90, **params))


def test_a_model_that_cannot_read_the_text_says_so_and_offers_its_samples():
    at = run(model="builtin:classifier", text=DEFAULT)
    (note,) = [w for w in at.warning if "unknown to this model" in w.value]
    trace = attnviz.load("builtin:classifier").trace(DEFAULT)
    unknown = sum(t == "[UNK]" for t in trace.tokens)
    assert unknown > len(trace.tokens) / 5 and note.value.startswith(f"{unknown} of {len(trace.tokens)} tokens")
    assert at.selectbox(key="sample").options == list(REVIEWS)  # the sidebar offers the model's own texts
    at.button(key="unknown_sample_Praise").click().run()
    assert at.text_area(key="text").value == REVIEWS["Praise"]
    assert not [w for w in at.warning if "unknown to this model" in w.value]
    # The classifier's prediction: its class probabilities for this text.
    probs = attnviz.load("builtin:classifier").predict(REVIEWS["Praise"])
    (table,) = [d.value for d in at.dataframe]
    assert list(table["class"]) == list(probs) and list(table["probability"]) == list(probs.values())
    assert any(m.value.startswith("**Prediction: positive**") for m in at.markdown)


def test_minilm_reads_the_default_text_without_a_note():
    at = run(text=DEFAULT)
    assert not [w for w in at.warning if "unknown" in w.value]
    assert at.selectbox(key="sample").options == list(GENERAL)
    assert not at.get("arrow_data_frame") and not [m for m in at.markdown if "Prediction" in m.value]


def test_the_translator_shows_its_translation_on_attention_and_home():
    text = DATES["Autumn"]
    want = attnviz.load("builtin:translator").translate(text)
    assert want == "1986-10-12"
    for page in ("pages/1_Attention.py", "app.py"):
        at = run(page, model="builtin:translator", text=text)
        assert [c.value for c in at.code if c.value == want], page
        assert not [w for w in at.warning if "unknown" in w.value]
    at = run("pages/1_Attention.py", model="builtin:translator", text=DEFAULT)
    assert [w for w in at.warning if "unknown to this model" in w.value]
    at.button(key="unknown_sample_No weekday").click().run()
    assert at.text_area(key="text").value == DATES["No weekday"]
    assert [c.value for c in at.code if c.value == "2030-01-03"]
