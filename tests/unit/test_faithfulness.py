"""Faithfulness (attnviz.analysis.faithfulness) on hand-built cases with known answers, against references:
finite differences, the completeness axiom, scipy's Spearman, the model's own forwards."""

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

import attnviz
from attnviz.analysis.faithfulness import (DELETION_STEPS, METHODS, agreement, explain, forwards, gradient_input,
                                           integrated_gradients, value_zeroed)
from attnviz.analysis.interventions import Knockout, ZeroValue, editing, forward

NEGATED = "The film was not good today"  # the classifier's label hangs on "good" and the "not" before it


@pytest.fixture(scope="module")
def classifier():
    return attnviz.load("builtin:classifier")


@pytest.fixture(scope="module")
def minilm():
    return attnviz.load("builtin:minilm")


@pytest.fixture(scope="module")
def negated(classifier):
    return explain(classifier, NEGATED, zero_value=zero_value)


def zero_value(j: int):
    return editing([ZeroValue(j)])


def scores(s, xs) -> np.ndarray:
    with torch.no_grad():
        return s.score(torch.stack(list(xs))).numpy()


def test_occlusion_puts_the_cue_word_and_its_negation_first(classifier, negated):
    assert negated.target == "log-odds of negative" and classifier.predict(NEGATED)["negative"] > 0.99
    top = [negated.tokens[i] for i in np.argsort(-negated["occlusion"])[:2]]
    assert sorted(top) == ["good", "not"]
    # Without the negation the cue alone decides, for the other label.
    plain = explain(classifier, "I think the old phone was really great for me")
    assert plain.target == "log-odds of positive"
    assert plain.tokens[int(np.argmax(plain["occlusion"]))] == "great"


def test_occlusion_and_curves_are_the_models_own_forwards(classifier, negated):
    s = classifier.scorer(NEGATED)
    x = s.embeds
    T = len(x)
    base = scores(s, [x])[0]
    alone = [torch.where(torch.arange(T)[:, None] == i, 0.0, x) for i in range(T)]
    np.testing.assert_allclose(negated["occlusion"], base - scores(s, alone), atol=1e-5)
    # The deletion curve of a method: the probability after zeroing its top-k tokens, k = 0 … min(T, 10).
    order = np.argsort(-negated["gradient × input"], kind="stable")
    curve = [torch.where(torch.isin(torch.arange(T), torch.tensor(order[:k]))[:, None], 0.0, x)
             for k in range(min(T, DELETION_STEPS) + 1)]
    np.testing.assert_allclose(negated.curves["gradient × input"], 1 / (1 + np.exp(-scores(s, curve))), atol=1e-6)
    assert set(negated) == set(METHODS) and all(v.shape == (T,) for v in negated.values())
    assert "value zeroing" in explain(classifier, NEGATED).missing  # it needs the ZeroValue edit handed in


def test_value_zeroing_of_a_token_no_head_attends_to_changes_nothing(classifier, negated):
    s, j0 = classifier.scorer(NEGATED), 2  # "was"
    knocked = [Knockout(layer, key=j0) for layer in range(classifier.n_layers)]  # no query sees it, in any head
    trace, _, _ = forward(classifier, NEGATED, knocked)
    assert all(trace.received(layer, h)[j0] == 0 for layer in range(trace.n_layers) for h in range(trace.n_heads))
    with torch.no_grad(), editing(knocked):
        kept = float(s.score(s.embeds[None], recorded=True)[0])
    zeroed = value_zeroed(s, lambda j: editing([*knocked, ZeroValue(j)]))
    assert abs(zeroed[j0] - kept) <= 1e-6
    assert abs(zeroed[3] - kept) > 1.0  # zeroing "not", which is read, does change the score
    # explain's value zeroing is the same edit's drop of the score on the unedited model.
    with torch.no_grad():
        base = float(s.score(s.embeds[None])[0])
    np.testing.assert_allclose(negated["value zeroing"], base - value_zeroed(s, zero_value), atol=1e-5)


@pytest.mark.parametrize("key, text", [("builtin:classifier", NEGATED),
                                       ("builtin:minilm", "The cat sat on the mat because it was tired.")])
