"""Analyses on hand-built matrices and real models: head statistics, rollout, flow, ablation, comparison."""

import copy

import networkx as nx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnviz
from attnviz.analysis import attention_flow, difference, head_importance, head_stats, head_table, match, rollout
from attnviz.analysis.ablation import ablation
from attnviz.capture.hooks import heads_masked, projections
from attnviz.analysis.heads import HEAD_STATS, is_punctuation, normalised_entropy, stat_range
from attnviz.analysis.rollout import residual_attention
from attnviz.backends.hf import load_hf
from attnviz.backends.trained import TrainedClassifier
from attnviz.nn import TextClassifier, TransformerConfig
from attnviz.backends.vocab import SPECIALS, Vocab
from attnviz.core.trace import AttentionTrace

TEXT = "The animal didn't cross the street, because it was too tired!"


def trace_of(attn, kind="encoder", tokens=None, special=None):
    T = attn.shape[-1]
    return AttentionTrace(tokens=tokens or [f"t{i}" for i in range(T)], attentions=attn, kind=kind, special=special)


# Head statistics


def test_uniform_rows_have_entropy_log_T_and_normalised_entropy_one():
    T = 7
    s = head_stats(trace_of(np.full((2, 3, T, T), 1 / T)))
    np.testing.assert_allclose(s["entropy"], np.log(T), atol=1e-6)
    np.testing.assert_allclose(s["entropy_norm"], 1.0, atol=1e-6)
    np.testing.assert_allclose(s["max"], 1 / T, atol=1e-7)
    # Causal uniform rows: row i spreads over i + 1 keys, so entropy ln(i + 1) and normalised entropy 1.
    causal = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    s = head_stats(trace_of(np.broadcast_to(causal, (1, 2, T, T)), kind="decoder"))
    np.testing.assert_allclose(s["entropy"], np.log(np.arange(1, T + 1)).mean(), atol=1e-6)
    np.testing.assert_allclose(s["entropy_norm"], 1.0, atol=1e-6)
    assert normalised_entropy(np.ones((1, 1)), causal=True) == 0  # one key: nothing to normalise


def test_a_previous_token_head():
    T = 6
    prev = np.eye(T, k=-1)
    prev[0, 0] = 1  # the first token has no predecessor: it looks at itself
    s = head_stats(trace_of(prev[None, None]))
    assert s["prev"][0, 0] == pytest.approx(1.0)
    assert s["next"][0, 0] == pytest.approx(0.0)
    assert s["self"][0, 0] == pytest.approx(1 / T)
    assert s["distance"][0, 0] == pytest.approx((T - 1) / T)
    assert s["entropy"][0, 0] == pytest.approx(0.0, abs=1e-9)
    assert s["max"][0, 0] == pytest.approx(1.0)


def test_statistics_of_a_real_trace_against_references():
    t = attnviz.trace(TEXT)
    s = head_stats(t)
    a = torch.tensor(t.attentions, dtype=torch.float64)  # (L, H, T, T)
    ref = torch.distributions.Categorical(probs=a).entropy().mean(-1)  # torch's entropy as the reference
    np.testing.assert_allclose(s["entropy"], ref.numpy(), atol=1e-6)
    T = t.n_tokens
    np.testing.assert_allclose(s["entropy_norm"], ref.numpy() / np.log(T), atol=1e-6)
    gaps = np.abs(np.subtract.outer(np.arange(T), np.arange(T)))
    np.testing.assert_allclose(s["distance"], (t.attentions * gaps).sum(-1).mean(-1), atol=1e-5)
    assert t.tokens[0] == "[CLS]" and t.tokens[-1] == "[SEP]"
    np.testing.assert_allclose(s["cls"], t.attentions[..., 0].mean(-1), atol=1e-6)
    np.testing.assert_allclose(s["sep"], t.attentions[..., -1].mean(-1), atol=1e-6)
    punct = [i for i, tok in enumerate(t.tokens) if tok in {"'", ",", "!"}]
    assert punct == [i for i, tok in enumerate(t.tokens) if is_punctuation(tok)]
    np.testing.assert_allclose(s["punct"], t.attentions[..., punct].sum(-1).mean(-1), atol=1e-6)
    prev = np.mean([t.attentions[..., i, i - 1] for i in range(1, T)], axis=0)
    np.testing.assert_allclose(s["prev"], prev, atol=1e-6)
    table = head_table(s)
    assert len(table) == t.n_layers * t.n_heads
    assert list(table.columns) == ["layer", "head", *(HEAD_STATS[k].label for k in s)]
    row = table[(table.layer == 3) & (table["head"] == 7)].iloc[0]
    assert row[HEAD_STATS["entropy"].label] == pytest.approx(s["entropy"][3, 7])
    assert stat_range("entropy", T) == (0.0, pytest.approx(np.log(T)))
    assert stat_range("distance", T) == (0.0, T - 1)


