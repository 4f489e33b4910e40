"""The Positional and Norms pages in real Streamlit (AppTest), for a model of each family, up to 512 tokens.

Every chart checked here is compared with the library's own computation on a fresh trace of the same text.
"""

import html
import json
import re

import numpy as np
import pytest
from streamlit.runtime.memory_media_file_storage import _calculate_file_id
from streamlit.testing.v1 import AppTest

from attnviz.backends import load
from attnviz.figures.common import LINE_BREAK
from attnviz.analysis.norms import NAMES, layer_stats, norm_attention, norm_table
from attnviz.backends.positions import attention_by_offset, position_info, similarity, sinusoidal
from attnviz.core.tokens import labels
from attnviz.ui.display import CELLS
from helpers import chart_specs, decode, open_page

TEXT = "The quick brown fox jumps over the <b>lazy</b> dog. Where is the station?"
# HF tiny models: an encoder, a decoder and an encoder–decoder; each family keeps position its own way.
KIND = {
    "builtin:minilm": "learned", "builtin:seed": "sinusoidal", "bert": "learned", "llama": "rotary", "t5": "relative",
}  # fmt: skip
MODELS = list(KIND)


@pytest.fixture(scope="module")
def key(tiny_model):
    """family or built-in key -> the model key the pages take."""
    return lambda m: m if m.startswith("builtin:") else f"hf:{tiny_model(m)}"


def _run(page: str, **params) -> AppTest:
    return open_page(f"pages/{page}.py", alone=True, timeout=90, **params)


def _ok(at: AppTest) -> dict:
    """The page's charts by title, after checking it ran without exception or error."""
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return {s["layout"]["title"]["text"].replace(LINE_BREAK, " "): s for s in chart_specs(at)}  # titles wrap


def _z(spec) -> np.ndarray:
    return decode(spec["data"][0]["z"]).astype(np.float64)


def _side(trace, name="encoder"):
    return getattr(trace, name) if trace.kind == "encoder-decoder" else trace


@pytest.mark.parametrize("model", MODELS)
def test_positional_page(key, model):
    k = key(model)
    charts = _ok(_run("2_Positional", model=k, text=TEXT))
    pe = _z(charts["sinusoidal encoding: 128 positions × 128 dimensions"])
    np.testing.assert_allclose(pe, sinusoidal(128, 128), atol=1e-6)

    info = position_info(load(k))
    assert info.kind == KIND[model]
    if info.kind in ("learned", "sinusoidal"):
        # A table of more than CELLS positions is drawn CELLS at a time: the windows, side by side, are the table
        starts = sorted({*range(0, len(info.table) - CELLS, CELLS), max(0, len(info.table) - CELLS)})
        windows = {0: charts} | {s: _ok(_run("2_Positional", model=k, text=TEXT, model_from=str(s))) for s in starts[1:]}
        drawn = np.zeros_like(info.table, dtype=np.float64)
        for s, page in windows.items():
            w = slice(s, s + CELLS)
            spec = page["the model's position table"]["data"][0]
            drawn[w] = _z(page["the model's position table"])
            assert spec.get("y0", 0) == s  # hover names the position itself
            np.testing.assert_allclose(_z(page["cosine between the model's positions"]),
                                       similarity(info.table, "cosine")[w, w], atol=1e-5)
        np.testing.assert_allclose(drawn, info.table, atol=1e-6)
        table = charts["the model's position table"]["data"][0]
        lim = np.percentile(np.abs(info.table), 99)  # a robust range, so a few large entries do not grey the rest
        assert table["zmax"] == pytest.approx(lim, rel=1e-5) and table["zmin"] == -table["zmax"]
        centred = info.table - info.table.mean(0)
        u, sv, _ = np.linalg.svd(centred.astype(np.float64), full_matrices=False)
        curves = charts["the positions' first principal components"]["data"]
        for i, curve in enumerate(curves):
            got, want = decode(curve["y"]), u[:, i] * sv[i]
            np.testing.assert_allclose(np.abs(got), np.abs(want), rtol=1e-4, atol=1e-4 * sv[0])
            assert f"({sv[i] ** 2 / (sv ** 2).sum():.0%} of variance)" in curve["name"]
    if info.kind == "relative":
        np.testing.assert_allclose(_z(charts["bias added to the score, per head"]), info.table.T, atol=1e-6)
    if info.frequencies is not None:
        y = decode(charts["frequency of each dimension pair"]["data"][0]["y"])
        np.testing.assert_allclose(y, info.frequencies, rtol=1e-6)

    trace = _side(load(k).trace(TEXT))
    causal = trace.kind == "decoder"
    offsets, means = attention_by_offset(trace.attentions, ~trace.special, causal)
    shown = abs(offsets) <= min(20, trace.n_tokens - 1)
    heat = charts["mean attention by offset"]["data"][0]
    assert list(decode(heat["x"])) == list(offsets[shown])
    assert max(decode(heat["x"])) == (0 if causal else min(20, trace.n_tokens - 1))
    want = means[..., shown].reshape(trace.n_layers * trace.n_heads, -1)
    np.testing.assert_allclose(_z(charts["mean attention by offset"]), want, atol=1e-6)


