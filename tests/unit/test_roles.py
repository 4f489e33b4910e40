"""Head roles: hand-built attention patterns with known scores, tile by tile, and real models."""

import numpy as np
import pytest

from attnviz import AttentionTrace
from attnviz.analysis import roles
from attnviz.analysis.roles import ROLES, repeated_tokens, role_scores, role_table, strongest

N = 12  # random tokens, then the same again


def probe_tokens(n=N):
    body = [f"t{i}" for i in range(n)]
    return ["<s>", *body, *body]


def trace_of(patterns, tokens, kind="decoder", special=None):
    """One layer whose heads are the given (T, T) patterns."""
    return AttentionTrace(tokens, attentions=np.stack(patterns)[None], kind=kind, special=special)


def causal_uniform(T):
    return np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]


def previous(T):
    a = np.eye(T, k=-1)
    a[0, 0] = 1
    return a


def induction(tokens):
    """Each query attends to the token after the earlier occurrence of its own token (else to token 0)."""
    T = len(tokens)
    a = np.zeros((T, T))
    for i, t in enumerate(tokens):
        earlier = [j for j in range(i) if tokens[j] == t]
        a[i, earlier[0] + 1 if earlier else 0] = 1
    return a


def duplicate(tokens):
    T = len(tokens)
    a = np.zeros((T, T))
    for i, t in enumerate(tokens):
        earlier = [j for j in range(i) if tokens[j] == t]
        a[i, earlier[0] if earlier else 0] = 1
    return a


def first(T):
    a = np.zeros((T, T))
    a[:, 0] = 1
    return a


def test_pure_patterns_score_one_on_their_role_and_uniform_scores_zero():
    tokens = probe_tokens()
    T = len(tokens)
    heads = [previous(T), induction(tokens), duplicate(tokens), first(T), np.eye(T), causal_uniform(T)]
    s = role_scores(trace_of(heads, tokens))
    expected_best = ["previous", "induction", "duplicate", "sink", "self", "broad"]
    for h, role in enumerate(expected_best):
        assert s[role][0, h] == pytest.approx(1.0, abs=1e-6), (role, h)
    uniform = 5
    for role in roles.PATTERN_ROLES + ("local",):
        assert s[role][0, uniform] == pytest.approx(0.0, abs=1e-6), role
    # Each pure head scores 0 on the pattern roles that are not its own (they never share a key here).
    assert s["induction"][0, 0] == 0 and s["previous"][0, 1] == 0 and s["induction"][0, 2] == 0
    assert s["broad"][0, :5] == pytest.approx(0.0, abs=1e-6)  # one key per row: no entropy
    assert s["local"][0, 4] == pytest.approx(1.0) and s["distance"][0, 4] == 0  # self: distance 0
    assert s["distance"][0, 0] == pytest.approx((T - 1) / T)  # previous: 1 for every row but the first
    best, names = strongest(s)
    assert [names[i] for i in best[0]] == expected_best


def test_scores_are_chance_corrected_by_hand():
    """Half on the previous token, half spread evenly: (a − u)/(1 − u) per row, averaged over rows i ≥ 1."""
    T = 6
    a = 0.5 * previous(T) + 0.5 * causal_uniform(T)
    s = role_scores(trace_of([a], [f"w{i}" for i in range(T)]))
    rows = np.arange(1, T)
    u = 1 / (rows + 1)
    got = a[rows, rows - 1]
    assert s["previous"][0, 0] == pytest.approx(np.mean((got - u) / (1 - u)))
    # Normalised entropy, by hand, over rows with more than one key.
    ent = [-(r[r > 0] * np.log(r[r > 0])).sum() / np.log(i + 1) for i, r in enumerate(a) if i > 0]
    assert s["broad"][0, 0] == pytest.approx(np.mean(ent))


