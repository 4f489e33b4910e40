"""Norm statistics against a recomputation from hidden states, attention weights and the models' weights.

Built-in MiniLM returns them from its own forward; Hugging Face models get them from one-call forward hooks
(attnviz.capture.hooks), which must leave the shared model as they found it. References are float64.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz.backends import load
from attnviz.capture.hooks import norm_hooks
from attnviz.analysis.norms import layer_stats, norm_attention, norm_table
from attnviz.core.trace import NORM_KEYS

TEXT = "The quick brown fox jumps over the lazy dog. Where is the station?"
RTOL, ATOL = 2e-4, 1e-6


def _d(t):
    return t.detach().double().cpu()


def _lin(x, m):
    return F.linear(x, _d(m.weight), None if m.bias is None else _d(m.bias))


def _conv1d(x, m):  # GPT-2's Conv1D: y = x W + b with W stored (in, out)
    return x @ _d(m.weight) + _d(m.bias)


def _ln(x, m):
    return F.layer_norm(x, x.shape[-1:], _d(m.weight), _d(m.bias), m.eps)


def _rms(x, m, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * _d(m.weight)


def _attend(alpha, v, w_o, b_o=None):
    """alpha (H, T, T), values (T, H·Dh or Hkv·Dh), W_O (D, H·Dh) -> (update (T, D), ‖f_h(x_j)‖ (H, T))."""
    H, T, _ = alpha.shape
    w_o = _d(w_o)
    Dh = w_o.shape[1] // H
    v = v.view(T, -1, Dh).repeat_interleave(H // (v.shape[1] // Dh), dim=1)  # (T, H, Dh)
    ctx = torch.einsum("hqk,khd->qhd", alpha, v).reshape(T, H * Dh)  # (T, H·Dh)
    vn = torch.einsum("khd,ehd->hke", v, w_o.view(-1, H, Dh)).norm(dim=-1)  # (H, T)
    return ctx @ w_o.T + (0 if b_o is None else _d(b_o)), vn


def _pre_norm(h, alpha, norm1, norm2, values, out, ffn):
    """A pre-norm layer: x + attn(norm1(x)), then + ffn(norm2(·))."""
    x1 = norm1(h)
    a, vn = _attend(alpha, values(x1), *out)
    r = h + a
    x2 = norm2(r)
    f = ffn(x2)
    return dict(ln1=(h, x1), ln2=(r, x2), attn_out=a, ffn_out=f, value_norms=vn, next=r + f)


def bert_layer(layer, h, alpha, act=F.gelu):
    """Post-norm BERT layer from its weights: norm(x + attn(x)), then norm(· + ffn(·))."""
    o = layer.attention.output
    a, vn = _attend(alpha, _lin(h, layer.attention.self.value), o.dense.weight, o.dense.bias)
    y1 = _ln(h + a, o.LayerNorm)
    f = _lin(act(_lin(y1, layer.intermediate.dense)), layer.output.dense)
    y2 = _ln(y1 + f, layer.output.LayerNorm)
    return dict(ln1=(h + a, y1), ln2=(y1 + f, y2), attn_out=a, ffn_out=f, value_norms=vn, next=y2)


def gpt2_layer(layer, h, alpha, config):
    D = h.shape[-1]
    mlp = layer.mlp
    return _pre_norm(
        h, alpha, lambda x: _ln(x, layer.ln_1), lambda x: _ln(x, layer.ln_2),
        lambda x: _conv1d(x, layer.attn.c_attn)[:, 2 * D:], (layer.attn.c_proj.weight.T, layer.attn.c_proj.bias),
        lambda x: _conv1d(F.gelu(_conv1d(x, mlp.c_fc), approximate="tanh"), mlp.c_proj),
    )  # fmt: skip


def llama_layer(layer, h, alpha, config):
    eps, mlp = config.rms_norm_eps, layer.mlp
    return _pre_norm(
        h, alpha, lambda x: _rms(x, layer.input_layernorm, eps), lambda x: _rms(x, layer.post_attention_layernorm, eps),
        lambda x: _lin(x, layer.self_attn.v_proj), (layer.self_attn.o_proj.weight,),
        lambda x: _lin(F.silu(_lin(x, mlp.gate_proj)) * _lin(x, mlp.up_proj), mlp.down_proj),
    )  # fmt: skip


def t5_layer(block, h, alpha, config):
    eps, sa, ff = config.layer_norm_epsilon, block.layer[0], block.layer[-1]
    assert config.dense_act_fn == "relu" and not config.is_gated_act
    return _pre_norm(
        h, alpha, lambda x: _rms(x, sa.layer_norm, eps), lambda x: _rms(x, ff.layer_norm, eps),
        lambda x: _lin(x, sa.SelfAttention.v), (sa.SelfAttention.o.weight,),
        lambda x: _lin(F.relu(_lin(x, ff.DenseReluDense.wi)), ff.DenseReluDense.wo),
    )  # fmt: skip


def _stats(r: dict) -> dict:
    """The NORM_KEYS statistics of one reference layer, for the sublayers it covers."""
    out = {}
    for p in ("ln1", "ln2"):
        if p in r:
            x, y = r[p]
            out[f"{p}_in_mean"], out[f"{p}_in_std"] = x.mean(-1), x.std(-1, unbiased=False)
            out[f"{p}_out"] = y.norm(dim=-1)
    out.update({k: r[k].norm(dim=-1) for k in ("attn_out", "ffn_out") if k in r})
    out["value_norms"] = r["value_norms"]
    return out


def _check(trace, layers, ref_layer, next_until=None):
    """trace.norms equal ref_layer(layer, h_l, α_l) for every layer; its h_{l+1} matches the hidden states."""
    hs = torch.tensor(trace.hidden_states, dtype=torch.float64)
    alpha = torch.tensor(trace.attentions, dtype=torch.float64)
    want = []
    for i, layer in enumerate(layers):
        r = ref_layer(layer, hs[i], alpha[i])
        want.append(_stats(r))
        if "next" in r and (next_until is None or i < next_until):  # the reference reproduces the model's stream
            np.testing.assert_allclose(r["next"], hs[i + 1], rtol=RTOL, atol=1e-5)
    assert len(want) == trace.n_layers
    for k in want[0]:
        expected = torch.stack([w[k] for w in want]).numpy()  # (L, T) or (L, H, T)
        np.testing.assert_allclose(trace.norms[k], expected, rtol=RTOL, atol=ATOL, err_msg=k)


def test_builtin_minilm_statistics_equal_recomputation():
    model = load("builtin:minilm")
    trace = model.trace(TEXT)
    c = model.net.config

    def layer_ref(layer, h, alpha):
        out = layer.self_attn.out_proj
        a, vn = _attend(alpha, _lin(h, layer.self_attn.v_proj), out.weight, out.bias)
        y1 = F.layer_norm(h + a, (c.d_model,), _d(layer.sub1.norm.weight), _d(layer.sub1.norm.bias), c.eps)
        f = _lin(F.gelu(_lin(y1, layer.ffn.fc1)), layer.ffn.fc2)
        y2 = F.layer_norm(y1 + f, (c.d_model,), _d(layer.sub2.norm.weight), _d(layer.sub2.norm.bias), c.eps)
        return dict(ln1=(h + a, y1), ln2=(y1 + f, y2), attn_out=a, ffn_out=f, value_norms=vn, next=y2)

    _check(trace, model.net.encoder.layers, layer_ref)


def test_norm_based_attention_equals_direct_computation():
    """α_ij · ‖(x_j W_V + b_V)_h W_O,h‖ from MiniLM's weights and hidden states, one vector at a time."""
    model = load("builtin:minilm")
    trace = model.trace(TEXT)
    T = trace.n_tokens
    for layer, head in [(0, 0), (2, 7), (5, 11)]:
        attn = model.net.encoder.layers[layer].self_attn
        Dh = attn.d_head
        w_v = _d(attn.v_proj.weight)[head * Dh:(head + 1) * Dh]  # (Dh, D)
        b_v = _d(attn.v_proj.bias)[head * Dh:(head + 1) * Dh]
        w_o = _d(attn.out_proj.weight)[:, head * Dh:(head + 1) * Dh]  # (D, Dh)
        got = norm_attention(trace.attentions[layer, head], trace.norms["value_norms"][layer, head])
        want = np.zeros((T, T))
        for j in range(T):
            x_j = torch.tensor(trace.hidden_states[layer, j], dtype=torch.float64)
            moved = w_o @ (w_v @ x_j + b_v)  # (D,)
            for i in range(T):
                want[i, j] = (float(trace.attentions[layer, head, i, j]) * moved).norm()
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        rows = norm_attention(trace.attentions[layer, head], trace.norms["value_norms"][layer, head], normalize=True)
        np.testing.assert_allclose(rows, want / want.sum(1, keepdims=True), rtol=RTOL, atol=ATOL)


