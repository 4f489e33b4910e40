"""The built-in backends: builtin:minilm against the Hugging Face model's own outputs, builtin:seed's shape.

Parity tolerance with Hugging Face: 1e-4 absolute (measured: ≤ 3e-6 on attentions, ≤ 7e-6 on hidden states).
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModel

import attnviz
from attnviz.backends import list_models, load, open_model
from attnviz.backends.builtin import minilm_path
from attnviz.nn import SinusoidalPositions, sinusoidal_encoding

ROOT = Path(__file__).resolve().parents[2]
TEXTS = {
    "short": "hello world",
    "repeats": "The cat sat on the mat. The cat saw the other cat!",
    "subwords": "Tokenization of unbelievably long words, émigrés & naïve cafés.",
    "long": "Attention lets every token look at every other token. " * 60,  # > 512 tokens
}


@pytest.fixture(scope="module")
def minilm():
    return load("builtin:minilm")  # the same cache attnviz.trace uses


@pytest.fixture(scope="module")
def hf():
    return AutoModel.from_pretrained(minilm_path(), attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def runs(minilm, hf):
    """text name -> (our trace, Hugging Face output) for every text in TEXTS."""
    out = {}
    for name, text in TEXTS.items():
        trace = minilm.trace(text)
        ids = torch.tensor([minilm.tokenizer(text, truncation=True, max_length=512)["input_ids"]])  # (1, T)
        with torch.no_grad():
            ref = hf(ids, output_attentions=True, output_hidden_states=True)
        assert ref.attentions is not None and len(ref.attentions) == 6
        out[name] = trace, ref
    return out


@pytest.mark.parametrize("name", TEXTS)
def test_minilm_matches_hugging_face(runs, name):
    trace, ref = runs[name]
    attn = torch.cat(ref.attentions).numpy()  # 6 × (1, H, T, T) -> (L, H, T, T)
    hidden = torch.cat(ref.hidden_states).numpy()  # (L+1, T, D)
    assert trace.attentions.shape == attn.shape and trace.hidden_states.shape == hidden.shape
    np.testing.assert_allclose(trace.attentions, attn, atol=1e-4, rtol=0)
    np.testing.assert_allclose(trace.hidden_states, hidden, atol=1e-4, rtol=0)
    np.testing.assert_allclose(trace.attentions.sum(-1), 1, atol=1e-5)
    assert trace.model == "builtin:minilm" and trace.kind == "encoder"


def test_long_text_is_truncated_to_512(runs, minilm):
    trace, _ = runs["long"]
    full = minilm.tokenizer(TEXTS["long"])["input_ids"]
    assert len(full) > 512
    assert trace.attentions.shape == (6, 12, 512, 512) and trace.n_tokens == 512
    assert trace.truncated == len(full) - 512
    assert trace.tokens[0] == "[CLS]" and trace.tokens[-1] == "[SEP]"
    assert list(trace.special.nonzero()[0]) == [0, 511]
    assert runs["short"][0].truncated == 0


def test_tokens_special_mask_and_words(runs):
    trace, _ = runs["subwords"]
    assert trace.tokens[0] == "[CLS]" and trace.tokens[-1] == "[SEP]"
    assert trace.special.tolist() == [t in ("[CLS]", "[SEP]") for t in trace.tokens]
    assert (trace.word_ids[trace.special] == -1).all()
    words = trace.word_ids[~trace.special]
    assert (np.diff(words) >= 0).all() and words[0] == 0  # pieces of a word are adjacent
    assert any(t.startswith("##") for t in trace.tokens)  # the text really is split into subwords


@pytest.mark.parametrize("name", ["repeats", "long"])
def test_norms_equal_a_recomputation_from_hugging_face(runs, hf, name):
    """Each per-layer statistic, rebuilt from the HF model's hidden states, attentions and modules."""
    trace, ref = runs[name]
    H, Dh = 12, 32
    for l, layer in enumerate(hf.encoder.layer):
        x, probs = ref.hidden_states[l][0], ref.attentions[l][0]  # (T, D), (H, T, T)
        sa = layer.attention.self
        v = sa.value(x).view(-1, H, Dh).transpose(0, 1)  # (H, T, Dh)
        ctx = (probs @ v).transpose(0, 1).reshape(-1, H * Dh)  # (T, D)
        with torch.no_grad():
            attn_out = layer.attention.output.dense(ctx)
            ln1_in = x + attn_out
            ln1_out = layer.attention.output.LayerNorm(ln1_in)
            ffn_out = layer.output.dense(layer.intermediate(ln1_out))
            ln2_in = ln1_out + ffn_out
            w_o = layer.attention.output.dense.weight.view(-1, H, Dh)  # (D, H, Dh)
            value_norms = torch.einsum("htd,ehd->hte", v, w_o).norm(dim=-1)  # (H, T)
        want = {
            "attn_out": attn_out.norm(dim=-1), "ffn_out": ffn_out.norm(dim=-1),
            "ln1_in_mean": ln1_in.mean(-1), "ln1_in_std": ln1_in.std(-1, unbiased=False),
            "ln1_out": ln1_out.norm(dim=-1),
            "ln2_in_mean": ln2_in.mean(-1), "ln2_in_std": ln2_in.std(-1, unbiased=False),
            "ln2_out": ref.hidden_states[l + 1][0].norm(dim=-1),  # post-norm: the layer's output
            "value_norms": value_norms,
        }
        assert set(trace.norms) == set(want)
        for key, value in want.items():
            np.testing.assert_allclose(trace.norms[key][l], value.numpy(), atol=1e-4, rtol=1e-5, err_msg=f"{key}[{l}]")


