"""The Corpus page in real Streamlit (AppTest): a run's grid and table equal the library's, top texts open."""

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnviz import corpus as cp
from attnviz.data import CORPUS
from helpers import chart_specs, decode


@pytest.fixture
def page(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    at = AppTest.from_file("../app.py", default_timeout=300)
    at.switch_page("pages/10_Corpus.py")
    return at.run()


def ok(at):
    assert not at.exception and not at.error, (at.exception, at.error)
    return at


def test_run_shows_the_library_numbers_and_opens_top_texts(page, tmp_path):
    at = ok(page)
    at.number_input(key="corpus_limit").set_value(20)
    at.selectbox(key="corpus_stat").set_value("entropy")
    at = ok(at.button(key="corpus_run").click().run())
    expected = cp.run("builtin:minilm", CORPUS, tmp_path / "lib.parquet", limit=20)
    table = at.dataframe[0].value
    assert len(table) == 72 and (table["n_texts"] == 20).all()
    np.testing.assert_allclose(table["entropy_mean"], expected.table()["entropy_mean"], atol=2e-5)
    np.testing.assert_allclose(table["stop_word_p90"], expected.table()["stop_word_p90"], atol=2e-5)
    (spec,) = [s for s in chart_specs(at) if s["data"][0]["type"] == "heatmap"]
    np.testing.assert_allclose(np.asarray(decode(spec["data"][0]["z"]), float), expected.grid("entropy"), atol=2e-5)
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download Parquet", "Download CSV"]

    # top texts of layer 2, head 4 by largest weight: the library's order; "Open" shows it on the Attention page
    at.selectbox(key="corpus_layer").set_value(2)
    at = ok(at.selectbox(key="corpus_head").set_value(4).run())
    v = expected.values["max"][:, 2, 4]
    best = int(np.argmax(v))
    texts = list(cp.Corpus(CORPUS))
    assert f"text {best} · " in at.markdown[[m.value.startswith("**") for m in at.markdown].index(True)].value
    at = ok(at.button(key="corpus_open_most_0").click().run())
    assert at.session_state["text"] == texts[best]
    assert (at.session_state["layer"], at.session_state["head"]) == (2, 4)


def test_bad_path_and_column_get_a_message(tmp_path, monkeypatch):
    folder = tmp_path / "allowed"
    folder.mkdir()
    (folder / "c.csv").write_text("body\n<b>x</b> hello\n")
    monkeypatch.setenv("ATTNVIZ_CORPUS_DIR", str(folder))
    monkeypatch.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    at = AppTest.from_file("../app.py", default_timeout=300)
    at.switch_page("pages/10_Corpus.py")
    at = at.run()
    at = at.radio(key="corpus_source").set_value("path").run()
    at = at.text_input(key="corpus_path").input("../../etc/passwd").run()
    assert "Only files under" in at.error[0].value
    at = at.text_input(key="corpus_path").input("c.csv").run()
    assert "no column 'text'; its columns: body" in at.error[0].value
    at = at.text_input(key="corpus_column").input("body").run()
    assert not at.error and not at.exception