@pytest.fixture
def hf(tiny_backend):
    return tiny_backend


def test_hf_bert_statistics(hf):
    model = hf("bert")
    trace = model.trace(TEXT)
    assert model.net.config.hidden_act == "gelu"
    _check(trace, model.net.encoder.layer, bert_layer)


@pytest.mark.parametrize("family, layers, ref", [
    ("gpt2", lambda net: net.transformer.h, gpt2_layer),
    ("llama", lambda net: net.model.layers, llama_layer),
])  # fmt: skip
def test_hf_decoder_statistics(hf, family, layers, ref):
    model = hf(family)
    trace = model.trace(TEXT)
    # The last hidden state comes after the final norm, so only earlier ones continue the residual stream.
    _check(trace, layers(model.net), lambda l, h, a: ref(l, h, a, model.net.config), next_until=trace.n_layers - 1)


def test_hf_t5_statistics_both_sides(hf):
    model = hf("t5")
    trace = model.trace(TEXT, target="Where is the old bridge?")
    config = model.net.config
    enc = trace.encoder
    _check(enc, model.net.encoder.block, lambda b, h, a: t5_layer(b, h, a, config), next_until=enc.n_layers - 1)

    # Decoder: the self-attention sublayer needs no cross-attention to recompute.
    def self_attention_only(block, h, alpha):
        sa = block.layer[0]
        x1 = _rms(h, sa.layer_norm, config.layer_norm_epsilon)
        a, vn = _attend(alpha, _lin(x1, sa.SelfAttention.v), sa.SelfAttention.o.weight)
        return dict(ln1=(h, x1), attn_out=a, value_norms=vn)

    dec = trace.decoder
    assert dec.n_layers == 3 and set(dec.norms) == set(NORM_KEYS)
    _check(dec, model.net.decoder.block, self_attention_only)


