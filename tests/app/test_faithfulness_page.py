"""The Faithfulness page in real Streamlit (AppTest): its table, curves and CSV equal the library's explanation."""

import numpy as np
import pandas as pd
import pytest
from streamlit.runtime.memory_media_file_storage import _calculate_file_id
from streamlit.testing.v1 import AppTest

import attnviz
from attnviz.analysis.faithfulness import agreement, explain, forwards
from attnviz.analysis.interventions import ZeroValue, editing
from helpers import chart_specs, decode

TEXT = "The film was not good today"


def run(**params) -> AppTest:
    at = AppTest.from_file("../../app.py", default_timeout=120)
    at.switch_page("pages/12_Faithfulness.py")
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def ok(at) -> AppTest:
    assert not at.exception and not at.error, (at.exception, at.error)
    return at


@pytest.fixture(scope="module")
def explained():
    return explain(attnviz.load("builtin:classifier"), TEXT, zero_value=lambda j: editing([ZeroValue(j)]))


def test_the_page_shows_the_librarys_explanation(explained):
    at = ok(run(model="builtin:classifier", text=TEXT))
    assert not at.dataframe and at.button(key="faith_run").label.startswith(f"Explain the prediction ({forwards(6):,}")
    ok(at.button(key="faith_run").click().run())
    (shown,) = [d.value for d in at.dataframe]
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), agreement(explained), atol=1e-6)
    (curves,) = chart_specs(at)
    assert [t["name"] for t in curves["data"]] == list(explained)
    for line in curves["data"]:
        np.testing.assert_allclose(decode(line["y"]), explained.curves[line["name"]], atol=1e-6)
    assert curves["layout"]["yaxis"]["title"]["text"] == "probability of negative"
    (rows,) = [h.proto.body for h in at.get("html")]
    assert rows.count("<tr>") == len(explained) and ">not</span>" in rows
    # The download's URL names the hash of its bytes: it serves exactly the library's table as CSV.
    csv_id = _calculate_file_id(explained.table().to_csv(index=False).encode(), "text/csv",
                                "faithfulness-builtin-classifier.csv")
    assert at.get("download_button")[0].proto.url.endswith(f"{csv_id}.csv")


def test_user_text_is_escaped_and_a_long_text_is_refused_in_plain_words(monkeypatch):
    at = ok(run(model="builtin:minilm", text='<b>not</b> good <a href="x">film</a>'))
    ok(at.button(key="faith_run").click().run())
    (rows,) = [h.proto.body for h in at.get("html")]
    assert "&lt;" in rows and "<b>" not in rows and "<a " not in rows
    monkeypatch.setenv("ATTNVIZ_MAX_FORWARDS", "60")
    at = ok(run(model="builtin:classifier", text=TEXT))
    assert f"takes {forwards(6, 64):,} forward passes" in at.warning[0].value and "ATTNVIZ_MAX_FORWARDS" in at.warning[0].value
    assert not at.button
