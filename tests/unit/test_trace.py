"""AttentionTrace and Seq2SeqTrace: plain-word validation, read-only arrays, frozen records."""

import dataclasses
import pickle

import numpy as np
import pytest

from attnviz.core.trace import NORM_KEYS, AttentionTrace, Seq2SeqTrace

L, H, T, D = 2, 3, 4, 5
TOKENS = ("[CLS]", "hello", "world", "[SEP]")


def attention(L=L, H=H, Tq=T, Tk=T, seed=0):
    a = np.random.default_rng(seed).random((L, H, Tq, Tk))
    return a / a.sum(-1, keepdims=True)


def full(**kw) -> AttentionTrace:
    rng = np.random.default_rng(1)
    norms = {k: rng.random((L, H, T) if k == "value_norms" else (L, T)) for k in NORM_KEYS}
    args = dict(tokens=TOKENS, attentions=attention(), hidden_states=rng.random((L + 1, T, D)), norms=norms,
                special=[True, False, False, True], word_ids=[-1, 0, 1, -1], model="m", text="hello world")
    return AttentionTrace(**{**args, **kw})


def test_a_valid_trace_keeps_its_values_as_float32():
    src = attention()
    t = full(attentions=src)
    assert t.attentions.dtype == np.float32 and t.hidden_states.dtype == np.float32
    np.testing.assert_allclose(t.attentions, src, rtol=1e-7)
    assert (t.n_layers, t.n_heads, t.n_tokens) == (L, H, T)
    assert t.tokens == TOKENS and isinstance(t.tokens, tuple)
    assert set(t.norms) == set(NORM_KEYS)
    assert t.nbytes == sum(a.nbytes for a in (t.attentions, t.hidden_states, t.special, t.word_ids, *t.norms.values()))


def test_defaults_for_optional_fields():
    t = AttentionTrace(tokens=["a", "b", "c", "d"], attentions=attention())
    assert t.tokens == ("a", "b", "c", "d") and t.hidden_states is None and dict(t.norms) == {}
    assert t.special.tolist() == [False] * T and t.word_ids.tolist() == [0, 1, 2, 3]
    assert t.kind == "encoder" and t.truncated == 0


@pytest.mark.parametrize("kwargs,message", [
    (dict(attentions=np.zeros((H, T, T))), r"attentions must have 4 dimensions .* got shape \(3, 4, 4\)"),
    (dict(attentions=attention(Tq=5, Tk=5)), "attentions have 5×5 positions but there are 4 tokens"),
    (dict(attentions=attention(Tq=4, Tk=3)), "attentions have 4×3 positions but there are 4 tokens"),
    (dict(hidden_states=np.zeros((L, T, D))), r"hidden_states must be \(3, 4, D\) for 2 layers and 4 tokens"),
    (dict(hidden_states=np.zeros((L + 1, T + 1, D))), r"hidden_states must be \(3, 4, D\)"),
    (dict(norms={"attn_norm": np.zeros((L, T))}), "unknown norm statistic 'attn_norm'; known: attn_out"),
    (dict(norms={"ffn_out": np.zeros((L, T + 1))}), r"'ffn_out' must have shape \(2, 4\), got \(2, 5\)"),
    (dict(norms={"value_norms": np.zeros((L, T))}), r"'value_norms' must have shape \(2, 3, 4\)"),
    (dict(special=[True, False]), "special-token mask has 2 entries but there are 4 tokens"),
    (dict(word_ids=[0, 1, 2]), "word_ids has 3 entries but there are 4 tokens"),
    (dict(kind="seq2seq"), "kind must be one of"),
    (dict(tokens=(), attentions=np.zeros((L, H, 0, 0))), "a trace needs at least one token"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_wrong_shapes_are_refused_in_plain_words(kwargs, message):
    with pytest.raises(ValueError, match=message):
        full(**kwargs)


def test_arrays_are_read_only_copies():
    src = attention()
    t = full(attentions=src)
    src[0, 0, 0, 0] = 99.0  # the caller's array is not shared
    assert t.attentions[0, 0, 0, 0] != 99.0
    arrays = [t.attentions, t.hidden_states, t.special, t.word_ids, *t.norms.values()]
    for a in arrays:
        with pytest.raises(ValueError, match="read-only"):
            a[(0,) * a.ndim] = 1


def test_read_only_arrays_are_adopted_without_a_copy():
    src = attention().astype(np.float32)
    src.setflags(write=False)  # the caller gives the array up
    assert full(attentions=src).attentions is src
    wide = src.astype(np.float64)
    wide.setflags(write=False)
    assert full(attentions=wide).attentions.dtype == np.float32  # another dtype: converted, so copied


def test_trace_is_frozen():
    t = full()
    for name, value in [("tokens", ("x",)), ("attentions", attention()), ("truncated", 3), ("model", "other")]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(t, name, value)


def test_unpickled_copy_is_equal_and_read_only():
    """st.cache_data hands out unpickled copies: they must stay read-only."""
    t = full()
    u = pickle.loads(pickle.dumps(t))
    assert u.tokens == t.tokens and u.model == t.model and u.special.tolist() == t.special.tolist()
    np.testing.assert_array_equal(u.attentions, t.attentions)
    np.testing.assert_array_equal(u.norms["value_norms"], t.norms["value_norms"])
    for a in [u.attentions, u.hidden_states, u.special, u.word_ids, *u.norms.values()]:
        assert not a.flags.writeable


def seq2seq(**kw):
    encoder = full()
    decoder = AttentionTrace(tokens=("<s>", "hallo", "welt"), attentions=np.tril(attention(Tq=3, Tk=3)), kind="decoder")
    args = dict(encoder=encoder, decoder=decoder, cross_attentions=attention(Tq=3, Tk=T))
    return Seq2SeqTrace(**{**args, **kw})


def test_seq2seq_trace():
    s = seq2seq()
    assert s.kind == "encoder-decoder" and s.model == "m" and s.text == "hello world" and s.truncated == 0
    assert s.cross_attentions.shape == (L, H, 3, T) and s.cross_attentions.dtype == np.float32
    assert s.nbytes == s.encoder.nbytes + s.decoder.nbytes + s.cross_attentions.nbytes
    with pytest.raises(ValueError, match="read-only"):
        s.cross_attentions[0, 0, 0, 0] = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.generated = True
    u = pickle.loads(pickle.dumps(s))
    np.testing.assert_array_equal(u.cross_attentions, s.cross_attentions)
    assert not u.cross_attentions.flags.writeable and not u.decoder.attentions.flags.writeable


@pytest.mark.parametrize("kwargs,message", [
    (dict(cross_attentions=attention(Tq=T, Tk=3)), r"cross-attentions must be \(layers, heads, 3 target, 4 source"),
    (dict(cross_attentions=np.zeros((L, 3, T))), "cross-attentions must be"),
    (dict(cross_attentions=attention(H=H + 1, Tq=3, Tk=T)),
     "cross-attentions have 2 layers × 4 heads but the decoder has 2 × 3"),
    (dict(decoder=AttentionTrace(tokens=("a", "b", "c"), attentions=attention(Tq=3, Tk=3))), "must be causal"),
])
def test_seq2seq_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        seq2seq(**kwargs)
