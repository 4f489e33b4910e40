"""Properties of the analyses on random attention (hypothesis): ranges, row sums, the layer recursions."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attnviz.analysis import attention_flow, difference, head_stats, match, residual_attention, rollout
from attnviz.core.trace import AttentionTrace

TOL = 1e-5  # float32 weights: rows sum to 1 within a few ulps


@st.composite
def attention(draw, max_layers=3, max_tokens=8):
    """(L, H, T, T) float32 softmax rows, causal or not, with sharp and flat heads alike."""
    L = draw(st.integers(1, max_layers))
    H = draw(st.integers(1, 3))
    T = draw(st.integers(1, max_tokens))
    causal = draw(st.booleans())
    logits = draw(arrays(np.float64, (L, H, T, T), elements=st.floats(-30, 30)))
    if causal:
        logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    a = np.exp(logits - logits.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32), causal


@st.composite
def traces(draw):
    attn, causal = draw(attention())
    T = attn.shape[-1]
    tokens = draw(st.lists(st.sampled_from(["[CLS]", "[SEP]", "the", ".", ",", "##s", "cat"]), min_size=T, max_size=T))
    special = [t in ("[CLS]", "[SEP]") for t in tokens]
    return AttentionTrace(tokens=tokens, attentions=attn, special=special, kind="decoder" if causal else "encoder")


@settings(max_examples=150, deadline=None)
@given(traces())
def test_statistics_stay_in_their_ranges(trace):
    s = head_stats(trace)
    T = trace.n_tokens
    shape = (trace.n_layers, trace.n_heads)
    assert all(v.shape == shape and np.isfinite(v).all() for v in s.values())
    assert (s["entropy"] >= -TOL).all() and (s["entropy"] <= np.log(T) + TOL).all()
    assert (s["entropy_norm"] >= -TOL).all() and (s["entropy_norm"] <= 1 + TOL).all()
    assert (s["distance"] >= 0).all() and (s["distance"] <= T - 1 + TOL).all()
    for name in ("cls", "sep", "punct", "prev", "self", "next"):
        assert (s[name] >= 0).all() and (s[name] <= 1 + TOL).all(), name
    assert (s["cls"] + s["sep"] + s["punct"] <= 1 + TOL).all()  # disjoint sets of keys
    assert (s["max"] >= 1 / T - TOL).all() and (s["max"] <= 1 + TOL).all()
    if trace.kind == "decoder":
        assert (s["next"] == 0).all()  # a causal head never sees the next token


@settings(max_examples=150, deadline=None)
@given(attention(max_layers=4))
def test_rollout_rows_are_distributions_built_layer_by_layer(sample):
    attn, causal = sample
    r = rollout(attn)
    assert r.shape == (attn.shape[0], *attn.shape[2:])
    assert (r >= 0).all()
    np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-9)
    a = residual_attention(attn)
    np.testing.assert_allclose(r[0], a[0], atol=1e-12)
    for layer in range(1, len(r)):
        np.testing.assert_allclose(r[layer], a[layer] @ r[layer - 1], atol=1e-12)
    if causal:
        assert not np.triu(r, 1).any()  # no position receives from a later token


@settings(max_examples=60, deadline=None)
@given(attention(max_layers=3, max_tokens=6), st.data())
def test_flow_is_bounded_and_follows_the_edges(sample, data):
    attn, causal = sample
    T = attn.shape[-1]
    target = data.draw(st.integers(0, T - 1))
    f = attention_flow(attn, target)
    a = residual_attention(attn)
    assert f.shape == (attn.shape[0], T)
    assert (f >= 0).all() and (f <= 1 + TOL).all()  # the target takes in at most its row sum, 1
    np.testing.assert_allclose(f[0], a[0, target], atol=TOL)  # one layer: the edge itself
    if len(a) > 1:  # two layers: disjoint two-edge paths through each middle token
        np.testing.assert_allclose(f[1], np.minimum(a[0], a[1, target][:, None]).sum(0), atol=TOL)
    if causal:
        assert (f[:, target + 1:] <= TOL).all()  # later tokens cannot reach the target


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from("abcde"), min_size=1, max_size=10), st.lists(st.sampled_from("abcde"), min_size=1, max_size=10))
def test_matched_tokens_are_equal_and_in_order(a, b):
    ia, ib = match(a, b)
    assert [a[i] for i in ia] == [b[j] for j in ib]
    assert (np.diff(ia) > 0).all() and (np.diff(ib) > 0).all()
    rng = np.random.default_rng(len(a) * 11 + len(b))
    w = rng.random((len(a), len(a)))
    same = difference(w, w, a, a)
    assert same.index_a.tolist() == list(range(len(a))) and not same.diff.any()
