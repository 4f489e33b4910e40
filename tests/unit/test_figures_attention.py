"""The attention explorer's pure parts: display options (attnviz.figures.view) and figures, against plain references."""

import base64
import io
import re

import numpy as np
import plotly.colors
import pytest
from PIL import Image

import attnviz
from attnviz.figures.attention import QUANTISE_ABOVE, attention_heatmap, explorer_figures
from attnviz.figures.overview import head_grid, stack_tiles, tiles
from attnviz.core.tokens import labels, merge_subwords, word_labels
from attnviz.core.trace import AttentionTrace, Seq2SeqTrace, stacks
from attnviz.figures.view import Options, colour_top, focus_html, layer_view, side, stack_view
from helpers import decode

TOKENS = ("[CLS]", "the", "un", "##believ", "##able", "cat", "the", "[SEP]")
WORDS = np.array([-1, 0, 1, 1, 1, 2, 3, -1])
SPECIAL = WORDS < 0
L, H, T = 2, 3, len(TOKENS)


def softmax_rows(shape, seed=0, causal=False):
    x = np.random.default_rng(seed).normal(size=shape) * 2
    if causal:
        x = np.where(np.triu(np.ones(shape[-2:], bool), 1), -np.inf, x)
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


def encoder_trace(**kw):
    return AttentionTrace(tokens=TOKENS, attentions=softmax_rows((L, H, T, T)), special=SPECIAL, word_ids=WORDS, **kw)


def view(trace, options=Options(), name=None):
    """The reference: the options applied to every weight of the stack at once."""
    (name, s), *_ = [(n, s) for n, s in stacks(trace).items() if name in (None, n)]
    return stack_view(name, s.weights.dense(), side(s.queries), side(s.keys), s.causal, options)


def one_layer(v, layer):
    """What the page reads for ``layer``: the view with that layer alone, (1, H, Tq, Tk)."""
    return v._replace(attn=v.attn[layer:layer + 1])


def colours(w):
    """Reference RGB of weights on the Blues scale, straight from plotly."""
    rgb = plotly.colors.sample_colorscale("Blues", np.ravel(w).tolist(), colortype="tuple")
    return (np.array(rgb) * 255).reshape(*np.shape(w), 3)


