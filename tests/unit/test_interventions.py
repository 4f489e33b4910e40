"""Edits inside attention (attnviz.analysis.interventions) against references: a no-op edit changes nothing, the edited
forward of tiny GPT-2 and Llama equals an eager re-implementation of the same edit, and on builtin:lm's repeated-
token probe the induction heads are what the model needs and what patching finds."""

import numpy as np
import pytest
import torch
import transformers as tf
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from attnviz import load
from attnviz.analysis.roles import repeated_tokens, role_scores
from attnviz.backends.common import encode
from attnviz.backends.hf import load_hf
from attnviz.analysis.interventions import (Knockout, LabelProb, LogitDiff, Pattern, ZeroValue, forward, patch_heads, run)


@pytest.fixture(scope="module")
def lm():
    return load("builtin:lm")


@pytest.fixture(scope="module")
def probe(lm):
    return repeated_tokens(lm.plain_ids(), 50, 0)  # 50 random words, then the same 50 (after [BOS])


def logits(backend, text, edits=()):
    return forward(backend, text, tuple(edits))[1].double()


# --- an edit with nothing to do -------------------------------------------------------------------------------

def test_knockout_of_an_unseen_key_changes_nothing(lm, probe):
    base = logits(lm, probe)
    for layer in range(lm.n_layers):  # causal: query 3 never sees key 10
        edited = logits(lm, probe, [Knockout(layer, 1, query=3, key=10)])
        assert torch.allclose(edited, base, atol=1e-6, rtol=0)
    assert not torch.allclose(logits(lm, probe, [Knockout(1, 1, query=60, key=10)]), base, atol=1e-6, rtol=0)


def test_pattern_with_the_heads_own_weights_changes_nothing(lm, probe):
    effect = run(lm, probe, [])
    own = [Pattern(layer, head, effect.base.trace.head(layer, head))
           for layer in range(lm.n_layers) for head in range(lm.n_heads)]
    assert torch.allclose(logits(lm, probe, own), logits(lm, probe), atol=1e-5, rtol=0)
    np.testing.assert_allclose(run(lm, probe, own).edited.logprobs, effect.base.logprobs, atol=1e-5)


def test_run_without_edits_gives_the_same_run_twice_and_the_models_own_logits(lm, probe):
    effect = run(lm, probe, [])
    assert effect.base is effect.edited and effect.edited.logprobs.shape == (len(probe),)  # T − 1 with [BOS]
    ids = torch.tensor([[lm.bos, *probe]])
    with torch.inference_mode():
        own = torch.log_softmax(lm.net(ids)[0][0].double(), -1)  # plain forward, no recorder, no editor
    expected = own[:-1].gather(-1, ids[0, 1:, None])[:, 0].numpy()
    np.testing.assert_allclose(effect.base.logprobs, expected, atol=1e-5)
    assert np.all(effect.change == 0)


def test_edited_trace_shows_the_edited_pattern(lm, probe):
    effect = run(lm, probe, [Pattern(1, 0, "previous"), Knockout(0, 1, key=0)])
    prev = effect.edited.trace.head(1, 0)
    T = prev.shape[0]
    expected = np.eye(T, k=-1)
    expected[0, 0] = 1.0  # the first query has no key before it: on itself
    np.testing.assert_array_equal(prev, expected)
    knocked = effect.edited.trace.head(0, 1)
    assert np.all(knocked[1:, 0] == 0) and np.allclose(knocked[1:].sum(-1), 1, atol=1e-5)
    assert knocked[0, 0] == 0  # query 0 sees only key 0: it sees nothing now
    np.testing.assert_allclose(effect.edited.trace.column(0, 1, 0), knocked[:, 0], atol=1e-7)


