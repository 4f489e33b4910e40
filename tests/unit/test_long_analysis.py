"""Long-text analyses and figures against dense references: the one-pass survey (pooled maps, received weight,
distance profile), columns, windows, search, sinks; payload and escaping of the figures."""

import json

import numpy as np
import pytest
import torch

import attnviz
import attnviz.core.weights
from attnviz.analysis import long
from attnviz.figures import long as figs
from attnviz.core.trace import AttentionTrace
from helpers import decode

TEXT = "the quick brown fox jumps over a lazy dog, and then it sleeps. " * 12


@pytest.fixture(scope="module")
def trace():
    return attnviz.trace(TEXT, "builtin:seed")


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of a few rows, so row blocks, tiles and the last short block all fall differently."""
    monkeypatch.setattr(attnviz.core.weights, "TILE_FLOATS", 1 << 13)


def blocks_ref(a: np.ndarray, b: int, how) -> np.ndarray:
    """(..., T, T) reduced over b × b blocks (the last shorter), by a plain loop."""
    T = a.shape[-1]
    edges = list(range(0, T, b)) + [T]
    return np.stack([np.stack([how(a[..., r0:r1, c0:c1], axis=(-2, -1)) for c0, c1 in zip(edges[:-1], edges[1:])], -1)
                     for r0, r1 in zip(edges[:-1], edges[1:])], -2)


@pytest.mark.parametrize("overview,detail", [(8, 40), (5, 7), (64, 256)])
def test_the_survey_equals_dense_references(trace, small_tiles, overview, detail):
    A = trace.attentions  # (L, H, T, T), 182 tokens
    T = trace.n_tokens
    s = long.survey(trace.weights, overview, detail, keys=(0, 1, T - 1, T + 5))
    b = long.block_size(T, detail)
    assert s.block("detail") == b and s.starts["detail"].tolist() == list(range(0, T, b))
    np.testing.assert_allclose(s.pooled("detail", "max"), blocks_ref(A, b, np.max), rtol=1e-6)
    np.testing.assert_allclose(s.pooled("detail", "mean"), blocks_ref(A, b, np.mean), rtol=1e-5)
    np.testing.assert_allclose(s.layer_max, blocks_ref(A.mean(1), b, np.max), rtol=1e-5)
    g = s.block("overview")
    assert g % b == 0 and len(s.starts["overview"]) <= overview
    np.testing.assert_allclose(s.pooled("overview", "max"), blocks_ref(A, g, np.max), rtol=1e-6)
    np.testing.assert_allclose(s.pooled("overview", "mean"), blocks_ref(A, g, np.mean), rtol=1e-5)
    np.testing.assert_allclose(s.received, A.sum(2), rtol=1e-5)
    d = np.abs(np.arange(T)[:, None] - np.arange(T)[None])
    bins = np.searchsorted(s.edges, d, side="right") - 1  # (T, T)
    ref = np.zeros(s.distance.shape)
    for i in range(len(s.edges) - 1):
        ref[..., i] = A[..., bins == i].sum(-1)
    np.testing.assert_allclose(s.distance, ref / ref.sum(-1, keepdims=True), atol=1e-6)
    assert long.distance_labels(s.edges)[:4] == ["0", "1", "2–3", "4–7"]
    assert sorted(s.columns) == [0, 1, T - 1]  # a key past the text keeps nothing
    for k, kept in s.columns.items():
        np.testing.assert_allclose(kept, A[..., k], rtol=1e-6, atol=1e-9)


def assert_same_survey(got, want, rtol):
    for name in ("pooled_max", "pooled_mean"):
        for grid in ("overview", "detail"):
            np.testing.assert_allclose(getattr(got, name)[grid], getattr(want, name)[grid], rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(got.layer_max, want.layer_max, rtol=rtol, atol=1e-7)
    np.testing.assert_allclose(got.received, want.received, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(got.distance, want.distance, rtol=rtol, atol=1e-7)
    assert got.columns.keys() == want.columns.keys()
    for k in got.columns:
        np.testing.assert_allclose(got.columns[k], want.columns[k], rtol=rtol, atol=1e-7)


@pytest.mark.parametrize("key", ["builtin:seed", "builtin:lm", "gpt2", "gemma2", "bart"])
def test_a_survey_read_during_the_forward_equals_one_read_after_it(key, small_tiles, tiny_backend):
    """``capture.reducing``: the forward attends with the tiles it hands the reducer (its own encoder, its causal
    language model, Hugging Face's attention function, soft-capping and sliding windows, an encoder–decoder's
    encoder): the survey equals one read from the trace's weights, and the trace equals a plain one within 1e-5."""
    from attnviz.capture.record import reducing

    model = attnviz.load(key) if key.startswith("builtin:") else tiny_backend(key)
    text = TEXT if key != "builtin:lm" else "A B C D E F A B C D E F G H " * 4
    plain = model.trace(text)
    with reducing(long.Reducer(7, keys=(1, 5))) as reducer:
        read = model.trace(text)
    stack, plain_stack = read.stack(None), plain.stack(None)
    assert reducer.complete(stack.weights.shape) and len(reducer.layers) == stack.weights.shape[0]
    assert_same_survey(reducer.result(5), long.survey(stack.weights, 5, 7, keys=(1, 5)), rtol=1e-5)
    L, H = stack.weights.shape[:2]
    for k, kept in reducer.result(5).columns.items():  # (L, H, Tq): kept during the forward, as the trace reads it
        want = np.stack([[stack.weights.column(layer, h, k) for h in range(H)] for layer in range(L)])
        np.testing.assert_allclose(kept, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stack.weights.dense(), plain_stack.weights.dense(), atol=1e-5)
    np.testing.assert_allclose(stack.queries.hidden_states, plain_stack.queries.hidden_states, rtol=1e-5, atol=1e-4)


