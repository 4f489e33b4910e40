"""Generation on causal models: the continuation is the model's own generate() output, and its trace is one
fresh forward over prompt + continuation."""

import numpy as np
import pytest
import torch
import transformers as tf

from attnviz.backends.generation import Sampling

PROMPT = "The quick brown fox jumps over the lazy dog. The quick"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def reference(tiny_model):
    """The same folder loaded by transformers alone, with eager attention: the reference for everything."""
    cache = {}

    def get(family):
        if family not in cache:
            folder = tiny_model(family)
            net = tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
            cache[family] = net, tf.AutoTokenizer.from_pretrained(folder)
        return cache[family]

    return get


SETTINGS = [Sampling(12), Sampling(12, temperature=1.3, top_k=20, seed=7), Sampling(12, temperature=0.8, seed=3)]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("s", SETTINGS, ids=["greedy", "top-k", "sampled"])
def test_continuation_equals_generate_with_the_same_seed(tiny_backend, reference, family, s):
    backend = tiny_backend(family)
    net, tok = reference(family)
    g = backend.generate(PROMPT, s)
    ids = tok(PROMPT, return_tensors="pt")["input_ids"]  # (1, T)
    options = dict(do_sample=False) if s.greedy else dict(do_sample=True, temperature=s.temperature,
                                                         top_k=s.top_k or None, top_p=None)
    torch.manual_seed(s.seed)
    with torch.inference_mode():
        want = net.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=s.max_new_tokens,
                            num_beams=1, pad_token_id=tok.eos_token_id, **options)[0].tolist()
    got = [tok.convert_tokens_to_ids(t) for t in g.trace.tokens]
    assert got == want
    assert g.prompt_len == ids.shape[1] and g.n_new == len(want) - ids.shape[1] > 0
    assert g.continuation == tok.decode(want[ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_the_trace_equals_a_fresh_forward_over_the_whole_sequence(tiny_backend, reference, family):
    backend = tiny_backend(family)
    net, tok = reference(family)
    g = backend.generate(PROMPT, Sampling(16, temperature=1.0, seed=1))
    ids = torch.tensor([[tok.convert_tokens_to_ids(t) for t in g.trace.tokens]])  # (1, T)
    with torch.inference_mode():
        out = net(ids, output_attentions=True, output_hidden_states=True)
    want = torch.stack(out.attentions)[:, 0].numpy()  # (L, H, T, T)
    np.testing.assert_allclose(g.trace.attentions, want, atol=1e-5)
    np.testing.assert_allclose(g.trace.hidden_states, torch.stack(out.hidden_states)[:, 0].numpy(), atol=1e-4)
    assert g.trace.kind == "decoder"
    # Top-5 at step s: the model's distribution at the row that predicts token prompt_len + s.
    probs = out.logits[0, g.prompt_len - 1:-1].double().softmax(-1)  # (N, V)
    top = probs.topk(5)
    np.testing.assert_array_equal(g.top_ids, top.indices.numpy())
    np.testing.assert_allclose(g.top_probs, top.values.numpy(), atol=1e-6)
    assert g.top_probs.shape == (g.n_new, 5) and (np.diff(g.top_probs, axis=1) <= 0).all()
    assert g.top_tokens[0] == tuple(tok.convert_ids_to_tokens(top.indices[0].tolist()))


def test_greedy_follows_the_top_token_and_bad_settings_are_plain_errors(tiny_backend):
    g = tiny_backend("gpt2").generate(PROMPT, Sampling(8))
    ids = [tiny_backend("gpt2").tokenizer.convert_tokens_to_ids(t) for t in g.trace.tokens]
    assert ids[g.prompt_len:] == g.top_ids[:, 0].tolist()  # greedy: each new token is the step's top token
    for bad in (dict(max_new_tokens=0), dict(temperature=-1), dict(top_k=-2), dict(max_new_tokens=10_000)):
        with pytest.raises(ValueError):
            Sampling(**bad)
    with pytest.raises(ValueError, match="causal language model"):
        tiny_backend("bert").generate(PROMPT)
    with pytest.raises(ValueError, match="empty"):
        tiny_backend("gpt2").generate("   ")
    with pytest.raises(ValueError, match="positions"):
        tiny_backend("gpt2").generate("word " * 500)


class Stop(Exception):
    pass


@pytest.mark.parametrize("model", ["gpt2", "builtin:lm"])
def test_on_step_counts_every_new_token_and_can_stop_the_generation(tiny_backend, model):
    """The Generate page's progress bar and its stop between two tokens (a closed tab) ride on ``on_step``."""
    import attnviz

    backend = attnviz.load(model) if model.startswith("builtin:") else tiny_backend(model)
    prompt = "anna saw the red ball . then ben found the" if model == "builtin:lm" else PROMPT
    s = Sampling(12, temperature=1.3, top_k=20, seed=7)
    steps = []
    g = backend.generate(prompt, s, on_step=lambda done, most: steps.append((done, most)))
    assert steps == [(k, 12) for k in range(1, g.n_new + 1)] and g.n_new > 0
    again = backend.generate(prompt, s)  # the callback changes nothing the model does
    assert again.trace.tokens == g.trace.tokens

    def stop_at_3(done, most):
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        backend.generate(prompt, s, on_step=stop_at_3)
    assert backend.generate(prompt, s).trace.tokens == g.trace.tokens  # the lock was let go, the model unchanged
