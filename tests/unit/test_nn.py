"""The built-in transformer against PyTorch's own modules, and the seed's bugs staying fixed.

Every comparison copies weights into a ``torch.nn`` reference module and holds to 1e-5 (float32).
"""

import ast
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from attnviz.capture.record import record
from attnviz.capture.hooks import heads_masked

from attnviz.nn import (
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionwiseFeedForward,
    SinusoidalPositions,
    TextClassifier,
    TransformerConfig,
    Translator,
    causal_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)

TOL = dict(atol=1e-5, rtol=1e-5)
D, H, F_, B = 32, 4, 64, 2


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    with torch.no_grad():
        yield


def close(a, b, **tol):
    torch.testing.assert_close(a, b, **(tol or TOL))


# ---------------------------------------------------------------- scaled dot-product attention


def qkv(Tq=5, Tk=7, Dh=8):
    return torch.randn(B, H, Tq, Dh), torch.randn(B, H, Tk, Dh), torch.randn(B, H, Tk, Dh)


def padding(lengths, T):
    """(B, 1, 1, T) boolean key mask, True for the first ``lengths[b]`` positions."""
    return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]


def reference_weights(q, k, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return scores.softmax(-1)


@pytest.mark.parametrize("case", ["none", "padding", "causal"])
def test_sdpa_matches_torch(case):
    Tk = 5 if case == "causal" else 7
    q, k, v = qkv(5, Tk)
    mask = {"none": None, "padding": padding([7, 4], Tk), "causal": causal_mask(Tk)}[case]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(out, want)
    close(w, reference_weights(q, k, mask))
    close(w.sum(-1), torch.ones(B, H, 5))
    if mask is not None:
        assert (w[~mask.expand_as(w)] == 0).all()


def test_causal_upper_triangle_is_exactly_zero():
    q, k, v = qkv(6, 6)
    _, w = scaled_dot_product_attention(q, k, v, causal_mask(6))
    upper = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (w[..., upper] == 0).all()
    assert (w[..., ~upper] > 0).all()


def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v = qkv(4, 6)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert (w[:, :, 2] == 0).all() and (out[:, :, 2] == 0).all()
    keep = [0, 1, 3]  # the other rows are untouched
    close(out[:, :, keep], F.scaled_dot_product_attention(q[:, :, keep], k, v))


def test_recorded_attention_gives_the_same_output_and_weights(mha_pair):
    """Inside ``record`` MultiHeadAttention runs torch's SDPA and hands q, k to the recorder; the weights
    computed from them again equal the ones it returns outside ``record``, and so does the output."""
    ours, _ = mha_pair
    x = torch.randn(1, 6, D)
    mask = torch.ones(1, 1, 1, 6, dtype=torch.bool)
    mask[..., 4:] = False  # padding keys
    holder = nn.ModuleDict({"attn": ours})
    for causal in (False, True):
        with torch.inference_mode():
            out, w = ours(x, x, x, mask, causal=causal)
            with record(holder) as rec:
                rec_out, none = ours(x, x, x, mask, causal=causal)
        assert none is None
        close(rec_out, out)
        got = torch.tensor(rec.weights().dense()[0])  # (H, T, T)
        close(got, w[0])


def test_scaling_is_by_head_width_not_model_width():
    """The seed divides by √embed_size; the paper (and torch) by √d_k of a head."""
    q, k, v = qkv(5, 5, Dh=8)
    _, w = scaled_dot_product_attention(q, k, v)
    seed_w = (q @ k.transpose(-2, -1) / math.sqrt(8 * H)).softmax(-1)
    assert (w - seed_w).abs().max() > 1e-2


# ---------------------------------------------------------------- multi-head attention


@pytest.fixture
def mha_pair():
    theirs = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():  # torch initialises the biases to 0: make them count
        theirs.in_proj_bias.normal_()
        theirs.out_proj.bias.normal_()
    return MultiHeadAttention(D, H).eval().load_from_torch(theirs), theirs


@pytest.mark.parametrize("Tq,Tk", [(6, 6), (3, 8)], ids=["self", "cross"])
@pytest.mark.parametrize("padded", [False, True], ids=["", "key-padding"])
def test_multihead_attention_matches_torch(mha_pair, Tq, Tk, padded):
    ours, theirs = mha_pair
    x, mem = torch.randn(B, Tq, D), torch.randn(B, Tk, D)
    kv = x if Tq == Tk else mem
    lengths = [Tk, Tk - 3] if padded else [Tk, Tk]
    pad = ~padding(lengths, Tk)[:, 0, 0]  # (B, Tk), True = ignore (torch's convention)
    out, w = ours(x, kv, kv, padding(lengths, Tk) if padded else None)
    want, want_w = theirs(x, kv, kv, key_padding_mask=pad if padded else None,
                          need_weights=True, average_attn_weights=False)
    assert w.shape == (B, H, Tq, Tk)
    close(out, want)
    close(w, want_w)
    close(w.sum(-1), torch.ones(B, H, Tq))
    assert (w[1, :, :, Tk - 3:] == 0).all() == padded


def test_multihead_attention_uses_head_width_scaling(mha_pair):
    ours, _ = mha_pair
    x = torch.randn(B, 6, D)
    _, w = ours(x, x, x)
    q, k = ours._split(ours.q_proj(x)), ours._split(ours.k_proj(x))
    seed_w = (q @ k.transpose(-2, -1) / math.sqrt(D)).softmax(-1)  # the seed's √embed_size
    assert (w - seed_w).abs().max() > 1e-2


def test_head_mask_removes_a_head(mha_pair):
    """Zeroing head h equals torch's layer with head h's columns of W_O zeroed."""
    ours, theirs = mha_pair
    x, h = torch.randn(B, 6, D), 2
    head_mask = torch.ones(H)
    head_mask[h] = 0
    with heads_masked([ours.out_proj], head_mask[None]):
        out, _ = ours(x, x, x)
    with torch.no_grad():
        theirs.out_proj.weight[:, h * (D // H):(h + 1) * (D // H)] = 0
    close(out, theirs(x, x, x)[0])


def test_value_norms_equal_direct_computation(mha_pair):
    ours, theirs = mha_pair
    x, Dh = torch.randn(B, 5, D), D // H
    wv, bv = theirs.in_proj_weight[2 * D:], theirs.in_proj_bias[2 * D:]
    v = x @ wv.T + bv  # (B, T, D)
    want = torch.stack(
        [(v[..., h * Dh:(h + 1) * Dh] @ theirs.out_proj.weight[:, h * Dh:(h + 1) * Dh].T).norm(dim=-1) for h in range(H)],
        dim=1,
    )  # (B, H, T)
    close(ours.value_norms(x), want)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(30, 4)


# ---------------------------------------------------------------- LayerNorm, FFN, positions


@pytest.mark.parametrize("eps", [1e-12, 1e-6, 1e-5, 1e-2, 1.0])
def test_layer_norm_is_the_papers_formula(eps):
    """γ · (x − mean) / √(var + eps) + β with the biased variance, computed in float64 here."""
    ln = LayerNorm(D, eps)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(B, 5, D) * 3 + 1
    x64, g, b = x.double(), ln.weight.double(), ln.bias.double()
    var = x64.var(-1, unbiased=False, keepdim=True)
    close(ln(x), (g * (x64 - x64.mean(-1, keepdim=True)) / torch.sqrt(var + eps) + b).float())
    torch_ln = nn.LayerNorm(D, eps)
    torch_ln.load_state_dict(ln.state_dict())
    close(ln(x), torch_ln(x))


def test_layer_norm_is_not_the_seeds_formula():
    """The seed divides by (unbiased std + eps): off by √(D/(D-1)) from the real LayerNorm."""
    x = torch.randn(B, 5, 8)
    ln = LayerNorm(8, 1e-6)
    seed = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6)
    assert (ln(x) - seed).abs().max() > 1e-2
    close(ln(x).std(-1, unbiased=False), torch.ones(B, 5))


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
def test_feed_forward_closed_form(activation):
    ffn = PositionwiseFeedForward(D, F_, activation).eval()
    x = torch.randn(B, 5, D)
    h = (x @ ffn.fc1.weight.T + ffn.fc1.bias).double()
    act = {
        "relu": h.clamp(min=0),
        "gelu": 0.5 * h * (1 + torch.erf(h / math.sqrt(2))),
        "gelu_tanh": 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3))),
    }[activation]
    close(ffn(x), (act.float() @ ffn.fc2.weight.T + ffn.fc2.bias))