def test_a_survey_is_not_read_from_a_padded_batch_or_outside_the_block():
    from attnviz.capture.record import record, reducing

    model = attnviz.load("builtin:seed")
    ids = torch.tensor([model.tokenizer(TEXT).input_ids] * 2)
    with reducing(long.Reducer(7)) as reducer, torch.inference_mode(), record(model.net, lengths=[ids.shape[1]] * 2):
        model.net(ids)
    assert reducer.layers == []  # a batch attends with SDPA and hands nothing over
    model.trace(TEXT)
    assert reducer.layers == []
    with pytest.raises(ValueError, match="every query row of every layer"):
        reducer.result()


def test_a_model_held_eager_hands_nothing_over_and_the_page_surveys_it_after(tiny_model):
    """A model whose attention attnviz cannot capture runs eager: nothing reaches the reducer, and the Attention
    page's long view surveys the trace's own weights instead."""
    from attnviz.backends.hf import load_hf
    from attnviz.ui import long as page

    backend = load_hf(str(tiny_model("gpt2")))
    backend._use("eager")
    trace, reducer = long.trace_with_survey(backend, TEXT, detail=7)
    assert trace.capture == "eager" and reducer.layers == [] and not reducer.complete(trace.weights.shape)
    page._SURVEYS[trace.stack(None).weights] = page._Survey(reducer, {})  # the pairing surveyed_trace makes
    got = page.cached_survey(trace.stack(None), 5)
    assert_same_survey(got, long.survey(trace.weights, 5, page.DETAIL, keys=(page.FOCUS,)), rtol=1e-6)
    assert list(got.columns) == [page.FOCUS]  # the column the reach opens on, read in the same pass


def test_columns_windows_and_rows_are_exact(trace, small_tiles):
    A = trace.attentions
    np.testing.assert_allclose(trace.column(2, 3, 17), A[2, 3, :, 17], rtol=1e-6)
    np.testing.assert_allclose(trace.column(2, None, 17), A[2, :, :, 17].mean(0), rtol=1e-5)
    np.testing.assert_allclose(trace.column(2, 5, 40), A[2, 5, :, 40], rtol=1e-6)  # normalisers the mean made
    held = attnviz.core.weights.DenseWeights(A)  # an eager model's weights: the column is read tile by tile
    np.testing.assert_array_equal(held.column(2, 3, 17), A[2, 3, :, 17])
    np.testing.assert_allclose(held.column(2, None, 17), A[2, :, :, 17].mean(0), rtol=1e-6)
    np.testing.assert_allclose(long.window(trace.weights, 4, 1, 30, 95), A[4, 1, 30:95, 30:95], rtol=1e-6)
    np.testing.assert_allclose(long.window(trace.weights, 4, None, 30, 95), A[4, :, 30:95, 30:95].mean(0), rtol=1e-5)


def sink_trace(T=40, L=2, H=3):
    """Dense weights with known sinks: layer 1 head 2 puts 80% on token 0; layer 0 head 1 60% on the commas."""
    tokens = ["[CLS]"] + [("," if i % 5 == 0 else f"w{i}") for i in range(1, T)]
    A = np.full((L, H, T, T), 1.0 / T, np.float32)
    A[1, 2] = 0.2 / (T - 1)
    A[1, 2, :, 0] = 0.8
    commas = np.array([t == "," for t in tokens])
    A[0, 1] = np.where(commas, 0.6 / commas.sum(), 0.4 / (~commas).sum())
    special = np.arange(T) == 0
    return AttentionTrace(tokens, A, special=special), commas | special