def test_encoders_skip_the_causal_roles_and_score_bidirectional_patterns():
    tokens = ["[CLS]", "the", "cat", ",", "sat", "[SEP]"]
    T = len(tokens)
    special = [True, False, False, False, False, True]
    delim = np.zeros((T, T))
    delim[:, [3, 5]] = 0.5  # the comma and [SEP]
    uniform = np.full((T, T), 1 / T)
    s = role_scores(trace_of([delim, uniform, first(T)], tokens, "encoder", special))
    assert "induction" not in s and "duplicate" not in s
    assert set(roles.roles_for(False)) == {r for r, role in ROLES.items() if not role.causal}
    assert s["delimiter"][0, 0] == pytest.approx(1.0)
    assert s["delimiter"][0, 1] == pytest.approx(0.0, abs=1e-6) and s["broad"][0, 1] == pytest.approx(1.0)
    assert s["sink"][0, 2] == pytest.approx(1.0) and s["local"][0, 1] == pytest.approx(0.0, abs=1e-6)


def test_newlines_and_punctuation_are_delimiters_but_the_first_token_is_not():
    t = AttentionTrace(["<|endoftext|>", "Hello", "Ċ", "world", "<0x0A>", "!", "\n"], attentions=np.ones((1, 1, 7, 7)) / 7)
    assert roles.delimiters(t).tolist() == [False, False, True, False, True, True, True]


def test_tile_by_tile_equals_one_tile(monkeypatch):
    """Tiles of a few rows (long texts) give the same scores as one tile of every row."""
    rng = np.random.default_rng(0)
    tokens = probe_tokens(20)
    T = len(tokens)
    logits = rng.normal(size=(2, 3, T, T)) * 3
    logits[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    trace = AttentionTrace(tokens, attentions=a.astype(np.float32), kind="decoder")
    whole = role_scores(trace)
    monkeypatch.setattr(type(trace.weights), "rows_per_tile", lambda self, n=1: 3)
    tiled = role_scores(trace)
    for r in whole:
        np.testing.assert_allclose(tiled[r], whole[r], atol=1e-9)


def test_repeated_tokens_and_the_table():
    ids = repeated_tokens(range(100, 200), 30, seed=1)
    assert len(ids) == 60 and ids[:30] == ids[30:] and len(set(ids)) == 30
    assert ids == repeated_tokens(range(100, 200), 30, seed=1) != repeated_tokens(range(100, 200), 30, seed=2)
    tokens = probe_tokens()
    T = len(tokens)
    s = role_scores(trace_of([previous(T), induction(tokens)], tokens))
    table = role_table(s, probe=s)
    assert table["strongest role"].tolist() == ["previous-token", "induction"]
    assert table["induction (probe)"].tolist() == pytest.approx([0.0, 1.0])
    assert list(table.columns[:3]) == ["layer", "head", "strongest role"]


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_real_models_on_the_probe(tiny_backend, family):
    """A tiny random model traced on the probe: scores equal the same analysis of its dense weights."""
    backend = tiny_backend(family)
    probe = roles.probe_trace(backend)
    n = (backend.max_tokens - 2) // 2
    body = [t for t, sp in zip(probe.tokens, probe.special) if not sp]
    assert len(body) == 2 * n and body[:n] == body[n:]
    s = role_scores(probe)
    dense = role_scores(AttentionTrace(probe.tokens, attentions=probe.attentions, kind=probe.kind, special=probe.special))
    for r in s:
        np.testing.assert_allclose(s[r], dense[r], atol=1e-6)
        assert s[r].shape == (backend.n_layers, backend.n_heads)
    assert ("induction" in s) == (family != "bert")
    assert all((0 <= s[r]).all() and (s[r] <= 1).all() for r in s if r != "distance")


@pytest.mark.usefixtures("one_torch_thread")
def test_minilm_on_a_text_and_on_the_probe():
    """MiniLM (an encoder): the probe is [CLS] r r [SEP]; its known previous-token head shows on both."""
    import attnviz

    backend = attnviz.load("builtin:minilm")
    probe = roles.probe_trace(backend)
    assert probe.tokens[0] == "[CLS]" and probe.tokens[-1] == "[SEP]" and probe.n_tokens == 2 * roles.PROBE_LEN + 2
    s = role_scores(probe)
    text = role_scores(attnviz.trace("The animal didn't cross the street because it was too tired, so it slept."))
    assert "induction" not in s
    # Some MiniLM heads attend to the previous token on any input (Clark et al. find the same in BERT).
    assert s["previous"].max() > 0.5 and text["previous"].max() > 0.5
    assert np.unravel_index(s["previous"].argmax(), s["previous"].shape) == np.unravel_index(
        text["previous"].argmax(), text["previous"].shape)