def png_pixels(fig) -> np.ndarray:
    uri = fig.data[0].source
    return np.array(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB")).astype(int)


def inside(path: str, x: float, y: float) -> bool:
    """Ray casting: is (x, y) inside the SVG polygon ``path`` (M…L…Z)?"""
    pts = [tuple(map(float, p.split(","))) for p in re.findall(r"-?[\d.]+,-?[\d.]+", path)]
    hit = False
    for (x1, y1), (x2, y2) in zip(pts, pts[1:] + pts[:1]):
        if (y1 > y) != (y2 > y) and x < x1 + (y - y1) * (x2 - x1) / (y2 - y1):
            hit = not hit
    return hit


# --- options -----------------------------------------------------------------------------------------


def test_no_options_show_the_trace_itself():
    t = encoder_trace()
    v = view(t)
    np.testing.assert_array_equal(v.attn, t.attentions)
    assert v.q_labels == v.k_labels == labels(TOKENS) and v.masked is None


@pytest.mark.parametrize("renorm", [True, False])
def test_hiding_specials_drops_their_rows_and_columns(renorm):
    t = encoder_trace()
    v = view(t, Options(hide_special=True, renorm=renorm))
    kept = t.attentions[:, :, 1:-1, 1:-1]
    want = kept / kept.sum(-1, keepdims=True) if renorm else kept
    np.testing.assert_allclose(v.attn, want, rtol=1e-6)
    assert v.k_labels == labels(TOKENS[1:-1])
    if renorm:
        np.testing.assert_allclose(v.attn.sum(-1), 1, atol=1e-6)
    else:
        assert (v.attn.sum(-1) < 1).all()


def test_merging_subwords_matches_tokens_merge_subwords():
    t = encoder_trace()
    v = view(t, Options(merge=True))
    np.testing.assert_allclose(v.attn, merge_subwords(t.attentions, WORDS), atol=1e-6)
    assert v.q_labels == word_labels(TOKENS, WORDS) == ["[CLS]", "the (1)", "unbelievable", "cat", "the (4)", "[SEP]"]
    np.testing.assert_allclose(v.attn.sum(-1), 1, atol=1e-6)
    assert [w for w, *_ in v.k_text] == ["[CLS]", "the", "unbelievable", "cat", "the", "[SEP]"]


def test_hide_then_merge_then_threshold():
    t = encoder_trace()
    v = view(t, Options(hide_special=True, renorm=True, merge=True, threshold=0.2))
    hidden = t.attentions[:, :, 1:-1, 1:-1]
    merged = merge_subwords(hidden / hidden.sum(-1, keepdims=True), WORDS[1:-1])
    np.testing.assert_allclose(v.attn, np.where(merged < 0.2, 0, merged), atol=1e-6)
    assert (v.attn[(v.attn > 0)] >= 0.2).all() and (v.attn == 0).any()


def test_hiding_specials_keeps_everything_when_every_token_is_special():
    t = AttentionTrace(tokens=("<s>", "</s>"), attentions=softmax_rows((1, 1, 2, 2)), special=[True, True])
    np.testing.assert_array_equal(view(t, Options(hide_special=True)).attn, t.attentions)


def test_causal_mask_follows_positions_through_hiding_and_merging():
    t = AttentionTrace(tokens=TOKENS, attentions=softmax_rows((L, H, T, T), causal=True), special=SPECIAL,
                       word_ids=WORDS, kind="decoder")
    np.testing.assert_array_equal(view(t).masked, np.triu(np.ones((T, T), bool), 1))
    v = view(t, Options(hide_special=True, merge=True))
    # words: the, unbelievable (3 pieces), cat, the: a word is masked when it starts after the query word ends
    np.testing.assert_array_equal(v.masked, np.triu(np.ones((4, 4), bool), 1))
    assert (v.attn[..., v.masked] == 0).all()


def test_seq2seq_stacks_put_target_on_rows_and_source_on_columns():
    Ts, Tt = 5, 3
    enc = AttentionTrace(tokens=("a", "b", "c", "d", "</s>"), attentions=softmax_rows((L, H, Ts, Ts)),
                         special=[0, 0, 0, 0, 1])
    dec = AttentionTrace(tokens=("<s>", "x", "y"), attentions=softmax_rows((L, H, Tt, Tt), causal=True),
                         special=[1, 0, 0], kind="decoder")
    trace = Seq2SeqTrace(encoder=enc, decoder=dec, cross_attentions=softmax_rows((L, H, Tt, Ts), seed=3))
    assert list(stacks(trace)) == ["encoder", "decoder", "cross"]
    cross = view(trace, name="cross")
    assert cross.q_labels == ["<s>", "x", "y"] and cross.k_labels == ["a", "b", "c", "d", "</s>"]
    assert cross.masked is None
    np.testing.assert_array_equal(cross.attn, trace.cross_attentions)
    assert view(trace, name="decoder").masked is not None and view(trace, name="encoder").masked is None
    fig = attention_heatmap(cross.attn[1, 2], cross.q_labels, cross.k_labels)
    assert fig.data[0].y == ("&lt;s&gt;", "x", "y") and len(fig.data[0].x) == Ts
    hidden = view(trace, Options(hide_special=True, renorm=False), name="cross")
    np.testing.assert_array_equal(hidden.attn, trace.cross_attentions[:, :, 1:, :4])


# --- figures -----------------------------------------------------------------------------------------


def test_detail_heatmap_is_exact_for_small_texts_and_escapes_labels():
    a = softmax_rows((1, T, T))[0]
    names = labels(TOKENS[:-1] + ("<b>x</b>",))
    fig = attention_heatmap(a, names, names, "layer 0, head 1", full_range=True)
    heat = fig.data[0]
    np.testing.assert_array_equal(decode(fig.to_plotly_json()["data"][0]["z"]), a)
    assert heat.x[-1] == "&lt;b&gt;x&lt;/b&gt;" and not any("<" in s for s in heat.x + heat.y)
    assert (heat.zmin, heat.zmax) == (0, 1) and "weight %{z:.3g}" in heat.hovertemplate  # three significant digits


def test_colours_run_to_the_heads_own_high_quantile_written_on_the_colour_bar():
    n = 441  # a diffuse head over a long text: every weight near 1/n
    a = softmax_rows((1, n, n))[0] * 0 + np.float32(1 / n)
    a[:, 5] += 1 / n  # one column twice as strong: it must stand out
    a /= a.sum(-1, keepdims=True)
    names = [str(i) for i in range(n)]
    heat = attention_heatmap(a, names, names).data[0]
    top = colour_top(a)
    assert heat.zmax == top and 0 < top < 0.01 and top >= a.max() * 0.99
    np.testing.assert_array_equal(heat.z, a)  # the weights themselves, float32: hover reads them exactly
    assert "%{z:.3g}" in heat.hovertemplate
    assert heat.colorbar.ticktext[-1] == f"≥ {top:.3g}" and f"0–{top:.3g}" in heat.colorbar.title.text
    # On request, the fixed 0–1 scale.
    full = attention_heatmap(a, names, names, full_range=True).data[0]
    assert (full.zmin, full.zmax) == (0, 1) and list(full.colorbar.ticktext) == ["0", "0.25", "0.5", "0.75", "1"]
    # A head whose rows each put everything on one token keeps its top at that weight, not at the 99th percentile.
    one_hot = np.eye(200, dtype=np.float32)
    assert colour_top(one_hot) == 1.0


def test_large_log_scale_heatmaps_are_sent_as_uint8_within_half_a_step_and_hover_the_weight():
    n = 200
    assert n * n > QUANTISE_ABOVE
    a = softmax_rows((1, n, n))[0]
    heat = attention_heatmap(a, [str(i) for i in range(n)], [str(i) for i in range(n)], log_scale=True).data[0]
    z = np.asarray(heat.z)
    assert z.dtype == np.uint8 and heat.zmax == 255
    with np.errstate(divide="ignore"):
        assert np.abs(z / 255 - np.clip((np.log10(a) + 4) / 4, 0, 1)).max() <= 0.5 / 255 + 1e-7
    # hover: the weight itself to three significant digits, not "≈ k/255"
    np.testing.assert_array_equal(heat.customdata, a)
    assert "%{customdata:.3g}" in heat.hovertemplate and "/255" not in heat.hovertemplate
    # A linear heatmap this large sends the weights themselves (lighter than uint8 colours plus weights).
    linear = attention_heatmap(a, [str(i) for i in range(n)], [str(i) for i in range(n)]).data[0]
    np.testing.assert_array_equal(linear.z, a)


def test_log_scale_colours_by_log10_and_hovers_the_weight():
    a = np.array([[1.0, 0.0], [0.01, 0.99]], np.float32)
    heat = attention_heatmap(a, ["a", "b"], ["a", "b"], log_scale=True).data[0]
    # 1 → top, 0.01 → halfway up four decades (1e-4 … 1), 0 → bottom
    np.testing.assert_allclose(heat.z, [[1, 0], [0.5, (np.log10(0.99) + 4) / 4]], atol=1e-6)
    np.testing.assert_array_equal(heat.customdata, a)
    assert list(heat.colorbar.ticktext) == ["0.0001", "0.001", "0.01", "0.1", "1"]
    assert "%{customdata:.3g}" in heat.hovertemplate


def test_masked_cells_are_covered_by_the_grey_shape_and_no_others():
    t = 6
    masked = np.triu(np.ones((t, t), bool), 1)
    fig = attention_heatmap(softmax_rows((1, t, t), causal=True)[0], list("abcdef"), list("abcdef"), masked=masked)
    (shape,) = fig.layout.shapes
    covered = np.array([[inside(shape.path, x, y) for x in range(t)] for y in range(t)])
    np.testing.assert_array_equal(covered, masked)
    assert "masked" in fig.layout.annotations[0].text


def test_overview_tiles_show_every_head_in_the_colour_scale():
    a = softmax_rows((L, H, 5, 7))
    fig = head_grid(a, selected=(1, 2), full_range=True)
    px = png_pixels(fig)
    assert px.shape == (L * 6 - 1, H * 8 - 1, 3)  # one white pixel between tiles
    for layer in range(L):
        for head in range(H):
            tile = px[layer * 6: layer * 6 + 5, head * 8: head * 8 + 7]
            assert np.abs(tile - colours(a[layer, head])).max() <= 2
    assert (px[5] == 255).all() and (px[:, 7] == 255).all()
    points = fig.data[1]
    np.testing.assert_array_equal(points.customdata, [[layer, head] for layer in range(L) for head in range(H)])
    # each point sits at its tile's centre
    assert (points.x[H + 2], points.y[H + 2]) == (2 * 8 + 3, 6 + 2)
    (rect,) = fig.layout.shapes
    assert rect.x0 < 2 * 8 <= 2 * 8 + 6 < rect.x1 and rect.y0 < 6 <= 6 + 4 < rect.y1


def test_overview_max_pools_long_texts_and_greys_fully_masked_blocks():
    n, tile = 150, 64
    a = softmax_rows((1, 1, n, n), causal=True)
    masked = np.triu(np.ones((n, n), bool), 1)
    px = png_pixels(head_grid(a, masked, tile=tile, full_range=True))
    b = -(-n // tile)  # the one block rule (core.weights.block_size): blocks of ceil(n / tile) tokens
    s = -(-n // b)
    assert px.shape == (s, s, 3)
    edges = list(range(0, n, b)) + [n]
    for i in range(0, s, 7):
        for j in range(0, s, 5):
            rows, cols = slice(edges[i], edges[i + 1]), slice(edges[j], edges[j + 1])
            if masked[rows, cols].all():
                np.testing.assert_array_equal(px[i, j], [217, 217, 217])
            else:
                assert np.abs(px[i, j] - colours(a[0, 0, rows, cols].max())).max() <= 2


def test_explorer_figures_for_one_head_the_mean_and_a_focus_token():
    t = encoder_trace()
    v = view(t)
    figs = explorer_figures(one_layer(v, 1), tiles(v.attn), 1, None, focus=2, direction="to")
    np.testing.assert_allclose(figs["detail"].data[0].z, t.attentions[1].mean(0), rtol=1e-6)
    assert figs["detail"].layout.title.text == "layer 1, mean of 3 heads"
    np.testing.assert_allclose(figs["focus"].data[0].y, t.attentions[1].mean(0)[2], rtol=1e-6)
    figs = explorer_figures(one_layer(v, 0), tiles(v.attn), 0, 2, focus=3, direction="from")
    np.testing.assert_array_equal(figs["focus"].data[0].y, t.attentions[0, 2, :, 3])
    np.testing.assert_array_equal(figs["focus_heads"].data[0].z, t.attentions[0, :, :, 3])
    assert figs["focus"].layout.xaxis.title.text == "query"


@pytest.mark.parametrize("options", [Options(), Options(hide_special=True, renorm=False),
                                     Options(hide_special=True, merge=True, threshold=0.05)])
@pytest.mark.parametrize("key", ["builtin:minilm", "builtin:lm"])
def test_a_layer_at_a_time_equals_every_weight_at_once(key, options, monkeypatch):
    """The page reads one layer's view and the overview's tiles layer by layer: the same numbers, labels, mask and
    overview image as the options applied to every weight at once, and no dense read (ATTNVIZ_MAX_DENSE_MB)."""
    model, text = attnviz.load(key), "The unbelievably soft cat sat on the mat, and it slept."
    ref = view(model.trace(text), options)  # every weight at once, of a trace of its own, before the limit
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "0.001")
    trace = model.trace(text)
    stack = trace.stack(None)
    with pytest.raises(ValueError, match="ATTNVIZ_MAX_DENSE_MB"):
        model.trace(text).weights.dense()  # the limit holds for this trace's kind
    for layer in range(trace.n_layers):
        got = layer_view(stack, layer, options)
        np.testing.assert_allclose(got.attn, ref.attn[layer:layer + 1], rtol=1e-6, atol=1e-7)
        assert (got.q_labels, got.k_labels, got.q_text) == (ref.q_labels, ref.k_labels, ref.q_text)
        np.testing.assert_array_equal(got.masked, ref.masked)
    grid = stack_tiles(stack, options)
    np.testing.assert_allclose(grid, tiles(ref.attn), rtol=1e-6, atol=1e-7)
    assert grid.shape[2:] == (min(64, len(ref.q_labels)), min(64, len(ref.k_labels)))
    np.testing.assert_array_equal(png_pixels(head_grid(grid, ref.masked, (1, 2))),
                                  png_pixels(head_grid(ref.attn, ref.masked, (1, 2))))


def test_focus_text_is_escaped_and_shaded_by_weight():
    tokens = ("[CLS]", "<script>", "&", "ok", "[SEP]")
    t = AttentionTrace(tokens=tokens, attentions=softmax_rows((1, 1, 5, 5)), special=[1, 0, 0, 0, 1],
                       word_ids=[-1, 0, 1, 2, -1])
    page = focus_html(view(t), 0, 0, 3, "to", full_range=True)
    assert "<script>" not in page and "&lt;script&gt;" in page and "&amp;" in page
    titles = [float(x) for x in re.findall(r'title="([\d.]+)', page)]
    alphas = [float(x) for x in re.findall(r"rgba\(33,113,181,([\d.]+)\)", page)]
    np.testing.assert_allclose(titles, t.attentions[0, 0, 3], atol=5e-5)
    np.testing.assert_allclose(alphas, t.attentions[0, 0, 3], atol=5e-4)
    assert page.count("outline") == 1
    # By default the shading runs to the head's own high quantile, as its heatmap's colours do.
    page = focus_html(view(t), 0, 0, 3, "to")
    alphas = [float(x) for x in re.findall(r"rgba\(33,113,181,([\d.]+)\)", page)]
    top = colour_top(t.attentions[0, 0])
    np.testing.assert_allclose(alphas, np.clip(t.attentions[0, 0, 3] / top, 0, 1), atol=5e-4)


def test_overview_tiles_of_diffuse_heads_are_not_blank():
    n = 300
    a = np.full((1, 2, n, n), 1 / n, np.float32)
    a[0, :, :, 7] *= 3  # one key stands out a little
    a /= a.sum(-1, keepdims=True)
    scaled, full = png_pixels(head_grid(a)), png_pixels(head_grid(a, full_range=True))
    white = np.array([255, 255, 255])
    assert (np.abs(full[:, :64] - white).max(-1) <= 12).all()  # on 0–1 the head is (almost) a white square
    assert (np.abs(scaled[:, :64] - white).max(-1) > 40).mean() > 0.9  # on its own range it shows


def test_minilm_at_512_tokens_fits_in_two_megabytes():
    """The issue's payload budget: every figure of the page for builtin:minilm at 512 tokens ≤ 2 MB of JSON."""
    trace = attnviz.trace("word " * 600)  # truncated to the model's 512 positions
    assert trace.n_tokens == 512
    v = view(trace)
    figs = explorer_figures(one_layer(v, 5), tiles(v.attn), 5, 11, focus=7)
    sizes = {name: len(fig.to_json()) for name, fig in figs.items()}
    assert sum(sizes.values()) <= 2_000_000, sizes
