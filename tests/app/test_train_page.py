"""The Train page in real Streamlit (AppTest): a tiny run draws its curves, probes the model, and makes it
selectable on every page of the session; the language model's run draws its induction curves."""

import numpy as np
import pytest

from attnviz.figures.common import safe
from attnviz.training.lm import LMConfig, train_lm
from attnviz.training.tasks import TASKS
from attnviz.core.tokens import labels
from helpers import chart_specs, decode, open_page


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tiny_run_shows_losses_probe_and_registers_the_model():
    # the app, so the model can visit another page; a light model for the shared frame's own trace
    at = open_page("pages/5_Train.py", model="builtin:classifier")
    assert not at.exception and not at.error, (at.exception, at.error)
    assert "session:translator" not in at.selectbox(key="model").options

    at.radio(key="train_task").set_value("translator")
    at.select_slider(key="train_size").set_value("tiny")
    at.number_input(key="train_steps").set_value(20)
    at.button(key="train_go").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)

    specs = chart_specs(at)
    loss, _, held_out = next(s["data"] for s in specs if s["data"][0].get("name") == "loss")
    assert decode(loss["x"]).tolist() == list(range(1, 21))  # 20 steps, every one logged
    losses = decode(loss["y"])
    assert np.isfinite(losses).all() and (losses > 0).all() and losses[-1] < losses[0]
    assert decode(held_out["x"]).tolist() == list(range(2, 21, 2))
    assert ((decode(held_out["y"]) >= 0) & (decode(held_out["y"]) <= 1)).all()

    assert "session:translator" in at.selectbox(key="model").options
    model = at.session_state["session_models"]["session:translator"]
    assert model.n_layers == 1 and model.n_heads == 2
    probe = model.trace(TASKS["translator"].preview)
    heat = next(s["data"][0] for s in specs if s["data"][0]["type"] == "heatmap")
    np.testing.assert_allclose(decode(heat["z"]), probe.cross_attentions[-1].mean(0), atol=1e-6)
    assert any(model.translate(TASKS["translator"].preview) in m.value for m in at.markdown)

    at.button(key="train_use").click().run()
    assert at.selectbox(key="model").value == "session:translator"
    at.switch_page("pages/1_Attention.py").run()
    at.selectbox(key="model").set_value("session:translator").run()  # AppTest forgets the pick across pages
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.title[0].value == "Attention"
    assert any("session:translator" in c.value and "encoder-decoder" in c.value for c in at.caption)


def test_classifier_run_shows_the_probe_prediction_and_attention():
    at = open_page("pages/5_Train.py", alone=True, model="builtin:classifier")
    at.select_slider(key="train_size").set_value("tiny")
    at.number_input(key="train_steps").set_value(10)
    at.text_input(key="train_probe_classifier").set_value("The <b>old</b> hotel was never dull")
    at.button(key="train_go").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)

    model = at.session_state["session_models"]["session:classifier"]
    text = "The <b>old</b> hotel was never dull"
    table = at.dataframe[0].value
    np.testing.assert_allclose(table["probability"], list(model.predict(text).values()), atol=1e-6)
    assert table["label"].tolist() == ["negative", "positive"]
    trace = model.trace(text)
    heat = next(s["data"][0] for s in chart_specs(at) if s["data"][0]["type"] == "heatmap")
    np.testing.assert_allclose(decode(heat["z"]), trace.attentions[-1].mean(0), atol=1e-6)
    assert heat["x"] == safe(labels(trace.tokens)) and "[UNK] (1)" in heat["x"]  # "<" is not in the vocabulary


def test_language_model_run_draws_its_curves_and_the_model_generates():
    """The language model task: a short run draws the loss and the probe's induction and previous-token curves
    (equal to the same run in-process), counts against the session's steps, then the model generates on the
    Generate page."""
    at = open_page("pages/5_Train.py", timeout=180, model="builtin:classifier")  # a light model for the frame's trace
    assert not at.exception and not at.error, (at.exception, at.error)
    at.radio(key="train_task").set_value("lm").run()
    at.select_slider(key="train_lm_size").set_value("small")
    at.number_input(key="train_steps").set_value(20)
    at.button(key="train_go").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)

    want = train_lm(LMConfig(steps=20, eval_every=1, log_every=1, d_model=32, n_heads=2, n_layers=2, d_ff=64))
    loss, induction, previous = chart_specs(at)[-1]["data"]
    assert decode(loss["x"]).tolist() == list(range(1, 21))
    np.testing.assert_allclose(decode(loss["y"]), [h["loss"] for h in want.history], rtol=1e-5)
    np.testing.assert_allclose(decode(induction["y"]), [h["induction"] for h in want.history], atol=1e-6)
    np.testing.assert_allclose(decode(previous["y"]), [h["previous"] for h in want.history], atol=1e-6)
    assert "session:lm" in at.selectbox(key="model").options
    assert at.session_state["train_steps_used"] == 20  # the same per-session budget as the other tasks
    assert any("Generate" in m.value and "anna saw the red" in m.value for m in at.markdown)

    at.button(key="train_use").click().run()
    assert at.selectbox(key="model").value == "session:lm"
    at.switch_page("pages/8_Generate.py").run()
    at.selectbox(key="model").set_value("session:lm").run()  # AppTest forgets the pick across pages
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.get("plotly_chart"), "the Generate page draws the session's language model"
