"""The Interventions page in real Streamlit (AppTest): an edit from the link or the widgets changes the charted
probabilities exactly as the library's run does; bad edits get notes; patching draws the library's map."""

import numpy as np
import pytest

import attnviz
from attnviz.analysis.roles import repeated_tokens
from attnviz.analysis.interventions import Knockout, LogitDiff, Pattern, patch_heads, run as run_edits
from helpers import decode, ok, open_page
from test_analysis_pages import charts, select

PAGE = "pages/11_Interventions.py"


@pytest.fixture(scope="module")
def lm():
    return attnviz.load("builtin:lm")


@pytest.fixture(scope="module")
def text(lm):
    ids = repeated_tokens(lm.plain_ids(), 20, 0)
    return lm.vocab.decode(ids)  # 20 random words, then the same 20


def bars(at):
    before, after = charts(at)["next_token_bars"]["data"]
    return decode(before["y"]), decode(after["y"])


def test_edits_from_the_link_change_the_charted_probabilities(lm, text):
    at = ok(open_page(PAGE, model="builtin:lm", text=text, edits="ko:1.0,ko:1.1"))
    effect = run_edits(lm, text, [Knockout(1, 0), Knockout(1, 1)])
    before, after = bars(at)
    np.testing.assert_allclose(before, np.exp(effect.base.logprobs), atol=1e-6)
    np.testing.assert_allclose(after, np.exp(effect.edited.logprobs), atol=1e-6)
    assert after[21:].mean() < before[21:].mean() - 0.3  # the repeated half is no longer predicted
    top = charts(at)["top_k_bars"]["data"]
    np.testing.assert_allclose(decode(top[1]["x"]), effect.edited.top_probs[-1], atol=1e-6)
    assert list(decode(top[0]["customdata"])) == list(effect.base.top_tokens[-1])


def test_bad_edits_in_the_link_get_notes(text):
    at = ok(open_page(PAGE, model="builtin:lm", text=text, edits="ko:9.0,pat:0.1:diagonal,zz,pat:0.1:previous"))
    notes = [w.value for w in at.warning]
    assert any("ko:9.0" in n and "layer 9 is out of range" in n for n in notes)
    assert any("pat:0.1:diagonal" in n and "Unknown pattern" in n for n in notes)
    assert any("zz" in n and "not one of" in n for n in notes)
    before, after = bars(at)
    assert np.abs(after - before).max() > 1e-3  # the one good edit still runs


def test_widgets_add_an_edit(lm, text):
    at = ok(open_page(PAGE, model="builtin:lm", text=text))
    before, after = bars(at)
    np.testing.assert_array_equal(before, after)  # no edits: one run in both
    at.selectbox(key="layer").set_value(0)
    at.selectbox(key="head").set_value(0)
    at.radio(key="edit_action").set_value("previous")
    at = ok(at.run())
    at = ok(at.button(key="edit_add").click().run())
    assert at.text_input(key="edits").value == "pat:0.0:previous"
    effect = run_edits(lm, text, [Pattern(0, 0, "previous")])
    np.testing.assert_allclose(bars(at)[1], np.exp(effect.edited.logprobs), atol=1e-6)


def test_a_click_on_the_grid_picks_the_head(text):
    at = ok(open_page(PAGE, model="builtin:lm", text=text))
    at = ok(select(at, "edit_grid", {"x": 1, "y": 1, "point_index": 3, "curve_number": 1}))
    assert at.session_state["layer"] == 1 and at.session_state["head"] == 1


def test_a_click_on_a_heatmap_cell_picks_query_and_key(lm, text):
    at = ok(open_page(PAGE, model="builtin:lm", text=text, layer="1", head="0"))
    T = len(text.split()) + 1  # [BOS] and the words
    points = charts(at)["edit_heatmap"]["data"][1]
    assert len(decode(points["x"])) == T * T  # one clickable point per cell
    at = ok(select(at, "edit_heatmap", {"x": "x", "y": "y", "point_index": 30 * T + 11, "curve_number": 1}))
    assert at.session_state["edit_query"] == 30 and at.session_state["edit_key"] == 11
    at = ok(at.button(key="edit_add").click().run())
    assert at.text_input(key="edits").value == "ko:1.0:q30:k11"
    effect = run_edits(lm, text, [Knockout(1, 0, query=30, key=11)])
    before, after = bars(at)
    np.testing.assert_allclose(after, np.exp(effect.edited.logprobs), atol=1e-6)
    assert np.abs(after - before)[:30].max() == 0 and np.abs(after - before)[30] > 0  # only query 30 moves