def test_punctuation_covers_subword_markers_but_not_specials_or_words():
    assert all(map(is_punctuation, [".", "##,", "Ġ!", "▁?", "...", "«"]))
    assert not any(map(is_punctuation, ["[SEP]", "a", "##s", "Ġ", "2.0", "$"]))


# Rollout and flow


def random_attention(rng, L, H, T, causal=False):
    logits = rng.normal(size=(L, H, T, T)) * 3
    if causal:
        logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    a = np.exp(logits - logits.max(-1, keepdims=True))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def test_rollout_of_identities_is_the_identity():
    eye = np.broadcast_to(np.eye(5), (4, 3, 5, 5))
    np.testing.assert_allclose(rollout(eye), np.broadcast_to(np.eye(5), (4, 5, 5)), atol=1e-12)


def test_rollout_equals_the_manual_product():
    attn = random_attention(np.random.default_rng(0), 3, 4, 6).astype(np.float64)
    tilde = []
    for layer in attn:
        a = 0.5 * layer.mean(0) + 0.5 * np.eye(6)
        tilde.append(a / a.sum(1, keepdims=True))
    r = rollout(attn)
    np.testing.assert_allclose(r[0], tilde[0], atol=1e-12)
    np.testing.assert_allclose(r[1], tilde[1] @ tilde[0], atol=1e-12)
    np.testing.assert_allclose(r[2], tilde[2] @ tilde[1] @ tilde[0], atol=1e-12)


def test_a_fully_masked_row_keeps_only_its_residual():
    attn = np.full((1, 2, 3, 3), 1 / 3)
    attn[..., 1, :] = 0  # a query that may attend to nothing
    np.testing.assert_allclose(residual_attention(attn)[0, 1], [0, 1, 0])


