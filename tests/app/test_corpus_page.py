"""The Corpus page in real Streamlit (AppTest): a run's grid and table equal the library's, top texts open."""

import json

import numpy as np
import pandas as pd
import pytest

from attnviz import corpus as cp
from attnviz.data import CORPUS
from helpers import chart_specs, decode, ok, open_page


@pytest.fixture
def page(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    return open_page("pages/10_Corpus.py", timeout=300)


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
    at = open_page("pages/10_Corpus.py", timeout=300)
    at = at.radio(key="corpus_source").set_value("path").run()
    at = at.text_input(key="corpus_path").input("../../etc/passwd").run()
    assert "Only files under" in at.error[0].value
    at = at.text_input(key="corpus_path").input("c.csv").run()
    assert "no column 'text'; its columns: body" in at.error[0].value
    at = at.text_input(key="corpus_column").input("body").run()
    assert not at.error and not at.exception


def walk(node):
    """The page's elements in the order they are drawn."""
    children = getattr(node, "children", None)
    if children is None:
        yield node
        return
    for k in sorted(children):
        yield from walk(children[k])


def test_run_stays_above_old_results_headers_are_readable_and_a_damaged_shard_is_recomputed(page, tmp_path):
    at = ok(page)
    at.number_input(key="corpus_limit").set_value(20)
    at = ok(at.button(key="corpus_run").click().run())
    drawn = [getattr(n, "key", None) or getattr(n, "type", "") for n in walk(at.main)]
    grid = next(i for i, k in enumerate(drawn) if str(k).startswith("corpus_grid"))
    table = drawn.index("dataframe")
    assert drawn.index("corpus_run") < grid < table  # Run stays above the results, however many there are

    config = json.loads(at.dataframe[0].proto.columns)
    labels = {k: v.get("label") for k, v in config.items()}
    assert labels["entropy_mean"] == "mean · entropy (nats)"
    assert labels["stop_word_p90"] == "p90 · share on stop words (the, of, and, …)"
    assert labels["n_texts"] == "texts"
    # a header cut at its column's width still names its statistic: each starts with it (mean, p10 … p90)
    stats = {k: v for k, v in labels.items() if v and k != "n_texts"}
    assert len(stats) > 20 and all(v.startswith(k.rpartition("_")[2] + " · ") for k, v in stats.items()), stats

    # cut a finished shard to half: Run says which shard it computes again, and the table is unchanged
    before = at.dataframe[0].value
    (folder,) = (tmp_path / "work").glob("*.shards")
    (shard,) = folder.glob("shard-*.npz")
    shard.write_bytes(shard.read_bytes()[:100])
    at = ok(at.run())  # the page opens with the damaged shard: no traceback, no old results
    assert not at.dataframe
    at = ok(at.button(key="corpus_run").click().run())
    assert [i.value for i in at.info] == ["shard 0 (texts 0–19) is cut short (100 of "
                                          f"{len(shard.read_bytes()):,} bytes): computing it again"]
    pd.testing.assert_frame_equal(at.dataframe[0].value, before)