def test_feed_forward_rejects_unknown_activation():
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        PositionwiseFeedForward(D, F_, "swish")


@pytest.mark.parametrize("Dm", [16, 7])
def test_sinusoidal_encoding_closed_form(Dm):
    pe = sinusoidal_encoding(50, Dm)
    assert pe.shape == (50, Dm) and pe.dtype == torch.float32
    for pos in (0, 1, 17, 49):
        for i in range(Dm):
            angle = pos / 10000 ** ((i - i % 2) / Dm)
            want = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert abs(pe[pos, i].item() - want) < 1e-6, (pos, i)
    close(SinusoidalPositions(64, Dm)(9), pe[:9])


# ---------------------------------------------------------------- layers and stacks vs torch.nn.Transformer*


def copy_linear(ours, theirs):
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer):
    with torch.no_grad():
        ours.self_attn.load_from_torch(theirs.self_attn)
        for mine, src in ((ours.ffn.fc1, theirs.linear1), (ours.ffn.fc2, theirs.linear2),
                          (ours.sub1.norm, theirs.norm1), (ours.sub2.norm, theirs.norm2)):
            copy_linear(mine, src)


def randomise(module):
    """Non-trivial biases and LayerNorm affines, so that a wrong mapping shows."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "bias" in name or "norm" in name:
                p.normal_(0.0 if "bias" in name else 1.0, 0.3)
    return module.eval()


def torch_encoder_layer(activation, norm_first):
    return randomise(nn.TransformerEncoderLayer(D, H, F_, dropout=0.0, activation=activation,
                                                batch_first=True, norm_first=norm_first))


ARCHS = pytest.mark.parametrize(
    "activation,norm_first", [("relu", False), ("gelu", False), ("relu", True), ("gelu", True)],
    ids=["post-relu", "post-gelu", "pre-relu", "pre-gelu"],
)


@ARCHS
def test_encoder_layer_matches_torch(activation, norm_first):
    theirs = torch_encoder_layer(activation, norm_first)
    ours = EncoderLayer(D, H, F_, 0.0, activation, norm_first).eval()
    copy_encoder_layer(ours, theirs)
    x, lengths = torch.randn(B, 7, D), [7, 4]
    out, w = ours(x, padding(lengths, 7))
    close(out, theirs(x, src_key_padding_mask=~padding(lengths, 7)[:, 0, 0]))
    assert w.shape == (B, H, 7, 7) and (w[1, :, :, 4:] == 0).all()


@ARCHS
def test_encoder_layer_statistics(activation, norm_first):
    """Each recorded norm equals the same quantity computed with torch's modules."""
    theirs = torch_encoder_layer(activation, norm_first)
    ours = EncoderLayer(D, H, F_, 0.0, activation, norm_first).eval()
    copy_encoder_layer(ours, theirs)
    x = torch.randn(1, 6, D)  # a recorded forward takes one text
    holder = nn.Module()
    holder.config, holder.layers = small_config(), nn.ModuleList([ours])
    with torch.inference_mode(), record(holder) as rec:
        out, _ = ours(x)
    s = {k: torch.from_numpy(v[0])[None] for k, v in rec.norms().items()}  # (1, T) or (1, H, T)
    sa = lambda h: theirs.self_attn(h, h, h, need_weights=False)[0]  # noqa: E731
    ff = lambda h: theirs.linear2(theirs.activation(theirs.linear1(h)))  # noqa: E731
    if norm_first:
        attn_in = n1 = theirs.norm1(x)
        a = sa(n1)
        ln1_in, s1 = x, x + a
        n2 = theirs.norm2(s1)
        f = ff(n2)
        ln2_in = s1
    else:
        attn_in = x
        a = sa(x)
        ln1_in = x + a
        n1 = theirs.norm1(ln1_in)
        f = ff(n1)
        ln2_in = n1 + f
        n2 = theirs.norm2(ln2_in)
        close(n2, out)  # post-norm: the second norm's output is the layer's output
    want = {
        "ln1_in_mean": ln1_in.mean(-1), "ln1_in_std": ln1_in.std(-1, unbiased=False), "ln1_out": n1.norm(dim=-1),
        "ln2_in_mean": ln2_in.mean(-1), "ln2_in_std": ln2_in.std(-1, unbiased=False), "ln2_out": n2.norm(dim=-1),
        "attn_out": a.norm(dim=-1), "ffn_out": f.norm(dim=-1),
    }
    assert set(s) == set(want) | {"value_norms"}
    for k, v in want.items():
        close(s[k], v, atol=1e-4, rtol=1e-5)
    close(s["value_norms"], ours.self_attn.value_norms(attn_in))


