"""builtin:lm: the decoder-only model, its generated data, its backend, generation and its training loop."""

import random

import numpy as np
import pytest
import torch

from attnviz.analysis.roles import probe_trace, role_scores
from attnviz.backends.lm import TrainedLM, build, load_lm
from attnviz.backends.trained import save_checkpoint
from attnviz.backends.generation import Sampling
from attnviz.training.lm import VOCAB, LMConfig, batch, document, train_lm
from attnviz.nn.attention import causal_mask, scaled_dot_product_attention

pytestmark = pytest.mark.usefixtures("one_torch_thread")
# Sinusoidal: in 30 steps a freshly drawn learned position table is still noise on the loss (the shipped
# model's learned positions are tested through the checkpoint below).
SMALL = LMConfig(steps=30, batch_size=4, d_model=32, n_heads=2, d_ff=64, max_len=112, positional="sinusoidal",
                 eval_every=15, log_every=5)


@pytest.fixture(scope="module")
def trained():
    seen = []
    return train_lm(SMALL, seen.append), seen


def test_documents_are_seeded_known_words_with_repeats():
    a, b = document(random.Random(3), 60), document(random.Random(3), 60)
    assert a == b and len(a) == 60 and all(w in VOCAB.stoi for w in a)
    ids = batch(random.Random(0), 8, 40)
    assert ids.shape == (8, 40) and (ids[:, 0] == VOCAB.stoi["[BOS]"]).all()
    # Nearly every document repeats something (a 4-gram comes back): what induction heads learn from.
    docs = batch(random.Random(1), 200, 100).tolist()
    repeats = [len({tuple(d[i:i + 4]) for i in range(1, 97)}) < 96 for d in docs]
    assert np.mean(repeats) > 0.8


def test_the_language_model_is_causal_and_equals_the_plain_maths():
    torch.manual_seed(0)
    net = build(SMALL, len(VOCAB)).eval()
    ids = torch.randint(4, len(VOCAB), (1, 12))
    logits, out = net(ids)
    changed = ids.clone()
    changed[0, 8:] = 5
    again, _ = net(changed)
    torch.testing.assert_close(logits[0, :8], again[0, :8])  # later tokens never reach earlier positions
    assert not torch.allclose(logits[0, 8:], again[0, 8:])
    # Layer 0 by hand: pre-norm, causal attention, residual, pre-norm feed-forward, residual.
    layer, x = net.decoder.layers[0], out.hidden_states[0]
    attn = layer.self_attn
    h = layer.sub1.norm(x)
    split = lambda t: t.view(1, 12, 2, 16).transpose(1, 2)  # noqa: E731  (1, H, T, Dh)
    ctx, w = scaled_dot_product_attention(split(attn.q_proj(h)), split(attn.k_proj(h)), split(attn.v_proj(h)),
                                          causal_mask(12))
    x = x + attn.out_proj(ctx.transpose(1, 2).reshape(1, 12, 32))
    x = x + layer.ffn(layer.sub2.norm(x))
    torch.testing.assert_close(out.hidden_states[1], x)
    assert torch.equal(w[0, :, 0, 1:], torch.zeros_like(w[0, :, 0, 1:]))


def test_training_logs_loss_and_the_probe_scores(trained):
    result, seen = trained
    evals = [p for p in seen if p.scores["induction"] is not None]
    assert [p.step for p in evals] == [15, 30] and evals[-1].model is result.model
    assert all(0 <= p.scores["induction"] <= 1 and 0 <= p.scores["previous"] <= 1 for p in evals)
    assert result.scores == evals[-1].scores and set(result.scores) == {"induction", "previous"}
    assert seen[-1].loss < seen[0].loss  # it learns something in 30 steps (word frequencies)
    assert [h["step"] for h in result.history] == [p.step for p in seen]