def test_sinks_and_delimiters_on_known_weights():
    t, delim = sink_trace()
    s = long.survey(t.weights, 4, 16)
    share = long.first_token_share(s)
    assert share[1, 2] == pytest.approx(0.8) and share[0, 0] == pytest.approx(1 / 40)
    assert long.sinks(s) == [(1, 2, pytest.approx(0.8))]
    assert long.delimiters(t.tokens, t.special).tolist() == delim.tolist()
    assert long.delimiter_share(s, delim)[0, 1] == pytest.approx(0.6 + 0.4 / 33, rel=1e-5)  # 7 commas, 33 others: + [CLS]'s share


def test_search_top_keys_and_context():
    tokens = ["[CLS]", "the", "zeppelin", "flew", "Zeppelins", "over", "zeppelin", "[SEP]"]
    assert long.find(tokens, " Zeppelin ") == [2, 6]  # equal tokens first, case-insensitive
    assert long.find(tokens, "ppel") == [2, 4, 6] and long.find(tokens, "  ") == []
    assert long.top_keys(np.array([0.1, 0.5, 0.2, 0.5, 0.0]), 3).tolist() == [1, 3, 2]
    assert long.context(tokens, 3, width=2) == ("the zeppelin", "flew", "Zeppelins over")


def test_figures_escape_text_and_stay_small(trace):
    s = long.survey(trace.weights, 45, 256)
    fig = figs.head_mosaic(s.pooled("overview", "mean"), "mean", trace.n_tokens, s.block("overview"), (1, 2))
    spec = json.loads(fig.to_json())
    assert "block mean" in spec["layout"]["title"]["text"]
    assert decode(spec["data"][1]["customdata"]).tolist() == [[l, h] for l in range(6) for h in range(8)]
    tokens = ["<b>bold</b>", "a", "<script>x</script>"]
    html = figs.reach_html(tokens, np.array([0, 1, 2]), np.array([0.0, 0.2, 0.8]), 1)
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in html and "<script>" not in html
    assert html.count("<span") == 1 and 'outline:2px solid #d62728;font-weight:bold;background:none;color:inherit" title="0.2">a</mark>' in html  # 0 stays plain text
    top_only = figs.reach_html(tokens, np.array([0, 1, 2]), np.array([0.5, 0.3, 0.2]), 2, most=1)
    assert top_only.count("<span") == 1 and '<span title="0.5"' in top_only  # only the strongest is shaded
    w = figs.window_heatmap(np.eye(3, dtype=np.float32), 0, tokens, "t")
    assert all("<" not in t for t in w.to_dict()["layout"]["xaxis"]["ticktext"])


class Stop(Exception):
    """What Streamlit's Stop raises in a job's checkpoint (``attnviz.ui.jobs.checkpoint``), mid-forward."""


@pytest.mark.parametrize("key", ["builtin:seed", "gpt2"])
def test_a_stopped_forward_keeps_the_layers_it_read_and_its_rerun_reads_only_the_rest(key, small_tiles, tiny_backend):
    """A forward stopped half-way through a layer keeps the layers it read whole before it; a rerun with them reads
    only the others (no progress before their share), and its survey is the one an uninterrupted forward reads."""
    model = attnviz.load(key) if key.startswith("builtin:") else tiny_backend(key)
    L = model.n_layers
    k = max(1, L // 2)  # layers read whole before the Stop
    _, uninterrupted = long.trace_with_survey(model, TEXT, detail=7, keys=(1, 5))

    def stop_half_way(fraction):
        if fraction * L > k + 0.5:
            raise Stop

    reducer = long.Reducer(7, L, stop_half_way, keys=(1, 5))
    with pytest.raises(Stop):
        long.trace_with_survey(model, TEXT, reducer=reducer)
    kept = reducer.whole()
    assert len(kept) == k and len(reducer.layers) == k + 1  # the layer read in part is not kept
    fractions = []
    trace, resumed = long.trace_with_survey(model, TEXT, reducer=long.Reducer(7, L, fractions.append, keys=(1, 5), kept=kept))
    assert resumed.layers[:k] == kept and min(fractions) > k / L and fractions[-1] == pytest.approx(1.0)
    assert resumed.complete(trace.stack(None).weights.shape)
    assert_same_survey(resumed.result(5), uninterrupted.result(5), rtol=1e-6)