def test_positional_controls():
    at = _run("2_Positional", text=TEXT)
    at.slider(key="pe_len").set_value(64)
    at.slider(key="pe_dim").set_value(20)
    at.radio(key="pe_metric").set_value("cosine")
    at.multiselect(key="pe_dims").set_value([3, 19])
    at.radio(key="pos_view").set_value("one curve per layer")
    at.slider(key="pos_window").set_value(5)
    charts = _ok(at.run())
    pe = sinusoidal(64, 20)
    np.testing.assert_allclose(_z(charts["sinusoidal encoding: 64 positions × 20 dimensions"]), pe, atol=1e-6)
    np.testing.assert_allclose(_z(charts["cosine between positions"]), similarity(pe, "cosine"), atol=1e-5)
    curves = charts["chosen dimensions over position"]["data"]
    assert [c["name"] for c in curves] == ["dim 3", "dim 19"]
    np.testing.assert_allclose(decode(curves[1]["y"]), pe[:, 19], atol=1e-6)

    trace = load("builtin:minilm").trace(TEXT)
    offsets, means = attention_by_offset(trace.attentions, ~trace.special)
    lines = charts["mean attention by offset, averaged over heads"]["data"]
    assert len(lines) == trace.n_layers and list(decode(lines[0]["x"])) == list(range(-5, 6))
    np.testing.assert_allclose(decode(lines[4]["y"]), means[4].mean(0)[abs(offsets) <= 5], atol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_norms_page(key, model):
    k = key(model)
    at = _run("3_Norms", model=k, text=TEXT, layer="1", head="2")
    charts = _ok(at)
    trace = _side(load(k).trace(TEXT))
    stats = layer_stats(trace)
    assert set(stats) >= {"residual_in", "attn_out", "ffn_out", "ln2_in_std", "attn_share"}
    np.testing.assert_allclose(_z(charts[NAMES["residual_in"]]), stats["residual_in"], rtol=1e-6)
    escaped = [html.escape(s, quote=False) for s in labels(trace.tokens)]
    assert charts[NAMES["residual_in"]]["data"][0]["customdata"][0] == escaped

    raw, vn = trace.attentions[1, 2], trace.norms["value_norms"][1, 2]
    np.testing.assert_allclose(_z(charts["α · layer 1, head 2"]), raw, atol=1e-7)
    np.testing.assert_allclose(_z(charts["‖α f(x)‖ · layer 1, head 2"]), norm_attention(raw, vn), rtol=1e-6)
    assert charts["‖α f(x)‖ · layer 1, head 2"]["data"][0]["x"] == escaped

    table = norm_table(trace)
    shown = at.dataframe[0].value
    assert list(shown.columns) == list(table.columns) and len(shown) == trace.n_layers * trace.n_tokens
    np.testing.assert_allclose(shown["attn_share"].to_numpy(float), table["attn_share"].to_numpy(float), rtol=1e-6)
    # The download's URL names the hash of its bytes: it serves exactly this table as CSV.
    name = "norms-" + re.sub(r"[^A-Za-z0-9]+", "-", k).strip("-") + ".csv"
    url = at.get("download_button")[0].proto.url
    csv_id = _calculate_file_id(table.to_csv(index=False).encode(), "text/csv", name)
    assert url.endswith(f"{csv_id}.csv")


def test_norms_controls_and_decoder_side(key):
    k = key("t5")
    # The whole view comes from the URL, as a shared link would give it.
    view = dict(layer="2", head="3", norm_stack="decoder", norm_stat=NAMES["attn_share"], norm_rows="true")
    at = _run("3_Norms", model=k, text=TEXT, **view)
    charts = _ok(at)
    assert at.toggle(key="norm_rows").value
    dec = load(k).trace(TEXT).decoder
    assert dec.n_layers == 3  # layer 2 exists on the decoder side only
    share = charts[NAMES["attn_share"]]["data"][0]
    np.testing.assert_allclose(_z(charts[NAMES["attn_share"]]), layer_stats(dec)["attn_share"], rtol=1e-6)
    assert (share["zmin"], share["zmax"]) == (0.0, 1.0)
    rows = _z(charts["‖α f(x)‖ · layer 2, head 3"])
    want = norm_attention(dec.attentions[2, 3], dec.norms["value_norms"][2, 3], normalize=True)
    np.testing.assert_allclose(rows, want, rtol=1e-6)
    np.testing.assert_allclose(rows.sum(1), 1.0, rtol=1e-5)


def test_both_pages_at_512_tokens():
    text = " ".join(f"word{i % 50} and the river" for i in range(200))
    trace = load("builtin:minilm").trace(text)
    assert trace.n_tokens == 512 and trace.truncated > 0
    for page in ("2_Positional", "3_Norms"):
        at = _run(page, text=text)
        charts = _ok(at)
        assert "512 tokens" in at.caption[0].value
        size = sum(len(json.dumps(s)) for s in chart_specs(at))
        assert size < 30e6, f"{page} sends {size / 1e6:.1f} MB of charts"
        assert size <= 2 * 2**20, f"{page} sends {size / 2**20:.2f} MiB of charts"  # issue 34's bound
    assert _z(charts[NAMES["residual_in"]]).shape == (6, 512)
    # 512 × 512 is drawn as CELLS × CELLS windows (exact cells), which the caption names: the last one here
    at = _run("3_Norms", text=text, norm_from=str(512 - CELLS))
    weighted = norm_attention(trace.head(0, 0), trace.norms["value_norms"][0, 0], False)
    np.testing.assert_allclose(_z(_ok(at)["‖α f(x)‖ · layer 0, head 0"]), weighted[512 - CELLS:, 512 - CELLS:],
                               rtol=1e-5, atol=1e-7)
    assert any(f"of 512" in c.value and "cell by cell" in c.value for c in at.caption)


@pytest.fixture(scope="module")
def neox(tmp_path_factory):
    """A tiny GPT-NeoX (parallel attention and MLP, partial rotary): a family the norm hooks do not cover."""
    import torch
    import transformers as tf

    from attnviz.backends.builtin import minilm_path

    folder = tmp_path_factory.mktemp("tiny-neox")
    config = tf.GPTNeoXConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tf.GPTNeoXForCausalLM(config).save_pretrained(folder)
    tf.AutoTokenizer.from_pretrained(minilm_path()).save_pretrained(folder)
    return f"hf:{folder}"


def test_uncovered_family_shows_residual_norms_and_says_what_is_missing(neox):
    at = _run("3_Norms", model=neox, text=TEXT)
    charts = _ok(at)
    assert "gpt_neox is wired differently" in at.info[0].value
    trace = load(neox).trace(TEXT)
    assert trace.norms == {}
    np.testing.assert_allclose(_z(charts[NAMES["residual_in"]]), layer_stats(trace)["residual_in"], rtol=1e-6)
    assert list(at.dataframe[0].value.columns) == ["layer", "token_index", "token", "residual_in", "residual_out"]
    assert any("no value-vector norms" in i.value for i in at.info)

    charts = _ok(_run("2_Positional", model=neox, text=TEXT))
    # Rotary over a quarter of each 16-wide head: 4 rotated dimensions, θ = 10000^(−2i/4).
    y = decode(charts["frequency of each dimension pair"]["data"][0]["y"])
    np.testing.assert_allclose(y, [1.0, 0.01], rtol=1e-12)
    np.testing.assert_allclose(y, load(neox).net.gpt_neox.rotary_emb.inv_freq.numpy(), rtol=1e-6)


def test_norms_speaks_plainly():
    at = _run("3_Norms", text=TEXT)
    charts = _ok(at)
    assert at.selectbox(key="norm_stat").options[0] == "residual stream entering the layer"
    assert not [o for o in at.selectbox(key="norm_stat").options if "_" in o]  # no raw key like ln1_in_mean
    assert {"residual stream entering the layer", "attention update"} <= {
        c["name"] for c in charts["residual stream and the updates added to it"]["data"]}
    assert sum("How to read" in c.value for c in at.caption) == 3  # one line per chart (the pair shares one)


def test_norms_table_headers_are_words_and_the_csv_keeps_the_names():
    at = _run("3_Norms", text=TEXT)
    _ok(at)
    headers = json.loads(at.dataframe[0].proto.columns)
    table = at.dataframe[0].value
    named = [c for c in table.columns if "_" in c]  # machine names such as ln1_in_mean, residual_in
    assert named and all(headers[c]["label"] == NAMES.get(c, "position") for c in named)
    assert not [h for h in headers.values() if "_" in h.get("label", "")]
    assert "ln1_in_mean" in table.columns  # the data (and so the CSV) keeps the names programs read
