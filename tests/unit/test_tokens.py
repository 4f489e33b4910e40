"""Display labels: subword markers, unique labels, word spans and subword merging."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from attnviz.backends.builtin import minilm_path
from attnviz.backends.common import encode
from attnviz.core.tokens import clean, labels, merge_matrix, merge_subwords, word_labels, word_spans


@pytest.mark.parametrize("token,shown", [
    ("##ing", "ing"), ("##", "##"), ("[CLS]", "[CLS]"), ("hello", "hello"),  # WordPiece
    # GPT-2 byte-level BPE
    ("Ġhello", "hello"), ("Ġ", "␣"), ("ĠĠ", "␣"), ("Ċ", "↵"), ("ĊĊ", "↵↵"), ("ĉ", "⇥"), ("ĠĊ", "↵"),
    ("▁the", "the"), ("▁", "␣"), ("▁▁▁", "␣"), ("</s>", "</s>"),  # SentencePiece
    ("<0x0A>", "↵"), ("<0x09>", "⇥"), ("\n", "↵"), ("a\r\nb", "a↵b"),  # byte fallback, raw line breaks
    ("<b>", "<b>"),  # markup stays text here; escaping is the figures' job
])
def test_clean(token, shown):
    assert clean(token) == shown


def test_labels_number_repeats_by_position():
    assert labels(["[CLS]", "the", "cat", "Ġthe", "##cat", "[SEP]"]) == [
        "[CLS]", "the (1)", "cat (2)", "the (3)", "cat (4)", "[SEP]"]


def test_labels_stay_unique_when_a_token_already_reads_like_a_suffix():
    assert labels(["a", "a", "a (1)"]) == ["a (0)", "a (1) (1)", "a (1) (2)"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "a (1)", "a (0)", "a (1) (1)", "##a", "Ġa", "▁a", "", " ", "Ġ", "(1)"]))
       | st.lists(st.text(max_size=6), max_size=20))
def test_labels_are_unique_per_position(tokens):
    out = labels(tokens)
    assert len(out) == len(tokens) and len(set(out)) == len(out)
    for label, token in zip(out, tokens):
        assert label.startswith(clean(token))


def test_word_spans_keep_specials_alone():
    assert word_spans([-1, 0, 0, 1, -1, -1]) == [(0, 1), (1, 3), (3, 4), (4, 5), (5, 6)]
    assert word_spans([0, 0, 1, 0]) == [(0, 2), (2, 3), (3, 4)]  # a word id seen again is a new span
    assert word_spans([]) == []


def test_merge_subwords_by_hand():
    """[CLS] un ##able cat [SEP]: key pieces are summed, query pieces averaged."""
    attn = np.array([
        [.5, .1, .1, .2, .1],
        [.2, .2, .2, .2, .2],
        [.0, .4, .4, .1, .1],
        [.1, .3, .3, .2, .1],
        [.25, .25, .25, .25, 0],
    ])
    want = np.array([
        [.5, .2, .2, .1],
        [.1, .6, .15, .15],  # mean of rows "un" [.2, .4, .2, .2] and "##able" [0, .8, .1, .1]
        [.1, .6, .2, .1],
        [.25, .5, .25, 0],
    ])
    np.testing.assert_allclose(merge_subwords(attn, [-1, 0, 0, 1, -1]), want, atol=1e-7)


@st.composite
def attention_and_words(draw):
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))  # pieces per word
    words = [w for w, n in enumerate(sizes) for _ in range(n)]
    word_ids = [-1] + words + [-1]
    T = len(word_ids)
    seed = draw(st.integers(0, 2**32 - 1))
    a = np.random.default_rng(seed).random((2, 3, T, T))
    return a / a.sum(-1, keepdims=True), word_ids, len(sizes)


@settings(max_examples=100, deadline=None)
@given(attention_and_words())
def test_merged_rows_still_sum_to_one(case):
    attn, word_ids, n_words = case
    merged = merge_subwords(attn, word_ids)
    assert merged.shape == (2, 3, n_words + 2, n_words + 2)
    np.testing.assert_allclose(merged.sum(-1), 1, atol=1e-6)
    m = merge_matrix(word_ids)
    assert m.shape == (n_words + 2, len(word_ids)) and (m.sum(0) == 1).all()


def test_word_labels_join_pieces():
    assert word_labels(["[CLS]", "un", "##able", "[SEP]"], [-1, 0, 0, -1]) == ["[CLS]", "unable", "[SEP]"]
    assert word_labels(["Ġun", "able", "Ġto"], [0, 0, 1]) == ["unable", "to"]
    assert word_labels(["▁go", "▁go"], [0, 1]) == ["go (0)", "go (1)"]


def test_word_labels_with_the_real_tokenizer():
    """WordPiece splits long words; merging the pieces gives the words back."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    enc = encode(tokenizer, "Unbelievably, tokenization works", 512)
    assert len(enc.tokens) > 6  # really split into pieces
    assert word_labels(enc.tokens, enc.word_ids) == ["[CLS]", "unbelievably", ",", "tokenization", "works", "[SEP]"]
    merged = merge_subwords(np.full((len(enc.tokens),) * 2, 1 / len(enc.tokens)), enc.word_ids)
    np.testing.assert_allclose(merged.sum(-1), 1, atol=1e-6)
