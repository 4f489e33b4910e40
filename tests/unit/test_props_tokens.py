"""Properties on arbitrary unicode (hypothesis): checking text, tokenizing with real tokenizers, labels, escaping.

tests/unit/test_tokens.py covers labels() on token-like strings and subword merging; here the input is any text a
user could paste or a link could carry, lone surrogates included.
"""

import html

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

import attnviz
from attnviz.backends.common import check_text, encode
from attnviz.figures.common import safe
from attnviz.core.tokens import clean, labels, word_labels, word_spans

# Any code point (surrogates too), and a dense mix of what breaks things: markup, templates, subword
# markers, special-token spellings, zero-width joiners, right-to-left marks, combining accents, controls.
TRICKY = list("<>&\"'%{}[]#/\\ \t\n\r\x00\x07\x1b\u200b\u200d\u200f\u202e\u0301\ufffdĠĊ▁😀👩\ud800\udfff") + [
    "[CLS]", "[SEP]", "[PAD]", "<s>", "</s>", "<unk>", "<b>", "<br>", "%{x}", "##", "é", "ש", "م", "字"]
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=80) | st.lists(
    st.sampled_from(TRICKY) | st.text(max_size=4), max_size=30).map("".join)
FAMILIES = ("bert", "gpt2", "llama", "t5", "byt5")  # WordPiece, byte-level BPE, ▁-BPE, Unigram, bytes (slow)
SETTINGS = dict(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=300, deadline=None)
@given(st.none() | st.integers() | st.binary() | st.lists(st.text()) | ANY_TEXT)
def test_check_text_returns_runnable_text_or_says_why(value):
    try:
        text = check_text(value)
    except ValueError as e:  # the only error it may raise, with words a person can read
        assert str(e)[0].isupper() or str(e).startswith("text must")
        assert not isinstance(value, str) or not any(c.isprintable() and not c.isspace() for c in value)
        return
    assert isinstance(value, str)
    assert text.encode("utf-8") and len(text) == len(value)  # encodable (no lone surrogates left), and whole
    assert check_text(text) == text  # checking twice changes nothing
    if value.encode("utf-8", "surrogatepass") == value.encode("utf-8", "replace"):
        assert text == value  # well-formed text is kept as is, however long (the token limits count what they cut)


@pytest.fixture(scope="module")
def tokenizers(tiny_model):
    """family -> the tokenizer as a user loads it, from the saved model folder."""
    return {f: AutoTokenizer.from_pretrained(tiny_model(f)) for f in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_encode_any_text(family, tokenizers):
    tok = tokenizers[family]

    @settings(**SETTINGS)
    @given(ANY_TEXT, st.integers(2, 40))
    def check(value, max_tokens):
        try:
            text = check_text(value)
        except ValueError:
            return
        enc = encode(tok, text, max_tokens)
        T = len(enc.ids)
        assert 1 <= T <= max_tokens and len(enc.tokens) == len(enc.special) == len(enc.word_ids) == T
        assert enc.truncated == max(0, len(tok(text)["input_ids"]) - T) >= 0
        assert (enc.word_ids[enc.special] == -1).all() and (enc.word_ids[~enc.special] >= 0).all()
        words = enc.word_ids[~enc.special]
        assert (np.diff(words) >= 0).all()  # words come in reading order
        names = labels(enc.tokens)
        assert len(names) == T and len(set(names)) == T
        merged = word_labels(enc.tokens, enc.word_ids)
        assert len(merged) == len(word_spans(enc.word_ids)) and len(set(merged)) == len(merged)

    check()


@settings(max_examples=300, deadline=None)
@given(st.lists(ANY_TEXT, max_size=12))
def test_labels_of_any_strings_are_unique_readable_and_escape_losslessly(tokens):
    names = labels(tokens)
    assert len(names) == len(tokens) and len(set(names)) == len(names)
    for name, token in zip(names, tokens):
        assert name and name == name.strip(" ") and name.startswith(clean(token))
    shown = safe(names)
    assert not any(c in s for s in shown for c in "<>")  # plotly sees no tag
    assert [html.unescape(s) for s in shown] == names  # and the reader sees the label itself
    assert len(set(shown)) == len(shown)  # still unique: the axes are categorical


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_TEXT)
def test_any_text_gives_a_consistent_trace_or_a_value_error(value):
    try:
        t = attnviz.trace(value, "builtin:minilm")
    except ValueError as e:
        assert "empty" in str(e)
        return
    T = t.n_tokens
    assert t.attentions.shape == (6, 12, T, T) and t.hidden_states.shape == (7, T, 384)
    assert len(t.tokens) == len(t.special) == len(t.word_ids) == T
    np.testing.assert_allclose(t.attentions.sum(-1), 1.0, atol=1e-4)
    assert np.isfinite(t.hidden_states).all()