def test_bad_edits_are_refused_in_plain_words(lm, probe):
    with pytest.raises(ValueError, match="layer 7 is out of range"):
        run(lm, probe, [Knockout(7, 0)])
    with pytest.raises(ValueError, match="key 500 is out of range"):
        run(lm, probe, [Knockout(0, 0, key=500)])
    with pytest.raises(ValueError, match="Unknown pattern 'diagonal'"):
        run(lm, probe, [Pattern(0, 0, "diagonal")])
    with pytest.raises(ValueError, match=r"finite \(101, 101\) array"):
        run(lm, probe, [Pattern(0, 0, np.ones((3, 3)))])


# --- the induction circuit of builtin:lm ----------------------------------------------------------------------

def repeated_half(effect):
    """Mean log-probability of the repeated half's next tokens (entries 50..: tokens 51.. after [BOS])."""
    return effect.base.logprobs[50:].mean(), effect.edited.logprobs[50:].mean()


def test_knocking_out_the_induction_heads_breaks_the_repeat(lm, probe):
    scores = role_scores(run(lm, probe, []).base.trace)
    induction = [(1, h) for h in range(lm.n_heads) if scores["induction"][1, h] > 0.5]
    assert len(induction) == 2  # both layer-1 heads, found by their scores
    base, edited = repeated_half(run(lm, probe, [Knockout(*head) for head in induction]))
    assert base - edited >= 2.0
    # The head with the lowest induction and previous-token scores plays no part in the circuit (the
    # previous-token head does: the induction heads read its output).
    other = min(np.ndindex(lm.n_layers, lm.n_heads), key=lambda lh: scores["induction"][lh] + scores["previous"][lh])
    assert other not in induction
    base_o, edited_o = repeated_half(run(lm, probe, [Knockout(*other)]))
    assert base_o - edited_o < 0.25 * (base - edited)


def test_patching_finds_the_induction_heads_first(lm, probe):
    scores = role_scores(run(lm, probe, []).base.trace)
    clean = probe[:50] + probe[:30]  # the last word repeats word 30: induction predicts word 31
    corrupted = list(clean)
    corrupted[30] = next(i for i in lm.plain_ids() if i not in probe)  # word 31 of the first half changed
    metric = LogitDiff(lm.vocab.itos[clean[30]], lm.vocab.itos[corrupted[30]])
    done = []
    result = patch_heads(lm, clean, corrupted, metric, progress=lambda n, total: done.append((n, total)))
    assert done[-1] == (4, 4) and result.clean > 0 > result.corrupted
    order = [np.unravel_index(i, result.restored.shape) for i in np.argsort(-result.restored, axis=None)]
    top = {tuple(int(x) for x in lh) for lh in order[:2]}
    assert top == {(1, h) for h in range(lm.n_heads) if scores["induction"][1, h] > 0.5}
    assert metric(lm, logits(lm, corrupted)) == pytest.approx(result.corrupted, abs=1e-9)  # patching's 0


def test_patching_needs_prompts_of_one_length(lm, probe):
    with pytest.raises(ValueError, match="same token count"):
        patch_heads(lm, probe[:10], probe[:11], LogitDiff(lm.vocab.itos[probe[0]], lm.vocab.itos[probe[1]]))