def test_trace_generate_and_checkpoint_round_trip(trained, tmp_path):
    model = trained[0].model
    t = model.trace("Anna saw the red ball. Zebra!")
    assert t.tokens[:4] == ("[BOS]", "anna", "saw", "the") and "[UNK]" in t.tokens and t.kind == "decoder"
    assert t.special.tolist()[0] and np.allclose(np.triu(t.head(1, 0), 1), 0)
    g = model.generate("anna saw the", Sampling(10, temperature=1.0, top_k=5, seed=4))
    again = model.generate("anna saw the", Sampling(10, temperature=1.0, top_k=5, seed=4))
    assert g.trace.tokens == again.trace.tokens and g.prompt_len == 4
    # The trace is one forward over the whole sequence: equal to plain (unrecorded) attention weights.
    ids = torch.tensor([[VOCAB.stoi[w] for w in g.trace.tokens]])
    logits, out = model.net(ids)
    np.testing.assert_allclose(g.trace.attentions, torch.stack(out.attentions)[:, 0].detach().numpy(), atol=1e-5)
    probs = logits[0, g.prompt_len - 1:-1].double().softmax(-1)
    np.testing.assert_allclose(g.top_probs, probs.topk(5).values.detach().numpy(), atol=1e-6)
    # top-k 5: every sampled token is among its step's five likeliest.
    assert all(tok in row for tok, row in zip(g.trace.tokens[g.prompt_len:], g.top_tokens))
    greedy = model.generate("anna saw the", Sampling(6))
    assert list(greedy.trace.tokens[4:]) == [row[0] for row in greedy.top_tokens]
    save_checkpoint(model, tmp_path / "lm")
    back = load_lm(tmp_path / "lm", "copy")
    assert isinstance(back, TrainedLM) and back.info["training"]["steps"] == 30
    np.testing.assert_allclose(back.trace("anna saw the cat").attentions, model.trace("anna saw the cat").attentions)
    with pytest.raises(ValueError, match="empty"):
        model.generate("  ")
    measure, run = model.ablation("anna saw the red ball")
    assert measure == "lm" and float(run(np.zeros((2, 2)))) != float(run(np.ones((2, 2))))


def test_the_shipped_model_has_induction_heads_after_a_previous_token_layer():
    """builtin:lm, as shipped, on the standard probe, meets the issue's bars: a previous-token head (≥ 0.5; layer
    0's head 0 scores 0.82, its other head attends broadly) feeding induction heads (≥ 0.5; both of layer 1's, the
    best 0.98), and the training log shows the induction score rising from nothing."""
    import attnviz

    lm = attnviz.load("builtin:lm")
    s = role_scores(probe_trace(lm))
    assert s["induction"].max() >= 0.85 and (s["induction"][1] >= 0.5).all() and (s["induction"][0] < 0.05).all()
    assert s["previous"][0].max() >= 0.5 and (s["previous"][1] < 0.05).all()
    assert (s["local"][0] > s["local"][1]).all()
    assert lm.info["induction"] == pytest.approx(s["induction"].max(), abs=1e-6)
    assert lm.info["previous"] == pytest.approx(s["previous"].max(), abs=1e-6)
    log = lm.info["history"]
    evals = [h["induction"] for h in log if h["induction"] is not None]
    assert log[-1]["step"] == lm.info["training"]["steps"]
    assert evals[0] < 0.05 and evals[-1] >= 0.85  # the phase change: no induction head at first
    previous = [h["previous"] for h in log if h["previous"] is not None]
    assert previous[0] < 0.05 and previous[-1] >= 0.5
    # On a story it has seen the start of, greedy decoding continues it word for word.
    g = lm.generate("anna saw the red ball . then ben found the box in the garden . anna saw the", Sampling(4))
    assert g.continuation.startswith("red ball .")


def test_cli_trains_the_language_model_through_the_one_loop(tmp_path, capsys):
    """``python -m attnviz.train lm`` takes LMConfig's options and saves a checkpoint whose log is the run's."""
    from attnviz.training.cli import main

    result = main(["lm", "--steps", "4", "--eval-every", "2", "--log-every", "1", "--d-model", "16", "--d-ff", "32",
                   "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"lm: induction {result.scores['induction']:.3f}, previous-token {result.scores['previous']:.3f}" in out
    back = load_lm(tmp_path / "lm", "copy")
    assert back.net.config.d_model == 16 and back.info["history"] == result.history
    assert [h["step"] for h in result.history if h["induction"] is not None] == [2, 4]
