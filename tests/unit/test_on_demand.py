"""Attention on demand: every head computed again from the captured queries and keys equals the model's own
eager weights, for every attention the families have (sliding windows, soft-capping, relative bias, cross), and
``head``/``row``/``received``/``pooled`` agree with the dense weights; long texts never hold L·H·T² floats."""

import pickle

import numpy as np
import pytest
import torch
import transformers as tf
from tiny_models import WINDOWED

import attnviz
from attnviz.backends.hf import load_hf

TEXT = "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again."


@pytest.mark.parametrize("family", WINDOWED)
def test_windowed_soft_capped_and_biased_decoders_equal_their_eager_selves(tiny_backend, tiny_model, family):
    """Mistral slides a window of 5, Gemma 2 slides it on alternate layers, scales queries by
    query_pre_attn_scalar and soft-caps its logits, Qwen2 has query/key biases: all within 1e-5 of eager."""
    backend = tiny_backend(family)
    assert backend.capture == "interface"
    trace = backend.trace(TEXT)
    eager = tf.AutoModelForCausalLM.from_pretrained(tiny_model(family), attn_implementation="eager").eval()
    ids = backend.tokenizer(TEXT).input_ids
    with torch.inference_mode():
        out = eager(torch.tensor([ids]), output_attentions=True, output_hidden_states=True)
    want = torch.cat(out.attentions).numpy()  # (L, H, T, T)
    T = trace.n_tokens
    assert T == len(ids) > 10  # longer than the window, so the window shows
    np.testing.assert_allclose(trace.attentions, want, atol=1e-5)
    np.testing.assert_allclose(trace.hidden_states, torch.cat(out.hidden_states).numpy(), atol=1e-5)
    np.testing.assert_allclose(trace.attentions.sum(-1), 1.0, atol=1e-5)
    for layer, head, key in [(0, 0, 0), (0, 1, T // 2), (1, 3, T - 1)]:  # a key's column, from row normalisers
        np.testing.assert_allclose(trace.column(layer, head, key), want[layer, head, :, key], atol=1e-6)
    np.testing.assert_allclose(trace.column(1, None, 3), want[1, :, :, 3].mean(0), atol=1e-6)
    assert not np.triu(trace.attentions, 1).any()  # causal: exact zeros above the diagonal
    if family != "qwen2":
        layers = [0] if family == "gemma2" else [0, 1]  # Gemma 2's second layer attends to everything
        far = np.tril(np.ones((T, T), bool), -5)  # keys 5 or more positions back: outside the window
        assert not trace.attentions[layers][..., far].any()
        assert family != "gemma2" or trace.attentions[1][..., far].any()


def test_head_row_received_and_pooled_agree_with_the_dense_weights():
    trace = attnviz.trace(TEXT * 3, "builtin:minilm")
    dense = trace.attentions.astype(np.float64)
    T = trace.n_tokens
    for layer, head in [(0, 0), (3, 7), (5, 11)]:
        np.testing.assert_allclose(trace.head(layer, head), dense[layer, head], atol=1e-6)
        np.testing.assert_allclose(trace.row(layer, head, 5), dense[layer, head, 5], atol=1e-6)
        np.testing.assert_allclose(trace.received(layer, head), dense[layer, head].sum(0), atol=1e-5)
        np.testing.assert_allclose(trace.column(layer, head, 5), dense[layer, head, :, 5], atol=1e-6)
    np.testing.assert_allclose(trace.head(2, None), dense[2].mean(0), atol=1e-6)
    np.testing.assert_allclose(trace.row(2, None, 0), dense[2, :, 0].mean(0), atol=1e-6)
    for size in (7, 16, T + 5):
        block = -(-T // size)  # ceil(T / size) positions a block, the last one shorter
        edges = [*range(0, T, block), T]
        for reduce, fn in (("max", np.max), ("mean", np.mean)):
            pooled = trace.pooled(size, reduce=reduce)
            assert pooled.shape == (6, 12, len(edges) - 1, len(edges) - 1)
            want = np.array([[fn(dense[..., a:b, c:d], axis=(-2, -1)) for c, d in zip(edges, edges[1:])]
                             for a, b in zip(edges, edges[1:])])  # (s, s, L, H)
            np.testing.assert_allclose(pooled, want.transpose(2, 3, 0, 1), atol=1e-6)


def test_out_of_range_indices_and_unknown_stacks_are_refused_in_plain_words():
    trace = attnviz.trace(TEXT, "builtin:minilm")
    with pytest.raises(ValueError, match=r"layer 6 is out of range for builtin:minilm \(0–5\)"):
        trace.head(6, 0)
    with pytest.raises(ValueError, match=r"head -1 is out of range"):
        trace.head(0, -1)
    with pytest.raises(ValueError, match="query 999 is out of range"):
        trace.row(0, 0, 999)
    with pytest.raises(ValueError, match="key -1 is out of range"):
        trace.column(0, 0, -1)
    with pytest.raises(ValueError, match="one attention stack, not 'cross'"):
        trace.head(0, 0, "cross")
    with pytest.raises(ValueError, match="reduce must be 'max' or 'mean'"):
        trace.pooled(8, reduce="median")


def test_every_weight_at_once_is_refused_past_the_budget_with_a_pointer_to_head(monkeypatch):
    trace = attnviz.trace(TEXT, "builtin:minilm")
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "0.01")
    with pytest.raises(ValueError, match=r"over the 0 MB limit \(ATTNVIZ_MAX_DENSE_MB\).*trace.head\(layer, head\)"):
        trace.attentions
    assert trace.head(1, 1).shape == (trace.n_tokens, trace.n_tokens)  # one head still comes


@pytest.mark.parametrize("family", ["t5", "bart", "marian", "encoder-decoder"])
def test_encoder_decoder_stacks_by_name(tiny_backend, family):
    trace = tiny_backend(family).trace(TEXT, target="A fox jumps over a dog.")
    assert trace.capture == "interface"
    np.testing.assert_allclose(trace.head(1, 2, "cross"), trace.cross_attentions[1, 2], atol=1e-7)
    np.testing.assert_allclose(trace.head(1, 2, "decoder"), trace.decoder.attentions[1, 2], atol=1e-7)
    np.testing.assert_allclose(trace.head(1, 2), trace.encoder.attentions[1, 2], atol=1e-7)  # encoder by default
    for side in ("encoder", "decoder", "cross"):  # T5's relative bias, a causal decoder, target queries over source keys
        dense = trace.stack(side).weights.dense()
        np.testing.assert_allclose(trace.column(1, 2, 3, side), dense[1, 2, :, 3], atol=1e-6)
        np.testing.assert_allclose(trace.column(0, None, 0, side), dense[0, :, :, 0].mean(0), atol=1e-6)
    assert trace.pooled(4, "cross").shape[2:] == (4, 4)
    with pytest.raises(ValueError, match="stack must be one of encoder, decoder, cross"):
        trace.head(0, 0, "self")


def test_an_on_demand_trace_pickles_and_stays_read_only():
    trace = attnviz.trace(TEXT, "builtin:seed")
    copy = pickle.loads(pickle.dumps(trace))
    np.testing.assert_array_equal(copy.head(3, 2), trace.head(3, 2))
    assert copy.capture == "interface" and not copy.attentions.flags.writeable


def float64_head(layer_qk, head: int) -> np.ndarray:
    """softmax(q kᵀ · scaling) under the layer's causal mask, in float64, straight from the captured q and k."""
    H, Tq, Tk = layer_qk.shape
    q = layer_qk.q[head].double()
    k = layer_qk.k[head // (H // layer_qk.k.shape[0])].double()
    scores = (q @ k.T) * layer_qk.scaling
    if layer_qk.causal:
        scores = scores.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, -1).numpy()


def check_long(trace, causal: bool, heads) -> None:
    """Row sums, causal zeros and a few heads against float64, tile by tile (never every head at once)."""
    T = trace.n_tokens
    for layer, head in heads:
        w = trace.head(layer, head)
        assert w.shape == (T, T) and w.dtype == np.float32
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-4)
        if causal:
            assert not np.triu(w, 1).any()
        np.testing.assert_allclose(w, float64_head(trace.weights.layers[layer], head), atol=1e-5)
        del w


def test_the_seed_encoder_takes_8192_tokens_on_demand():
    """builtin:seed has sinusoidal positions: no position limit. At 8,192 tokens its 6 × 8 heads would be
    12.9 GB of weights; the trace holds queries and keys (~200 MB) and computes heads when asked."""
    text = "attention " * 8190
    trace = attnviz.trace(text, "builtin:seed")
    assert trace.n_tokens >= 8192 and trace.truncated == 0
    assert trace.nbytes < 2**30  # no (L, H, T, T) array anywhere
    check_long(trace, causal=False, heads=[(0, 0), (5, 7)])
    with pytest.raises(ValueError, match="ATTNVIZ_MAX_DENSE_MB"):
        trace.attentions


def test_a_long_context_llama_takes_8192_tokens_on_demand(tmp_path):
    """A tiny Llama with 16,384 rotary positions, loaded through the path users use."""
    from tiny_models import tokenizer

    tok = tokenizer("llama")
    tok.model_max_length = 16384
    config = tf.LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        tf.LlamaForCausalLM(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    backend = load_hf(str(tmp_path))
    assert backend.capture == "interface" and backend.max_tokens == 16384
    trace = backend.trace("the quick brown fox " * 2100)
    assert trace.n_tokens >= 8192
    check_long(trace, causal=True, heads=[(0, 0), (1, 3)])
    np.testing.assert_allclose(trace.received(1, 3).sum(), trace.n_tokens, rtol=1e-4)  # every row gives 1


@pytest.mark.parametrize("key", ["builtin:minilm", "builtin:seed", "builtin:classifier", "builtin:translator"])
def test_builtin_models_record_what_their_own_weights_say(key):
    """Inside a trace attnviz's modules run SDPA and keep q and k; the weights computed from them equal the
    weights the same modules return outside a trace (the tutorial's softmax(q kᵀ/√d_k)), within 1e-5."""
    backend = attnviz.load(key)
    text = "the film was not bad at all , said the old man on friday the 5th of march 2021"
    trace = backend.trace(text)
    assert trace.capture == "interface"
    with torch.inference_mode():
        if key == "builtin:translator":
            src = torch.tensor([backend.source.ids(list(trace.encoder.tokens))])
            _, enc, dec = backend.net(src, torch.tensor([[backend.target.stoi[t] for t in trace.decoder.tokens]]))
            pairs = [(enc.attentions, "encoder"), (dec.attentions, "decoder"), (dec.cross_attentions, "cross")]
        else:
            ids = torch.tensor([backend.source.ids(list(trace.tokens))]) if key == "builtin:classifier" \
                else torch.tensor([backend.tokenizer(text).input_ids])
            out = backend.net(ids)
            pairs = [((out[1] if key == "builtin:classifier" else out).attentions, None)]
    for own, stack in pairs:
        want = torch.cat(own).numpy()  # (L, H, Tq, Tk)
        for layer in range(want.shape[0]):
            for head in range(want.shape[1]):
                np.testing.assert_allclose(trace.head(layer, head, stack), want[layer, head], atol=1e-5)


@pytest.mark.parametrize("kind", ["plain", "causal window", "softcap bias", "mask"])
def test_a_keys_column_from_each_rows_normaliser_equals_the_weights(kind):
    """LayerQK.column: one key's scores against each row's normaliser equal that key's column of the softmaxed
    weights, with grouped-query keys, a causal window, soft-capping with a relative bias, and a mask that hides
    one query row's every key (its column entries are 0, not NaN)."""
    from attnviz.core.weights import LayerQK

    g = torch.Generator().manual_seed(0)
    H, Tq, Tk, Dh = 4, 9, 12, 8
    q, k = torch.randn(H, Tq, Dh, generator=g) * 2, torch.randn(2, Tk, Dh, generator=g) * 2
    extra = {
        "plain": {},
        "causal window": dict(causal=True, window=4),
        "softcap bias": dict(softcap=5.0, bias=torch.randn(H, Tq + Tk - 1, generator=g)),
        "mask": dict(mask=torch.rand(1, Tq, Tk, generator=g) > 0.3),
    }[kind]
    if kind == "mask":
        extra["mask"][0, 4] = False  # row 4 sees no key
    layer = LayerQK(q, k, Dh ** -0.5, **extra)
    want = layer.weights(list(range(H)), 0, Tq)  # (H, Tq, Tk)
    norm = layer.normaliser(list(range(H)), 0, Tq)  # (2, H, Tq)
    some = layer.normaliser([3, 0], 2, 7)  # any heads and rows: the same, up to the band's summing order
    torch.testing.assert_close(some, norm[:, [3, 0], 2:7], rtol=1e-6, atol=1e-6)
    for key in range(Tk):
        got = layer.column([3, 0], key, norm[:, [3, 0]])
        np.testing.assert_allclose(got, want[[3, 0], :, key], rtol=1e-6, atol=1e-7, err_msg=f"key {key}")
    if kind == "mask":
        assert not want[:, 4].any() and torch.isneginf(norm[1, :, 4]).all()