def test_value_norms_from_raw_weights(runs):
    """Kobayashi et al.'s ‖f_h(x_j)‖ straight from the safetensors file and our hidden states."""
    trace, _ = runs["short"]
    w = load_file(minilm_path() / "model.safetensors")
    wanted = ("value.weight", "value.bias", "output.dense.weight")
    w = {k.removeprefix("bert."): v.double().numpy() for k, v in w.items() if k.endswith(wanted)}
    for l in range(6):
        x = trace.hidden_states[l].astype(np.float64)  # (T, D)
        p = f"encoder.layer.{l}.attention."
        v = x @ w[p + "self.value.weight"].T + w[p + "self.value.bias"]  # (T, D)
        w_o = w[p + "output.dense.weight"]  # (D, D)
        want = np.stack([
            np.linalg.norm(v[:, h * 32:(h + 1) * 32] @ w_o[:, h * 32:(h + 1) * 32].T, axis=-1) for h in range(12)
        ])  # (H, T)
        np.testing.assert_allclose(trace.norms["value_norms"][l], want, rtol=1e-4, atol=1e-5)


def test_head_mask_of_ones_changes_nothing_and_zero_removes_heads(minilm, runs):
    trace, _ = runs["repeats"]
    ones = np.ones((6, 12), np.float32)
    np.testing.assert_allclose(minilm.ablation(TEXTS["repeats"])[1](ones).numpy(), trace.hidden_states[-1],
                               atol=1e-5)
    ones[5] = 0  # with every head of the last layer gone, only its residual and FFN remain
    got = minilm.ablation(TEXTS["repeats"])[1](ones)
    layer = minilm.net.encoder.layers[5]
    with torch.no_grad():
        x = torch.tensor(trace.hidden_states[5]) + layer.self_attn.out_proj.bias
        x = layer.sub1.norm(x)
        want = layer.sub2.norm(x + layer.ffn(x))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_top_level_trace_from_the_command_line():
    code = "import attnviz; print(attnviz.trace('hello world').attentions.shape)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "(6, 12, 4, 4)"


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_text_is_refused(minilm, text):
    with pytest.raises(ValueError, match="The text is empty"):
        minilm.trace(text)
    with pytest.raises(ValueError, match="The text is empty"):
        attnviz.trace(text)


def test_text_must_be_a_string(minilm):
    with pytest.raises(ValueError, match="text must be a string, not int"):
        minilm.trace(42)


def test_broken_unicode_still_runs(minilm):
    assert minilm.trace("caf\udce9 ok").n_tokens >= 3  # a lone surrogate from a broken paste


@pytest.mark.parametrize("key", ["builtin:nope", "", "gpt-17"])
def test_unknown_model_names_the_known_ones(key):
    with pytest.raises(ValueError, match="Unknown model") as e:
        open_model(key)
    assert "builtin:minilm" in str(e.value) and "builtin:seed" in str(e.value)
    assert list_models()[0] == attnviz.DEFAULT_MODEL == "builtin:minilm"


@pytest.fixture(scope="module")
def seeds():
    """Two fresh, uncached loads, and whether loading left the global RNG as it was."""
    state = torch.random.get_rng_state()
    models = open_model("builtin:seed"), open_model("builtin:seed")
    return models, torch.equal(state, torch.random.get_rng_state())


def test_seed_has_the_seeds_sizes(seeds):
    seed = seeds[0][0]
    c, net = seed.net.config, seed.net
    assert (c.n_layers, c.n_heads, c.d_model, c.d_ff) == (6, 8, 512, 2048)
    assert len(net.encoder.layers) == 6
    layer = net.encoder.layers[0]
    assert layer.self_attn.n_heads == 8 and layer.self_attn.d_head == 64
    assert layer.ffn.fc1.weight.shape == (2048, 512)
    assert layer.ffn.act is F.relu and c.activation == "relu"
    assert isinstance(net.embeddings.positions, SinusoidalPositions)
    torch.testing.assert_close(net.embeddings.positions.table, sinusoidal_encoding(512, 512))
    trace = seed.trace("the seed tutorial's encoder")
    assert trace.attentions.shape[:2] == (6, 8) and trace.hidden_states.shape[::2] == (7, 512)
    assert trace.model == "builtin:seed"


def test_seed_is_deterministic(seeds):
    text = "two fresh loads, one answer"
    models, rng_untouched = seeds
    a, b = (m.trace(text) for m in models)
    assert models[0].net is not models[1].net and rng_untouched
    np.testing.assert_array_equal(a.attentions, b.attentions)
    np.testing.assert_array_equal(a.hidden_states, b.hidden_states)
    assert not np.allclose(a.attentions[0, 0], a.attentions[0, 1])  # heads differ: really random weights

