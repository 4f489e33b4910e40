"""The Train LM page in real Streamlit (AppTest): a short run draws the loss and the probe's induction and
previous-token curves (equal to the same run in-process), then the model generates on the Generate page."""

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz.lm import LMConfig, train_lm
from helpers import chart_specs, decode

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_short_run_draws_its_curves_and_the_model_generates():
    at = AppTest.from_file("../app.py", default_timeout=180)
    at.switch_page("pages/11_Train_LM.py")
    at.query_params["model"] = "builtin:classifier"  # a light model for the shared frame's own trace
    at.run()
    assert not at.exception and not at.error, (at.exception, at.error)
    at.select_slider(key="lm_size").set_value("small")
    at.number_input(key="lm_steps").set_value(20)
    at.button(key="lm_go").click().run()
    assert not at.exception and not at.error, (at.exception, at.error)

    want = train_lm(LMConfig(steps=20, eval_every=1, log_every=1, d_model=32, n_heads=2, n_layers=2, d_ff=64))
    loss, induction, previous = chart_specs(at)[-1]["data"]
    assert decode(loss["x"]).tolist() == list(range(1, 21))
    np.testing.assert_allclose(decode(loss["y"]), [h["loss"] for h in want.history], rtol=1e-5)
    np.testing.assert_allclose(decode(induction["y"]), [h["induction"] for h in want.history], atol=1e-6)
    np.testing.assert_allclose(decode(previous["y"]), [h["previous"] for h in want.history], atol=1e-6)
    assert "session:lm" in at.selectbox(key="model").options

    at.button(key="lm_use").click().run()
    at.switch_page("pages/8_Generate.py").run()
    at.selectbox(key="model").set_value("session:lm").run()  # AppTest forgets the pick across pages
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.get("plotly_chart"), "the Generate page draws the session's language model"
