"""Position information: the sinusoidal closed form, what each model family has, attention by offset."""

import math

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from attnviz.backends import load
from attnviz.backends.builtin import minilm_path
from attnviz.backends.positions import attention_by_offset, position_info, rotary_frequencies, similarity, sinusoidal


@pytest.mark.parametrize("T, D", [(50, 16), (7, 9), (600, 512)])
def test_sinusoidal_equals_closed_form(T, D):
    pe = sinusoidal(T, D)
    assert pe.shape == (T, D)
    for p, i in [(0, 0), (0, 1), (1, 0), (3, 2), (T - 1, D - 1), (T // 2, D // 2), (T - 1, 1)]:
        angle = p / 10000 ** (2 * (i // 2) / D)
        want = math.sin(angle) if i % 2 == 0 else math.cos(angle)
        assert pe[p, i] == pytest.approx(want, abs=1e-6), (p, i)


def test_sinusoidal_similarity_depends_on_distance_only():
    """PE(p)·PE(q) = Σ_i cos((p − q) ω_i) for even D: the same along every diagonal."""
    T, D = 64, 32
    dot = similarity(sinusoidal(T, D), "dot")
    omega = 10000.0 ** (-np.arange(0, D, 2) / D)
    for p, q in [(0, 0), (3, 10), (40, 7), (63, 0)]:
        assert dot[p, q] == pytest.approx(np.cos((p - q) * omega).sum(), abs=1e-4)
    cos = similarity(sinusoidal(T, D), "cosine")
    np.testing.assert_allclose(cos, dot / (D / 2), atol=1e-5)  # every position vector has norm √(D/2)
    with pytest.raises(ValueError, match="metric"):
        similarity(sinusoidal(T, D), "euclid")
    with pytest.raises(ValueError, match="at least one"):
        sinusoidal(0, 8)


def test_builtin_models():
    info = position_info(load("builtin:minilm"))
    want = load_file(minilm_path() / "model.safetensors")["embeddings.position_embeddings.weight"]
    assert info.kind == "learned" and info.frequencies is None
    np.testing.assert_array_equal(info.table, want)

    info = position_info(load("builtin:seed"))
    assert info.kind == "sinusoidal" and info.table.shape == (512, 512)
    assert info.table[100, 4] == pytest.approx(math.sin(100 / 10000 ** (4 / 512)), abs=1e-6)
    assert info.frequencies[2] == pytest.approx(10000 ** (-4 / 512))


def test_trained_model_shapes():
    """The seed's classifier and translator keep their embeddings inside the encoder."""
    from attnviz.nn import TextClassifier, TransformerConfig, Translator

    c = TransformerConfig(vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_layers=1, max_len=20, n_classes=2)
    learned = TextClassifier(TransformerConfig(**{**c.to_dict(), "positional": "learned"}))
    info = position_info(learned)
    assert info.kind == "learned"
    np.testing.assert_array_equal(info.table, learned.encoder.embeddings.positions.embedding.weight.detach().numpy())
    info = position_info(Translator(c))
    assert info.kind == "sinusoidal"
    np.testing.assert_allclose(info.table, sinusoidal(20, 16))


@pytest.fixture
def hf(tiny_backend):
    return tiny_backend


def test_gpt2_learned_table_is_wpe(hf, tiny_model):
    info = position_info(hf("gpt2"))
    want = load_file(tiny_model("gpt2") / "model.safetensors")["transformer.wpe.weight"]
    assert info.kind == "learned" and "wpe" in info.note
    np.testing.assert_array_equal(info.table, want)


def test_offset_tables_start_at_position_zero(hf, tiny_model):
    """RoBERTa's positions start after the padding index, BART's after an offset of 2."""
    weights = load_file(tiny_model("roberta") / "model.safetensors")
    table = next(v for k, v in weights.items() if k.endswith("position_embeddings.weight"))
    info = position_info(hf("roberta"))
    np.testing.assert_array_equal(info.table, table[2:])  # pad_token_id 1, so position 0 is row 2

    model = hf("bart")
    info = position_info(model)
    ids = torch.arange(5)[None]  # (1, 5)
    with torch.no_grad():
        rows = model.net.model.encoder.embed_positions(ids).numpy()[0]  # the model's own lookup of positions 0–4
    np.testing.assert_array_equal(info.table[:5], rows)


def test_llama_rotary_frequencies(hf):
    model = hf("llama")
    info = position_info(model)
    assert info.kind == "rotary" and info.table is None and "no position vector" in info.note
    np.testing.assert_allclose(info.frequencies, model.net.model.rotary_emb.inv_freq.numpy(), rtol=1e-6)

    # A Llama with base 500 and 8-wide heads: θ_i = 500^(−2i/8) from the config, as the model computes.
    import transformers as tf

    config = tf.LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, rope_parameters={"rope_type": "default", "rope_theta": 500.0},
    )  # fmt: skip
    net = tf.LlamaModel(config)
    info = position_info(net)
    np.testing.assert_allclose(info.frequencies, [500.0 ** (-2 * i / 8) for i in range(4)], rtol=1e-12)
    np.testing.assert_allclose(info.frequencies, net.rotary_emb.inv_freq.numpy(), rtol=1e-6)
    assert "base 500" in info.note
    np.testing.assert_allclose(rotary_frequencies(4, 100.0), [1.0, 0.1])


def test_t5_relative_bias_matches_the_models_own(hf):
    model = hf("t5")
    info = position_info(model)
    assert info.kind == "relative" and info.table.shape == (len(info.offsets), model.net.config.num_heads)
    T = 40
    attn = model.net.encoder.block[0].layer[0].SelfAttention
    with torch.no_grad():
        bias = attn.compute_bias(T, T)[0].numpy()  # (H, T, T): what the model adds to its scores
    row = {int(o): i for i, o in enumerate(info.offsets)}
    for q, k in [(0, 0), (0, 39), (39, 0), (10, 13), (20, 5)]:
        np.testing.assert_allclose(info.table[row[k - q]], bias[:, q, k], rtol=1e-6)


def test_marian_is_sinusoidal(hf):
    info = position_info(hf("marian"))
    assert info.kind == "sinusoidal" and "first half" in info.note
    D = info.table.shape[1]
    assert info.table[3, 1] == pytest.approx(math.sin(3 / 10000 ** (2 / D)), abs=1e-6)  # sines first, not interleaved


def _brute_offsets(a, keep):
    L, H, T, _ = a.shape
    out = {}
    for o in range(-(T - 1), T):
        pairs = [(q, q + o) for q in range(T) if 0 <= q + o < T and keep[q] and keep[q + o]]
        out[o] = np.mean([a[..., q, k] for q, k in pairs], axis=0) if pairs else np.full((L, H), np.nan)
    return out


def test_attention_by_offset_equals_brute_force():
    rng = np.random.default_rng(0)
    a = rng.random((2, 3, 7, 7))
    keep = np.array([False, True, True, True, False, True, True])
    for mask in (None, keep):
        offsets, means = attention_by_offset(a, mask)
        want = _brute_offsets(a, np.ones(7, bool) if mask is None else mask)
        assert list(offsets) == list(range(-6, 7))
        for i, o in enumerate(offsets):
            np.testing.assert_allclose(means[..., i], want[o], rtol=1e-12)
    offsets, means = attention_by_offset(np.tril(a), None, causal=True)
    assert offsets.max() == 0 and means.shape == (2, 3, 7)
    np.testing.assert_allclose(means[..., -1], np.diagonal(a, axis1=2, axis2=3).mean(-1))


def test_offsets_of_a_causal_trace(hf):
    trace = hf("gpt2").trace("The quick brown fox jumps over the lazy dog.")
    offsets, means = attention_by_offset(trace.attentions, causal=True)
    T = trace.n_tokens
    assert offsets[0] == -(T - 1) and offsets[-1] == 0
    # Over all queries the weights sum to T, and each offset o holds T − |o| of them.
    np.testing.assert_allclose((means * (T - np.abs(offsets))).sum(-1), T, rtol=1e-5)
