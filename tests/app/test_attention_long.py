"""The Attention page past 256 tokens in real Streamlit (AppTest), at 8,192 tokens of builtin:seed: the overview,
the block map and a zoomed window carry the trace's own exact weights, a token's reach finds a rare word and shows
its row and column, a link reopens the same window (an old /Long_text link too), and the page stays under 2 MB;
the forward's and the survey's progress bars can show in one run. At 256 tokens the page is still cell by cell, and
a 3,000-token text asks for no dense weights."""

import base64
import json
import os
import re
import struct

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState
from streamlit.testing.v1 import AppTest

from attnviz.analysis.long import top_keys
from attnviz.ui.long import FOCUS
from helpers import decode, ok, open_page

N = 8192
WORDS = "the of and river stone cloud light paper window garden music water field house".split()
RARE = "zeppelin"


def document() -> str:
    """~8,300 common words with a rare one twice, 7,800 words apart."""
    rng = np.random.default_rng(14)
    words = list(rng.choice(WORDS, 8300))
    words[100] = words[7900] = RARE
    return " ".join(words)


TEXT = document()
ZOOM = dict(layer="2", head="5", zoom_start="4000", zoom_size="48", pool="mean")


@pytest.fixture(scope="module", autouse=True)
def long_settings():
    old = {k: os.environ.get(k) for k in ("ATTNVIZ_MAX_TOKENS", "ATTNVIZ_MAX_CHARS")}
    os.environ.update(ATTNVIZ_MAX_TOKENS=str(N), ATTNVIZ_MAX_CHARS="200000")
    yield
    for k, v in old.items():
        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def run(page: str = "pages/1_Attention.py", **params) -> AppTest:
    return ok(open_page(page, timeout=1200, model="builtin:seed", text=TEXT, **params))