def small_config(**kw):
    return TransformerConfig(**{**dict(vocab_size=50, d_model=D, n_heads=H, d_ff=F_, n_layers=3, max_len=16,
                                       dropout=0.0), **kw})


@ARCHS
def test_encoder_with_final_norm_matches_torch(activation, norm_first):
    layer = nn.TransformerEncoderLayer(D, H, F_, dropout=0.0, activation=activation, batch_first=True,
                                       norm_first=norm_first)
    theirs = randomise(nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(D), enable_nested_tensor=False))
    ours = Encoder(small_config(activation=activation, norm_first=norm_first)).eval()
    for mine, src in zip(ours.layers, theirs.layers):
        copy_encoder_layer(mine, src)
    with torch.no_grad():
        copy_linear(ours.norm, theirs.norm)
    x, mask = torch.randn(B, 7, D), padding([7, 5], 7)
    out = ours(x, mask)
    close(out.last, theirs(x, src_key_padding_mask=~mask[:, 0, 0]))
    h = x
    for i, src in enumerate(theirs.layers):  # every hidden state, not just the last
        close(out.hidden_states[i], h)
        h = src(h, src_key_padding_mask=~mask[:, 0, 0])
    close(out.hidden_states[-1], h)
    assert len(out.attentions) == 3


@pytest.mark.parametrize("norm_first", [False, True], ids=["post", "pre"])
def test_decoder_layer_matches_torch_with_causal_mask(norm_first):
    theirs = randomise(nn.TransformerDecoderLayer(D, H, F_, dropout=0.0, batch_first=True, norm_first=norm_first))
    ours = DecoderLayer(D, H, F_, 0.0, "relu", norm_first).eval()
    with torch.no_grad():
        ours.self_attn.load_from_torch(theirs.self_attn)
        ours.cross_attn.load_from_torch(theirs.multihead_attn)
        for mine, src in ((ours.ffn.fc1, theirs.linear1), (ours.ffn.fc2, theirs.linear2), (ours.sub1.norm, theirs.norm1),
                          (ours.sub2.norm, theirs.norm2), (ours.sub3.norm, theirs.norm3)):
            copy_linear(mine, src)
    tgt, mem, src_mask = torch.randn(B, 6, D), torch.randn(B, 9, D), padding([9, 5], 9)
    future = ~causal_mask(6)  # torch: True = may not attend
    out, self_w, cross_w = ours(tgt, mem, memory_mask=src_mask)  # no mask given: causal anyway
    close(out, theirs(tgt, mem, tgt_mask=future, memory_key_padding_mask=~src_mask[:, 0, 0]))
    assert (self_w[..., future] == 0).all()
    assert (cross_w[1, ..., 5:] == 0).all()
    if not norm_first:  # post-norm: the first self-attention sees the raw target
        close(self_w, theirs.self_attn(tgt, tgt, tgt, attn_mask=future, average_attn_weights=False)[1])