def test_patching_is_bounded_by_max_forwards(lm, probe, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_FORWARDS", "3")
    with pytest.raises(ValueError, match="ATTNVIZ_MAX_FORWARDS"):
        patch_heads(lm, probe[:10], probe[1:11], LogitDiff(lm.vocab.itos[probe[0]], lm.vocab.itos[probe[1]]))


# --- value zeroing (Mohebbi et al. 2023) ----------------------------------------------------------------------

def test_value_zeroing_removes_exactly_the_tokens_contribution(lm, probe):
    """With token j's value zeroed in layer 0, every other position's attention output loses α_ij v_j; j's own
    row keeps it. Checked on the layer's outputs, kept by the editor."""
    j = 5
    _, _, base = forward(lm, probe, (), keep=True)
    _, _, zeroed = forward(lm, probe, (ZeroValue(j, layer=0),), keep=True)
    trace = run(lm, probe, []).base.trace
    w = np.stack([trace.head(0, h) for h in range(lm.n_heads)])  # (H, T, T)
    diff = base.outputs[0] - zeroed.outputs[0]  # (H, T, Dv): α_ij v_j for i ≠ j, 0 at i = j
    assert np.abs(diff[:, j]).max() == 0 and np.abs(diff[:, :j]).max() == 0  # causal: earlier rows never saw j
    # α_ij v_j has rank one per head: the rows of diff are the weights times one vector, v_j
    v_j = diff[:, j + 1] / w[:, j + 1, j, None]  # (H, Dv)
    np.testing.assert_allclose(diff[:, j + 1:], w[:, j + 1:, j, None] * v_j[:, None], atol=1e-5)


# --- Hugging Face models: the interface's edit equals an eager re-implementation ------------------------------

EDITS = (Knockout(0, 1, key=2), Knockout(1, 3, query=6), Pattern(1, 0, "previous"), Pattern(0, 2, "first"),
         ZeroValue(3, layer=1, head=1), ZeroValue(1, layer=0))


def _reference(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention written out, with EDITS applied as masks and replaced weights: (out (B, Tq, H, Dv), w)."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)  # (B, H, Tk, Dh)
    T = query.shape[2]
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = query @ key.transpose(-1, -2) * scaling  # (B, H, T, T)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~allowed, float("-inf"))
    if attention_mask is not None:
        scores = scores + attention_mask[..., :T] if attention_mask.dtype != torch.bool \
            else scores.masked_fill(~attention_mask, float("-inf"))
    layer = module.layer_idx
    for e in EDITS:
        if isinstance(e, Knockout) and e.layer == layer:
            rows = slice(None) if e.query is None else e.query
            keys = slice(None) if e.key is None else e.key
            scores[:, e.head, rows, keys] = float("-inf")
    w = scores.softmax(-1).nan_to_num(0.0)
    for e in EDITS:
        if isinstance(e, Pattern) and e.layer == layer:
            pattern = torch.zeros(T, T)
            if e.weights == "previous":
                pattern[torch.arange(T), (torch.arange(T) - 1).clamp(min=0)] = 1
            else:
                pattern[:, 0] = 1
            w[:, e.head] = pattern
        if isinstance(e, ZeroValue) and e.layer == layer:
            heads = range(w.shape[1]) if e.head is None else [e.head]
            for h in heads:
                own = w[:, h, e.key, e.key].clone()
                w[:, h, :, e.key] = 0
                w[:, h, e.key, e.key] = own
    return (w @ value).transpose(1, 2).contiguous(), w  # (B, T, H, Dv)


def spread(folder, out):
    """The tiny model in ``folder`` with weights of some spread (std 0.25), saved to ``out``: with the default
    init every head is near uniform and an edit would hide below the tolerance."""
    net = tf.AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(1)
        for p in net.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.25)
    net.save_pretrained(out)
    tf.AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    return out


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_hf_edits_equal_an_eager_reimplementation(family, tiny_model, tmp_path):
    folder = spread(tiny_model(family), tmp_path / family)
    backend = load_hf(str(folder))
    assert backend.capture == "interface"
    text = "The quick brown fox jumps over the lazy dog."
    edited = logits(backend, text, EDITS)
    tf.AttentionInterface.register("attnviz_test_reference", _reference)
    ALL_MASK_ATTENTION_FUNCTIONS.register("attnviz_test_reference", sdpa_mask)
    ref = tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="attnviz_test_reference").eval()
    ids = torch.tensor([encode(backend.tokenizer, text, backend.max_tokens).ids])  # (1, T)
    with torch.inference_mode():
        expected = ref(input_ids=ids).logits[0].double()
        plain = tf.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()(input_ids=ids)
    assert (edited - plain.logits[0].double()).abs().max() > 1e-2  # the edits matter
    torch.testing.assert_close(edited, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits(backend, text), plain.logits[0].double(), atol=1e-5, rtol=0)


