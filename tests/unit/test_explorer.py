"""The explorer model (figures/explorer.py), the one the app's Attention page and the notebook both draw: its numbers
are the trace's own weights (exact heads, windows, rows and columns), its pooled blocks follow the one block rule
(ceil(T / size) tokens a block, whole groups of detail blocks for the overview) by max and by mean, and its causal
masks are where the weights are 0; for a short and a long text of an encoder (builtin:seed) and a decoder (a tiny
Llama with long positions)."""

import numpy as np
import pytest

import attnviz
from attnviz.analysis.long import survey
from attnviz.core.tokens import labels
from attnviz.figures.explorer import CELLS, DETAIL, WINDOW_MAX, Explorer, head_name, is_long, overview_size
from tiny_models import long_llama

WORDS = "the of and river stone cloud light paper window garden music water field house".split()
TEXT = " ".join(WORDS[i * 7 % len(WORDS)] for i in range(400))


def blocks_ref(a: np.ndarray, b: int, fn) -> np.ndarray:
    """(..., ceil(Tq / b), ceil(Tk / b)): ``fn`` over every b × b block of ``a`` (..., Tq, Tk), the last shorter."""
    Tq, Tk = a.shape[-2:]
    return np.stack([np.stack([fn(a[..., i:i + b, j:j + b], axis=(-2, -1)) for j in range(0, Tk, b)], -1)
                     for i in range(0, Tq, b)], -2)


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    return {"encoder": attnviz.load("builtin:seed"), "decoder": attnviz.load(long_llama(tmp_path_factory.mktemp("llama")))}


@pytest.fixture(scope="module", params=[("encoder", 40), ("encoder", 300), ("decoder", 40), ("decoder", 300)],
                ids=lambda p: f"{p[0]}-{p[1]}")
def traced(request, backends):
    kind, n = request.param
    trace = backends[kind].trace(TEXT, max_tokens=n)
    assert trace.n_tokens == n and trace.kind == kind
    return trace


def test_the_constants_threshold_and_head_name():
    assert (CELLS, DETAIL, WINDOW_MAX) == (256, 256, 256)
    assert not is_long(256) and is_long(257) and is_long(257, 256) and not is_long(16, 4096)
    assert head_name(3, 7, 12) == "layer 3, head 7" and head_name(3, None, 12) == "layer 3, mean of 12 heads"


def test_sizes_labels_heads_windows_and_lines_are_the_traces_own(traced):
    ex = Explorer(traced)
    A = traced.attentions  # (L, H, T, T)
    L, H, T, _ = A.shape
    assert (ex.L, ex.H, ex.Tq, ex.Tk, ex.name, ex.causal) == (L, H, T, T, "self", traced.kind == "decoder")
    assert ex.long == (T > CELLS) and ex.q_labels == labels(traced.tokens) == ex.k_labels
    assert ex.head_name(1, None) == f"layer 1, mean of {H} heads"
    np.testing.assert_array_equal(ex.head(1, 2), A[1, 2])
    np.testing.assert_allclose(ex.head(1, None), A[1].mean(0), rtol=1e-6, atol=1e-9)
    start, stop = T // 3, T // 3 + min(WINDOW_MAX, 64)
    np.testing.assert_allclose(ex.window(1, 2, start, stop), traced.head(1, 2)[start:stop, start:stop],
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ex.window(0, None, T - 5, T + 50), A[0].mean(0)[T - 5:, T - 5:], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ex.line(1, 2, 7, "to"), A[1, 2, 7], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ex.line(1, None, 7, "from"), A[1, :, :, 7].mean(0), rtol=1e-5, atol=1e-9)
    with pytest.raises(ValueError, match="direction"):
        ex.line(1, 2, 7, "sideways")


def test_pooled_blocks_follow_the_one_rule_by_max_and_mean(traced):
    ex = Explorer(traced)
    A = traced.attentions
    L, H, T, _ = A.shape
    b = -(-T // DETAIL)
    assert ex.block() == (b, b) and ex.starts().tolist() == list(range(0, T, b))
    g = -(-(-(-T // b)) // overview_size(L, H))  # detail blocks per overview block
    assert ex.block("overview") == (b * g, b * g)
    for reduce, fn, rtol in (("max", np.max, 1e-6), ("mean", np.mean, 1e-5)):
        np.testing.assert_allclose(ex.pooled("detail", reduce), blocks_ref(A, b, fn), rtol=rtol, atol=1e-9)
        np.testing.assert_allclose(ex.pooled("overview", reduce), blocks_ref(A, b * g, fn), rtol=rtol, atol=1e-9)
        np.testing.assert_allclose(ex.block_map(1, 2, reduce), blocks_ref(A[1, 2], b, fn), rtol=rtol, atol=1e-9)
        # The layer's mean: the blocks of the heads' mean (not the mean of each head's block max).
        np.testing.assert_allclose(ex.block_map(1, None, reduce), blocks_ref(A[1].mean(0), b, fn), rtol=rtol,
                                   atol=1e-9)


def test_causal_masks_are_where_the_weights_are_zero(traced):
    ex = Explorer(traced)
    A = traced.attentions
    T = A.shape[2]
    if traced.kind == "encoder":
        assert ex.mask(0, T, 0, T) is None and ex.block_mask() is None
        return
    zero = (A == 0).all((0, 1))  # (T, T): no head gives these pairs any weight
    np.testing.assert_array_equal(ex.mask(0, T, 0, T), zero)
    np.testing.assert_array_equal(ex.mask(5, 30, 10, 40), zero[5:30, 10:40])
    for grid in ("detail", "overview"):
        b = ex.block(grid)[0]
        np.testing.assert_array_equal(ex.block_mask(grid), blocks_ref(zero, b, np.all))


def test_a_survey_read_during_the_forward_gives_the_same_model(backends):
    """The long page's explorer reads the survey; the notebook's reads the trace: the same blocks and lines."""
    trace = backends["decoder"].trace(TEXT, max_tokens=300)
    L, H = trace.weights.shape[:2]
    read = survey(trace.weights, overview_size(L, H), DETAIL, keys=(1,))
    page, book = Explorer(trace, survey=read), Explorer(trace)
    assert page.block("overview") == book.block("overview") == (read.block("overview"),) * 2
    np.testing.assert_array_equal(page.starts("overview"), read.starts["overview"])
    for grid in ("detail", "overview"):
        for reduce in ("max", "mean"):
            np.testing.assert_allclose(page.pooled(grid, reduce), book.pooled(grid, reduce), rtol=1e-5, atol=1e-9)
    for head in (3, None):
        np.testing.assert_allclose(page.block_map(1, head), book.block_map(1, head), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(page.line(1, head, 1, "from"), book.line(1, head, 1, "from"), rtol=1e-5, atol=1e-9)