# ---------------------------------------------------------------- whole models and the seed's bugs


def test_translator_decoder_is_causal():
    """Changing a future target token leaves earlier decoder outputs unchanged (the seed's decoder saw the future)."""
    net = Translator(small_config(n_layers=2, tgt_vocab_size=40)).eval()
    src, tgt = torch.randint(0, 50, (1, 5)), torch.randint(0, 40, (1, 6))
    changed = tgt.clone()
    changed[0, 4] = (tgt[0, 4] + 1) % 40
    logits, _, dec = net(src, tgt)
    logits2, _, _ = net(src, changed)
    assert torch.equal(logits[:, :4], logits2[:, :4])
    assert (logits[:, 4:] - logits2[:, 4:]).abs().max() > 1e-3
    upper = torch.ones(6, 6, dtype=torch.bool).triu(1)
    for w in dec.attentions:
        assert (w[..., upper] == 0).all()
        close(w.sum(-1), torch.ones(1, H, 6))
    assert len(dec.cross_attentions) == 2 and dec.cross_attentions[0].shape == (1, H, 6, 5)


def test_decoder_combines_padding_with_causal_mask():
    net = Decoder(small_config(n_layers=1)).eval()
    x, mem = torch.randn(1, 5, D), torch.randn(1, 4, D)
    keep = torch.tensor([True, True, False, True, True])  # target position 2 is padding
    w = net(x, mem, self_mask=keep[None, None, None, :]).attentions[0]
    assert (w[..., 2] == 0).all()
    assert (w[..., torch.ones(5, 5, dtype=torch.bool).triu(1)] == 0).all()


def test_classifier_ignores_padding():
    net = TextClassifier(small_config(n_classes=3)).eval()
    ids = torch.randint(1, 50, (1, 5))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    logits, _ = net(ids)
    logits_padded, _ = net(padded, attention_mask=(padded != 0).long())
    close(logits, logits_padded)


def test_positions_beyond_max_len_are_refused():
    with pytest.raises(ValueError, match="17 tokens exceed the model's 16 positions"):
        Embeddings(small_config(positional="learned"))(torch.zeros(1, 17, dtype=torch.long))


def test_sinusoidal_positions_take_any_length():
    """The formula has no limit: past the precomputed table the encoding goes on exactly."""
    positions = SinusoidalPositions(16, D)
    close(positions(40), sinusoidal_encoding(40, D))
    close(positions(40)[:16], positions(16))
    assert Embeddings(small_config())(torch.zeros(1, 40, dtype=torch.long)).shape == (1, 40, D)


def test_each_class_is_defined_once():
    """The seed defines Encoder and EncoderLayer twice with different signatures; ours once each."""
    names = []
    for path in (Path(__file__).parents[2] / "attnviz" / "nn").glob("*.py"):
        names += [n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)]
    assert {"Encoder", "EncoderLayer", "DecoderLayer", "MultiHeadAttention"} <= set(names)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)