def charts(at) -> dict:
    return {c.proto.id.rsplit("-", 1)[-1]: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def chart(at, key: str):
    """The chart element keyed ``key`` (to send it a selection)."""
    return next(c for c in at.get("plotly_chart") if c.proto.id.endswith(key))


def select(at, element, selection: dict) -> None:
    """Rerun ``at`` as the browser does after a selection on ``element`` (a chart's points, a table's rows)."""
    state = at._tree.get_widget_states()
    state.widgets.append(WidgetState(id=element.proto.id, string_value=json.dumps({"selection": selection})))
    at._run(state)
    assert not at.exception and not at.error, (at.exception, at.error)


@pytest.fixture(scope="module")
def zoomed():
    return run(**ZOOM)


@pytest.fixture(scope="module")
def trace(zoomed):
    """The page's own trace, from the page's cache (a second forward would cost another ~30 s)."""
    from attnviz.ui.long import _LONG

    return _LONG["builtin:seed", TEXT, N, False].trace  # (model, text, limit, chat template)


@pytest.fixture(scope="module")
def rare(trace):
    """The two positions of the rare word."""
    return [i for i, t in enumerate(trace.tokens) if t == RARE]


@pytest.fixture(scope="module")
def head(trace):
    return trace.head(2, 5)  # (T, T) exact, 256 MB


def test_the_overview_blocks_and_window_are_the_traces_own(zoomed, trace, head):
    assert trace.n_tokens == N and trace.truncated > 0
    assert any(f"{N} tokens" in c.value for c in zoomed.caption)
    assert any(f"the first {N:,} are shown" in w.value for w in zoomed.info)
    figs = charts(zoomed)
    window = figs["long_window"]["data"][0]
    np.testing.assert_array_equal(decode(window["x"]), np.arange(4000, 4048))
    np.testing.assert_allclose(decode(window["z"]), head[4000:4048, 4000:4048], rtol=1e-6, atol=1e-9)
    assert "tokens 4,000–4,047, exact weights" in figs["long_window"]["layout"]["title"]["text"]
    blocks = figs["long_blocks"]["data"][0]
    b = N // 256
    np.testing.assert_allclose(decode(blocks["z"]), head.reshape(256, b, 256, b).mean((1, 3)), rtol=1e-4)
    assert "block mean of 32-token blocks" in figs["long_blocks"]["layout"]["title"]["text"]
    (rect,) = figs["long_blocks"]["layout"]["shapes"]
    assert (rect["x0"], rect["x1"]) == (4000, 4048)
    overview = figs["long_overview"]
    assert "block mean" in overview["layout"]["title"]["text"]
    assert decode(overview["data"][1]["customdata"]).tolist() == [[l, h] for l in range(6) for h in range(8)]
    png = base64.b64decode(overview["data"][0]["source"].split(",", 1)[1])
    width, height = struct.unpack(">II", png[16:24])  # the mosaic: 8 heads × 6 layers of tiles with 1-pixel gaps
    tile = (width + 1) // 8
    assert (width, height) == (8 * tile - 1, 6 * tile - 1) and tile > 8


def test_the_page_stays_under_two_megabytes(zoomed):
    charts_ = sum(len(c.proto.spec) for c in zoomed.get("plotly_chart"))
    html = sum(len(h.proto.body) for h in zoomed.get("html"))
    tables = sum(t.proto.ByteSize() for t in zoomed.dataframe)
    print(f"payload at {N} tokens: charts {charts_:,} B, html {html:,} B, tables {tables:,} B")
    assert charts_ + html + tables <= 2 * 2**20


def test_no_chart_draws_with_webgl(zoomed):
    """Without a GPU a browser draws WebGL in software: 3.2 s for the reach chart at 16,384 points; SVG 0.1-0.25 s."""
    kinds = {t.get("type", "scatter") for spec in charts(zoomed).values() for t in spec["data"]}
    assert {"scatter", "heatmap", "image"} <= kinds and not any(k.endswith("gl") for k in kinds), kinds


def test_a_shared_zoomed_link_reopens_the_same_window(zoomed, head):
    again = run(**ZOOM)  # a fresh session opening the same link
    assert charts(again)["long_window"] == charts(zoomed)["long_window"]
    start = again.number_input(key="zoom_start")
    assert start.value == 4000 and again.number_input(key="zoom_size").value == 48
    start.set_value(6000).run()  # (AppTest does not mirror bound widgets into its URL: test_e2e_long checks that)
    assert again.number_input(key="zoom_start").value == 6000
    window = charts(again)["long_window"]["data"][0]
    np.testing.assert_allclose(decode(window["z"]), head[6000:6048, 6000:6048], rtol=1e-6, atol=1e-9)


def test_an_old_long_text_link_opens_the_same_zoomed_view_on_the_attention_page(zoomed):
    old = run("pages/9_Long_text.py", **ZOOM)  # a link to the Long text page, from before it merged
    assert [t.value for t in old.title] == ["Attention"]
    assert charts(old)["long_window"] == charts(zoomed)["long_window"]
    assert old.number_input(key="zoom_start").value == 4000 and old.number_input(key="zoom_size").value == 48
    assert (old.selectbox(key="layer").value, old.selectbox(key="head").value) == (2, 5)
    assert old.radio(key="pool").value == "mean"


def test_clicking_a_head_in_the_overview_opens_it(trace):
    at = run(**ZOOM)
    overview = chart(at, "long_overview")
    point = {"curve_number": 1, "point_number": 13, "point_index": 13}  # layer 1, head 5 of 8
    select(at, overview, {"points": [point], "point_indices": [13], "box": [], "lasso": []})
    assert (at.query_params["layer"], at.query_params["head"]) == ("1", "5")
    figs = charts(at)
    assert figs["long_blocks"]["layout"]["title"]["text"].startswith("layer 1, head 5 · block mean")
    np.testing.assert_allclose(decode(figs["long_window"]["data"][0]["z"]),
                               trace.weights.tile(1, [5], 4000, 4048)[0, :, 4000:4048], rtol=1e-6)


def test_a_box_dragged_on_the_block_map_zooms_to_its_tokens(head):
    at = run(**ZOOM)
    blocks = chart(at, "long_blocks")
    # AppTest cannot drag, so send what the browser sends for a box over keys 1,000–1,100, queries 1,020–1,180.
    box = {"xref": "x", "yref": "y", "x": [1100.4, 1000.2], "y": [1020.0, 1180.7]}
    select(at, blocks, {"points": [], "point_indices": [], "box": [box], "lasso": []})
    assert (at.number_input(key="zoom_start").value, at.number_input(key="zoom_size").value) == (1000, 181)
    window = charts(at)["long_window"]["data"][0]
    np.testing.assert_allclose(decode(window["z"]), head[1000:1181, 1000:1181], rtol=1e-6, atol=1e-9)


def test_the_reach_opens_on_the_token_whose_column_the_forward_kept(zoomed, head):
    """The reach opens on token FOCUS: its column comes from the survey, read during the forward (no pass over the
    layer's heads after it), and carries the head's own exact weights, as its row does."""
    reach = charts(zoomed)["long_reach"]
    assert reach["layout"]["title"]["text"].endswith(f"at {FOCUS:,}")
    np.testing.assert_allclose(decode(reach["data"][0]["y"]), head[FOCUS], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(decode(reach["data"][1]["y"]), head[:, FOCUS], rtol=1e-6, atol=1e-9)


def test_a_tokens_reach_finds_the_rare_word_and_shows_its_row_and_column(zoomed, rare, head):
    p1, p2 = rare
    assert p2 - p1 > 7000
    zoomed.text_input(key="find").set_value(RARE).run()
    assert any(f"2 positions: {p1:,}, {p2:,}" in c.value for c in zoomed.caption)
    zoomed.button(key="find_go").click().run()
    assert zoomed.number_input(key="token").value == p1
    zoomed.number_input(key="token").set_value(p2).run()
    reach = charts(zoomed)["long_reach"]
    row, col = decode(reach["data"][0]["y"]), decode(reach["data"][1]["y"])
    np.testing.assert_allclose(row, head[p2], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(col, head[:, p2], rtol=1e-6, atol=1e-9)
    (text,) = [h.proto.body for h in zoomed.get("html")]
    assert re.search(rf'<mark style="outline:2px solid #d62728;font-weight:bold;background:none;color:inherit" title="[^"]+">{RARE}</mark>', text)
    shaded = [float(t) for t in re.findall(r' title="([^"]+)"', text)]
    assert max(shaded) == pytest.approx(head[p2].max(), rel=1e-3)  # the darkest token is the row's largest weight
    table = zoomed.dataframe[0].value
    assert table["position"].tolist() == top_keys(head[p2], 10).tolist()
    np.testing.assert_allclose(table["weight"], head[p2, table["position"]], rtol=1e-6)
    # What attends to it: the table and shading follow the column.
    zoomed.radio(key="reach_dir").set_value("what attends to it").run()
    assert zoomed.dataframe[0].value["position"].tolist() == top_keys(head[:, p2], 10).tolist()


def test_clicking_a_point_on_the_reach_follows_that_token(rare, head):
    p2 = rare[1]
    at = run(**ZOOM, token=str(p2))
    key = int(np.argmax(head[p2]))  # the key the rare word attends to most: a click on its peak
    assert key != p2
    reach = chart(at, "long_reach")
    point = {"curve_number": 0, "point_number": key, "point_index": key, "x": key, "y": float(head[p2, key])}
    select(at, reach, {"points": [point], "point_indices": [key], "box": [], "lasso": []})
    assert at.number_input(key="token").value == key and at.query_params["token"] == str(key)
    figs = charts(at)
    assert figs["long_reach"]["layout"]["title"]["text"].endswith(f"at {key:,}")
    np.testing.assert_allclose(decode(figs["long_reach"]["data"][0]["y"]), head[key], rtol=1e-6, atol=1e-9)
    assert at.dataframe[0].value["position"].tolist() == top_keys(head[key], 10).tolist()


def test_picking_a_row_of_the_strongest_positions_follows_that_token(rare, head):
    p2 = rare[1]
    at = run(**ZOOM, token=str(p2))
    top = top_keys(head[p2], 10)
    select(at, at.dataframe[0], {"rows": [3], "columns": [], "cells": []})
    assert at.number_input(key="token").value == top[3]
    np.testing.assert_allclose(decode(charts(at)["long_reach"]["data"][0]["y"]), head[top[3]], rtol=1e-6, atol=1e-9)
    table = at.dataframe[0]  # the new token's table, with no row picked
    assert table.proto.id.endswith(f"reach_top_{top[3]}_row")
    assert table.value["position"].tolist() == top_keys(head[top[3]], 10).tolist()


def test_the_forwards_bar_and_the_surveys_bar_can_show_in_one_run(monkeypatch):
    """Each bar has its own keyed container (the frame's CSS places it by key): both in one run, no duplicate key;
    done() takes a bar away."""
    from attnviz.ui import progress

    monkeypatch.setattr(progress, "BAR_AFTER_S", 0.0)
    monkeypatch.setattr(progress, "BAR_EVERY_S", 0.0)

    def script():
        from attnviz.ui.progress import Bar

        forward = Bar("Running the model", "forward")
        forward(0.5)
        survey = Bar("Reading all heads", "survey")
        survey(0.25)
        survey(0.75)
        forward.done()

    at = AppTest.from_function(script).run(timeout=30)
    assert not at.exception
    bars = [e.proto for e in at.get("progress")]
    assert [(b.value, b.text) for b in bars] == [(75, "Reading all heads")]


def words_of(n: int) -> str:
    """A text of exactly ``n`` builtin:seed tokens."""
    from attnviz.backends.footprint import n_tokens
    from attnviz.ui.frame import get_model

    words = document().split()
    k = n  # each word is a token or more, and [CLS] and [SEP] are two
    while n_tokens(get_model("builtin:seed"), " ".join(words[:k])) > n:
        k -= 1
    text = " ".join(words[:k])
    assert n_tokens(get_model("builtin:seed"), text) == n
    return text


@pytest.mark.parametrize("n, long", [(256, False), (257, True)])
def test_the_page_is_cell_by_cell_up_to_256_tokens_and_pooled_past_it(n, long):
    from attnviz.ui.long import CELLS

    assert CELLS == 256
    at = ok(open_page("pages/1_Attention.py", timeout=300, model="builtin:seed", text=words_of(n)))
    assert any(c.value.startswith("**builtin:seed**") and f"{n} tokens" in c.value for c in at.caption)
    keys = set(charts(at))
    if long:
        assert {"long_overview", "long_blocks", "long_window", "long_reach"} <= keys, keys
        assert not any(k.startswith("overview_") or k.startswith("detail_") for k in keys), keys
    else:
        assert {"overview_self", "detail_self", "focus_self"} <= keys, keys
        assert not any(k.startswith("long_") for k in keys), keys


def test_a_3000_token_text_asks_for_no_dense_weights(monkeypatch):
    """ATTNVIZ_MAX_DENSE_MB=1 refuses any read of every head at once: the long view never asks for one."""
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "1")
    text = words_of(3000)
    at = ok(open_page("pages/1_Attention.py", timeout=600, model="builtin:seed", text=text))
    assert any(c.value.startswith("**builtin:seed**") and "3000 tokens" in c.value for c in at.caption)
    assert {"long_overview", "long_blocks", "long_window", "long_reach", "long_sinks", "long_distance"} <= set(charts(at))


@pytest.mark.parametrize("head", ["5", "mean"])
def test_the_long_page_and_the_notebook_draw_one_explorer_model(head):
    """The long page's block map and exact window are the notebook explorer's for the same trace (figures/explorer:
    the page reads it with the survey of its forward, the notebook with trace.pooled)."""
    from attnviz.ui.long import _LONG
    from attnviz.ui.notebook import View

    text = words_of(600)
    at = ok(open_page("pages/1_Attention.py", timeout=300, model="builtin:seed", text=text, layer="2", head=head,
                      zoom_start="100", zoom_size="48"))
    figs = charts(at)
    d = View(_LONG["builtin:seed", text, N, False].trace, "self").detail(2, None if head == "mean" else 5, (100, 148))
    name = "layer 2, mean of 8 heads" if head == "mean" else "layer 2, head 5"
    blocks = np.frombuffer(d["blocks"]["weights"], np.float32).reshape(d["blocks"]["shape"])  # (200, 200)
    np.testing.assert_allclose(decode(figs["long_blocks"]["data"][0]["z"]), blocks, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(decode(figs["long_blocks"]["data"][0]["x"]), np.arange(0, 600, 3))
    assert f"{name} · block max of 3-token blocks" in figs["long_blocks"]["layout"]["title"]["text"]
    assert d["blocks"]["title"].startswith(f"{name} · block max of 3-token blocks")
    window = np.frombuffer(d["weights"], np.float32).reshape(48, 48)
    np.testing.assert_allclose(decode(figs["long_window"]["data"][0]["z"]), window, rtol=1e-6, atol=1e-9)
    assert d["rows"] == d["cols"] == [100, 148]