def _hooks(net) -> dict:
    return {name: (tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for name, m in net.named_modules()}


def _ours(net) -> int:
    """How many hooks on ``net`` belong to attnviz's Recorder."""
    return sum("Recorder" in getattr(h, "__qualname__", "") for m in net.modules() for h in m._forward_hooks.values())


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "t5"])
def test_no_hook_remains_after_a_run_or_an_exception(hf, family):
    model = hf(family)
    net = model.net
    # transformers installs its own output-capturing hooks on the first forward (the load's probe trace);
    # ours must come and go without a trace.
    before = _hooks(net)
    with norm_hooks(net):
        assert _ours(net) > 0
    assert _hooks(net) == before and _ours(net) == 0

    model.trace(TEXT, target=TEXT if model.kind == "encoder-decoder" else None)
    assert _hooks(net) == before

    def boom(*args, **kwargs):
        raise RuntimeError("boom inside the forward")

    first = next(m for m in net.modules() if isinstance(m, torch.nn.ModuleList))[0]  # the first layer
    first.forward = boom
    try:
        with pytest.raises(RuntimeError, match="boom"):
            model.trace(TEXT, target=TEXT if model.kind == "encoder-decoder" else None)
    finally:
        del first.forward
    assert _hooks(net) == before and _ours(net) == 0
    assert model.trace(TEXT, target=TEXT if model.kind == "encoder-decoder" else None).model == model.key


def test_builtin_trace_registers_no_hooks():
    model = load("builtin:minilm")
    model.trace(TEXT)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.net.modules())


def test_table_rows_follow_layer_and_token():
    trace = load("builtin:minilm").trace(TEXT)
    table = norm_table(trace)
    stats = layer_stats(trace)
    assert len(table) == trace.n_layers * trace.n_tokens
    row = table[(table.layer == 3) & (table.token_index == 4)].iloc[0]
    assert row.token == trace.tokens[4]
    hs = trace.hidden_states.astype(np.float64)
    np.testing.assert_allclose(row.residual_in, np.linalg.norm(hs[3, 4]), rtol=1e-5)
    np.testing.assert_allclose(row.residual_out, np.linalg.norm(hs[4, 4]), rtol=1e-5)
    a, f = trace.norms["attn_out"][3, 4], trace.norms["ffn_out"][3, 4]
    np.testing.assert_allclose(row.attn_share, a / (a + f), rtol=1e-5)
    np.testing.assert_allclose(row.ffn_ratio, f / np.linalg.norm(hs[3, 4]), rtol=1e-5)
    assert set(stats) <= set(table.columns)