def test_hf_knockout_of_an_unseen_key_changes_nothing(tiny_backend):
    backend = tiny_backend("gpt2")
    text = "Hello world, hello again and again."
    base = logits(backend, text)
    assert torch.equal(logits(backend, text, [Knockout(0, 1, query=2, key=5), Knockout(1, 0, query=0, key=1)]), base)


@pytest.mark.parametrize("family", ["mistral", "gemma2", "qwen2"])
def test_windowed_and_soft_capped_families_edit_inside_attention(family, tiny_model, tiny_backend):
    """A sliding window (Mistral, Gemma 2's layer 0), soft-capping (Gemma 2) and query biases (Qwen2): the
    unedited run is the model's own eager forward, a no-op edit changes nothing, and a named pattern respects
    the window."""
    backend = tiny_backend(family)
    text = "The quick brown fox jumps over the lazy dog again and again."
    base = logits(backend, text)
    ids = torch.tensor([encode(backend.tokenizer, text, backend.max_tokens).ids])  # (1, T)
    eager = tf.AutoModelForCausalLM.from_pretrained(tiny_model(family), attn_implementation="eager").eval()
    with torch.inference_mode():
        torch.testing.assert_close(base, eager(input_ids=ids).logits[0].double(), atol=1e-5, rtol=0)
    assert torch.equal(logits(backend, text, [Knockout(0, 1, query=2, key=7)]), base)
    effect = run(backend, text, [Pattern(0, 0, "uniform")])
    seen = effect.base.trace.head(0, 0) > 0  # (T, T) the keys each query may see (no weight underflows here)
    assert seen[-1].sum() == (ids.shape[1] if family == "qwen2" else 5)  # the window of 5 in force
    np.testing.assert_allclose(effect.edited.trace.head(0, 0), seen / seen.sum(-1, keepdims=True), atol=1e-7)
    assert np.abs(effect.edited.logprobs - effect.base.logprobs).max() > 1e-4


# --- classifiers and encoders ---------------------------------------------------------------------------------

def test_classifier_gives_label_probabilities_and_patching_a_label():
    clf = load("builtin:classifier")
    text = "honestly , the movie was great"
    effect = run(clf, text, [Knockout(layer, head) for layer in range(clf.n_layers) for head in range(clf.n_heads)])
    expected = clf.predict(text)
    np.testing.assert_allclose(effect.base.probs, [expected[label] for label in effect.base.labels], atol=1e-6)
    assert np.isclose(effect.edited.probs.sum(), 1) and np.abs(effect.edited.probs - effect.base.probs).max() > 1e-3
    label = effect.base.labels[int(effect.base.probs.argmax())]
    other = "honestly , the movie was bad"
    result = patch_heads(clf, text, other, LabelProb(label))
    assert result.restored.shape == (clf.n_layers, clf.n_heads)
    assert result.clean == pytest.approx(expected[label], abs=1e-6) and result.corrupted < 0.5
    # The definition, from the patched runs' own probabilities (saturated here: no single head restores much).
    np.testing.assert_allclose(result.restored, (result.patched - result.corrupted) / (result.clean - result.corrupted))


def test_encoder_change_is_each_layers_output_difference():
    enc = load("builtin:minilm")
    text = "The cat sat on the mat."
    effect = run(enc, text, [Knockout(2, 5)])
    L, T = enc.n_layers, effect.base.trace.n_tokens
    assert effect.kind == "encoder" and effect.change.shape == (L, T)
    assert np.all(effect.change[:2] == 0) and effect.change[2].min() > 0  # layers before the edit are untouched
    hs = effect.edited.trace.hidden_states.astype(np.float64) - effect.base.trace.hidden_states
    np.testing.assert_allclose(effect.change, np.linalg.norm(hs[1:], axis=-1))