def test_flow_equals_a_hand_computed_max_flow():
    # residual=0 makes the capacities exactly these rows (they already sum to 1).
    a1 = [[0.6, 0.4, 0.0], [0.3, 0.3, 0.4], [0.1, 0.2, 0.7]]
    a2 = [[0.5, 0.5, 0.0], [0.2, 0.0, 0.8], [0.0, 0.9, 0.1]]
    a3 = [[0.3, 0.3, 0.4], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    flow = attention_flow(np.array([a1, a2, a3])[:, None], target=0, residual=0.0)
    # From input 0 into token 0: one edge (0.6); two hops Σ_k min(0.6|0.3|0.1, 0.5|0.5|0) = 0.8; after three
    # layers the cut {s→(1,1), s→(1,2), (1,0)→(2,1), (2,0)→t} = 0.3 + 0.1 + 0.2 + 0.3 = 0.9 is the bottleneck.
    np.testing.assert_allclose(flow[:, 0], [0.6, 0.8, 0.9], atol=1e-6)


def test_flow_equals_networkx_on_random_graphs():
    rng = np.random.default_rng(1)
    for causal in (False, True):
        attn = random_attention(rng, 3, 2, 5, causal)
        a = residual_attention(attn)
        L, T = a.shape[:2]
        G = nx.DiGraph()
        for k in range(L):
            for i in range(T):
                for j in range(T):
                    G.add_edge((k, j), (k + 1, i), capacity=float(a[k, i, j]))
        target = 2
        flow = attention_flow(attn, target)
        for k in range(L):
            want = [nx.maximum_flow_value(G, (0, j), (k + 1, target)) for j in range(T)]
            np.testing.assert_allclose(flow[k], want, atol=1e-5)


def test_flow_refuses_long_texts_and_bad_positions():
    with pytest.raises(ValueError, match="limited to 64 tokens; this text has 65"):
        attention_flow(np.full((1, 1, 65, 65), 1 / 65), 0)
    with pytest.raises(ValueError, match="outside"):
        attention_flow(np.full((1, 1, 3, 3), 1 / 3), 3)


# Comparison


def test_difference_over_matching_tokens():
    a_tok, b_tok = ["[CLS]", "dogs", "chase", "cats", "[SEP]"], ["[CLS]", "dogs", "love", "chase", "cats", "[SEP]"]
    ia, ib = match(a_tok, b_tok)
    assert ia.tolist() == [0, 1, 2, 3, 4] and ib.tolist() == [0, 1, 3, 4, 5]
    rng = np.random.default_rng(2)
    a, b = rng.random((5, 5)), rng.random((6, 6))
    d = difference(a, b, a_tok, b_tok)
    assert d.diff[1, 3] == pytest.approx(a[1, 3] - b[1, 4])
    assert d.diff.shape == (5, 5)
    assert difference(a, b, ["x", "y", "z", "u", "v"], b_tok).diff.shape == (0, 0)


# Ablation


@pytest.fixture(scope="module")
def minilm():
    return attnviz.load("builtin:minilm")


def zeroed(net, layers_path, proj, layer, head, n_heads, conv1d=False):
    """A copy of ``net`` whose attention output projection in ``layer`` ignores ``head``'s slice."""
    net = copy.deepcopy(net)
    w = net.get_submodule(f"{layers_path}.{layer}.{proj}").weight
    Dh = (w.shape[0] if conv1d else w.shape[1]) // n_heads
    with torch.no_grad():
        if conv1d:  # GPT-2's Conv1D: (in, out)
            w[head * Dh:(head + 1) * Dh] = 0
        else:
            w[:, head * Dh:(head + 1) * Dh] = 0
    return net


def test_head_mask_forward_equals_zeroing_the_heads_output_projection(minilm):
    ids = torch.tensor([minilm.tokenizer(TEXT)["input_ids"]])
    for layer, head in [(0, 0), (3, 7), (5, 11)]:
        mask = np.ones((6, 12), np.float32)
        mask[layer, head] = 0
        ablated = minilm.ablation(TEXT)[1](mask)
        with torch.inference_mode():
            want = zeroed(minilm.net, "encoder.layers", "self_attn.out_proj", layer, head, 12)(ids).last[0]
        torch.testing.assert_close(ablated, want, atol=1e-5, rtol=0)
        # The hook path (used for Hugging Face models) agrees on the built-in net too.
        projs = [layer.self_attn.out_proj for layer in minilm.net.encoder.layers]
        with torch.inference_mode(), heads_masked(projs, mask):
            hooked = minilm.net(ids).last[0]
        torch.testing.assert_close(hooked, want, atol=1e-5, rtol=0)
    assert not any(m._forward_pre_hooks for m in minilm.net.modules())


def test_builtin_importance_is_the_pooled_cosine_change(minilm):
    calls = []
    scores, measure = head_importance(minilm, TEXT, progress=lambda k, n: calls.append((k, n)))
    assert measure == "encoder" and scores.shape == (6, 12)
    assert calls == [(k, 72) for k in range(1, 73)]
    ids = torch.tensor([minilm.tokenizer(TEXT)["input_ids"]])
    with torch.inference_mode():
        base = minilm.net(ids).last[0].double().mean(0)
        for layer, head in [(0, 3), (4, 1)]:
            out = zeroed(minilm.net, "encoder.layers", "self_attn.out_proj", layer, head, 12)(ids).last[0]
            want = 1 - F.cosine_similarity(base, out.double().mean(0), dim=0).item()
            assert scores[layer, head] == pytest.approx(want, abs=1e-6)
    assert (scores > -1e-6).all() and scores.max() > 1e-3


FAMILY_PROJ = {
    "bert": ("encoder.layer", "attention.output.dense", False),
    "gpt2": ("transformer.h", "attn.c_proj", True),
    "llama": ("model.layers", "self_attn.o_proj", False),
}


@pytest.mark.parametrize("family", FAMILY_PROJ)
def test_hf_ablation_equals_zeroing_the_heads_output_projection(tiny_model, family):
    backend = load_hf(str(tiny_model(family)))
    scores, measure = head_importance(backend, TEXT)
    path, proj, conv1d = FAMILY_PROJ[family]
    ids = torch.tensor([backend.tokenizer(TEXT)["input_ids"]])
    causal = family != "bert"
    assert measure == ("lm" if causal else "encoder")

    def output(net):
        with torch.inference_mode():
            out = net(input_ids=ids)
        if causal:
            return F.cross_entropy(out.logits[0, :-1].double(), ids[0, 1:]).item()
        return out.last_hidden_state[0].double().mean(0)

    base = output(backend.net)
    for layer in range(backend.n_layers):
        for head in range(backend.n_heads):
            out = output(zeroed(backend.net, path, proj, layer, head, backend.n_heads, conv1d))
            want = out - base if causal else 1 - F.cosine_similarity(base, out, dim=0).item()
            assert scores[layer, head] == pytest.approx(want, abs=1e-6), (layer, head)
    assert np.abs(scores).max() > 1e-6
    assert not any(m._forward_pre_hooks for m in backend.net.modules())


def test_hooks_are_removed_when_the_forward_fails(tiny_model):
    backend = load_hf(str(tiny_model("bert")))
    projs = projections(backend.net, backend.n_layers)
    with pytest.raises(IndexError), heads_masked(projs, np.zeros((2, 4))):
        backend.net(input_ids=torch.tensor([[10**6]]))  # an id beyond the vocabulary
    assert not any(m._forward_pre_hooks for m in backend.net.modules())


def test_classifier_importance_is_the_drop_of_the_predicted_class(tmp_path):
    words = "the film was good bad not very".split()
    vocab = Vocab(list(SPECIALS) + words)
    config = TransformerConfig(vocab_size=len(vocab), d_model=16, n_heads=2, d_ff=32, n_layers=2, max_len=16,
                               dropout=0.0, n_classes=2)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        net = TextClassifier(config)
    backend = TrainedClassifier("test:classifier", net, vocab, ["negative", "positive"])
    text = "the film was not very good"
    scores, measure = head_importance(backend, text)
    assert measure == "classifier"
    ids = torch.tensor([vocab.ids(vocab.tokens(text))])
    with torch.inference_mode():
        base = net(ids)[0][0].softmax(-1)
        c = int(base.argmax())
        for layer in range(2):
            for head in range(2):
                out = zeroed(net, "encoder.encoder.layers", "self_attn.out_proj", layer, head, 2)(ids)[0][0].softmax(-1)
                assert scores[layer, head] == pytest.approx((base[c] - out[c]).item(), abs=1e-6)


def test_unsupported_models_say_so(tiny_model):
    backend = load_hf(str(tiny_model("bart")))
    with pytest.raises(ValueError, match="encoder–decoder models are not supported"):
        ablation(backend, TEXT)
    gpt2 = load_hf(str(tiny_model("gpt2")))
    with pytest.raises(ValueError, match="at least two tokens"):
        ablation(gpt2, "a")