def test_gradient_times_input_equals_finite_differences(key, text):
    s = attnviz.load(key).scorer(text)
    x = s.embeds.double()
    got = gradient_input(s.score, s.embeds)
    # d/dε f(x with token i scaled by 1 + ε) at 0 is ∂f/∂x_i · x_i: central differences, ε = 1e-3.
    eps = 1e-3
    up = [x.clone().index_put_((torch.tensor([i]),), x[i] * (1 + eps)).float() for i in range(len(x))]
    down = [x.clone().index_put_((torch.tensor([i]),), x[i] * (1 - eps)).float() for i in range(len(x))]
    fd = (scores(s, up) - scores(s, down)) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=0.02, atol=2e-3 * max(1.0, np.abs(fd).max()))
    assert np.abs(got).max() > 1e-3  # not trivially zero


@pytest.mark.parametrize("key, text, steps", [("builtin:classifier", "the film was good", 128),
                                              ("builtin:minilm", "The cat sat on the mat because it was tired.", 64)])
def test_integrated_gradients_are_complete(key, text, steps):
    s = attnviz.load(key).scorer(text)
    fx, f0 = scores(s, [s.embeds, torch.zeros_like(s.embeds)])
    ig = integrated_gradients(s.score, s.embeds, steps)
    assert abs(ig.sum() - (fx - f0)) <= 0.01 * abs(fx - f0)
    assert abs(fx - f0) > 0.1  # a difference that is there to be explained


def test_spearman_and_aopc_equal_their_references(negated):
    table = agreement(negated)
    assert list(table.columns) == ["method", "spearman", "aopc"] and list(table.method) == list(negated)
    for method, rho, area in table.itertuples(index=False):
        assert rho == pytest.approx(spearmanr(negated[method], negated["occlusion"]).statistic, abs=1e-12)
        assert area == pytest.approx(np.mean(negated.curves[method][0] - negated.curves[method]), abs=1e-12)
    assert table.set_index("method").spearman["occlusion"] == pytest.approx(1.0)


def test_the_targets_of_a_causal_lm_and_an_encoder(minilm):
    lm = attnviz.load("builtin:lm")
    e = explain(lm, "anna found a green box near the house . anna found a green", target="box")
    assert e.target == "log-odds of the next token 'box'"
    with torch.no_grad():
        logits = lm.net(torch.tensor([lm.vocab.ids(["[BOS]", *e.tokens[1:]])]))[0][0, -1].double()
    t = lm.vocab.stoi["box"]
    want = logits[t] - torch.cat([logits[:t], logits[t + 1:]]).logsumexp(0)
    assert e.score == pytest.approx(float(want), abs=1e-4)
    enc = explain(minilm, "The cat sat on the mat.")
    with torch.no_grad():
        cls = minilm.net(torch.tensor([minilm.tokenizer("The cat sat on the mat.")["input_ids"]])).last[0, 0]
    assert enc.target == "‖[CLS] output‖" and enc.score == pytest.approx(float(cls.norm()), rel=1e-5)


def test_bad_targets_and_the_forward_budget_are_refused_in_plain_words(classifier, monkeypatch):
    with pytest.raises(ValueError, match="labels are negative, positive"):
        explain(classifier, NEGATED, target="neutral")
    with pytest.raises(ValueError, match="not a word of this model's vocabulary"):
        explain(attnviz.load("builtin:lm"), "the cat sat", target="zebra")
    monkeypatch.setenv("ATTNVIZ_MAX_FORWARDS", "50")
    with pytest.raises(ValueError, match=f"needs {forwards(6):,} forward passes, over this server's budget of 50"):
        explain(classifier, NEGATED)


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_hugging_face_models_are_explained_too(tiny_backend, family):
    model = tiny_backend(family)
    e = explain(model, "the cat sat on the mat", zero_value=zero_value, steps=128)
    s = model.scorer("the cat sat on the mat")
    fx, f0 = scores(s, [s.embeds, torch.zeros_like(s.embeds)])
    assert e.score == pytest.approx(fx, abs=1e-5) and set(e) == set(METHODS)
    if family == "gpt2":  # the tiny BERT's [CLS] norm is its final LayerNorm's, √D whatever the input
        assert abs(e["integrated gradients"].sum() - (fx - f0)) <= 0.01 * abs(fx - f0)
    T = len(s.embeds)
    alone = [torch.where(torch.arange(T)[:, None] == i, 0.0, s.embeds) for i in range(T)]
    np.testing.assert_allclose(e["occlusion"], fx - scores(s, alone), atol=1e-5)


def test_encoder_decoders_are_refused_in_plain_words():
    with pytest.raises(ValueError, match="encoder–decoder models are not supported"):
        explain(attnviz.load("builtin:translator"), "Friday, the 5th of March 2021")