def test_patching_draws_the_librarys_map(lm, text):
    words = text.split()
    clean = " ".join(words[:30])  # 20 words, then the first 10 again: the next word is word 10
    wrong = next(w for w in lm.vocab.itos[5:] if w not in words and w.isalpha())
    corrupted = " ".join(words[:10] + [wrong] + words[11:30])
    at = ok(open_page(PAGE, model="builtin:lm", text=clean, corrupted=corrupted))
    good, bad = at.text_input(key="patch_good").value, at.text_input(key="patch_bad").value
    assert good == words[10] and bad == wrong  # the default tokens: each prompt's own top prediction
    at = ok(at.button(key="patch").click().run())
    heat = charts(at)["patch_map"]["data"][0]
    expected = patch_heads(lm, clean, corrupted, LogitDiff(good, bad)).restored
    np.testing.assert_allclose(decode(heat["z"]), expected, atol=1e-6)
    assert at.session_state["patching"][1].restored.argmax() // lm.n_heads == 1  # a layer-1 head restores most
    at = select(at, "patch_map", {"x": 1, "y": 1, "point_index": 3, "curve_number": 1})  # opens it on Attention
    assert at.session_state["layer"] == 1 and at.session_state["head"] == 1


def test_patching_prompts_of_two_lengths_get_a_message(text):
    words = text.split()
    at = ok(open_page(PAGE, model="builtin:lm", text=" ".join(words[:30]), corrupted=" ".join(words[:29])))
    at = at.button(key="patch").click().run()
    assert not at.exception and any("same token count" in e.value for e in at.error)


def test_a_classifier_shows_its_labels_before_and_after():
    text = "honestly , the movie was great"
    at = ok(open_page(PAGE, model="builtin:classifier", text=text, edits="ko:0,ko:1"))
    before, after = charts(at)["label_bars"]["data"]
    effect = run_edits(attnviz.load("builtin:classifier"), text, [Knockout(0), Knockout(1)])
    np.testing.assert_allclose(decode(before["y"]), effect.base.probs, atol=1e-6)
    np.testing.assert_allclose(decode(after["y"]), effect.edited.probs, atol=1e-6)
    assert list(decode(before["customdata"])) == ["negative", "positive"]


def test_an_encoder_shows_each_layers_change():
    text = "The cat sat on the mat."
    at = ok(open_page(PAGE, model="builtin:minilm", text=text, edits="pat:3.2:uniform"))
    heat = charts(at)["change_map"]["data"][0]
    effect = run_edits(attnviz.load("builtin:minilm"), text, [Pattern(3, 2, "uniform")])
    np.testing.assert_allclose(decode(heat["z"]), effect.change, rtol=1e-6)
    assert decode(heat["z"])[:3].max() == 0 and decode(heat["z"])[3].min() > 0
    assert "patch" not in [b.key for b in at.button]  # patching needs an output to measure


def test_an_encoder_decoder_is_refused_in_plain_words():
    at = ok(open_page(PAGE, model="builtin:translator", text="the cat sat"))
    assert any("encoder–decoder models are not supported" in i.value for i in at.info)
    assert not at.get("plotly_chart")


def test_hostile_edits_in_the_link_are_quoted_as_data(text):
    from test_escaping import assert_inert

    hostile = "<a href='http://x.example'>x</a>,**now**,![i](http://x.example/i.png)"
    at = ok(open_page(PAGE, model="builtin:lm", text=text, edits=hostile))
    notes = [w.value for w in at.warning]
    assert len(notes) == 3
    for body in notes:
        assert_inert(body)


def test_a_long_texts_heatmap_sends_no_point_per_cell(lm):
    text = lm.vocab.decode(repeated_tokens(lm.plain_ids(), 40, 0))  # 81 tokens with [BOS]
    at = ok(open_page(PAGE, model="builtin:lm", text=text))
    assert len(charts(at)["edit_heatmap"]["data"]) == 1  # the heatmap alone
    assert any("Cells take clicks up to 64 tokens" in c.value for c in at.caption)


def test_prompts_that_barely_differ_on_the_metric_get_a_warning_and_no_shares(lm, text):
    """Issue 57: a corruption far from what the prediction depends on moves the metric by a third of a logit; its
    shares would divide by that gap. The page says so, suggests a corruption that moves it, and maps the change."""
    words = text.split()
    clean = " ".join(words[:30])
    wrong = next(w for w in lm.vocab.itos[5:] if w not in words and w.isalpha())
    corrupted = " ".join([wrong] + words[1:30])  # the first word: the induction reads word 9, not this
    at = ok(open_page(PAGE, model="builtin:lm", text=clean, corrupted=corrupted))
    at.text_input(key="patch_bad").set_value(wrong)
    at = ok(at.button(key="patch").click().run())
    expected = patch_heads(lm, clean, corrupted, LogitDiff(words[10], wrong))
    assert expected.barely and abs(expected.clean - expected.corrupted) < LogitDiff.small
    (warning,) = [w.value for w in at.warning]
    assert "barely differ on the metric" in warning and "pick a corruption that moves the metric" in warning
    heat = charts(at)["patch_map"]
    np.testing.assert_allclose(decode(heat["data"][0]["z"]), expected.patched - expected.corrupted, atol=1e-6)
    assert "patched − corrupted" in heat["layout"]["title"]["text"]


def test_prompts_that_differ_get_no_warning(lm, text):
    words = text.split()
    wrong = next(w for w in lm.vocab.itos[5:] if w not in words and w.isalpha())
    clean, corrupted = " ".join(words[:30]), " ".join(words[:10] + [wrong] + words[11:30])
    result = patch_heads(lm, clean, corrupted, LogitDiff(words[10], wrong))
    assert not result.barely and abs(result.clean - result.corrupted) > 1
