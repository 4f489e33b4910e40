"""Every figure that labels tokens shows them cleaned (no Ġ, Ċ, ▁) and names the raw token in its hover: the labels
come from a real byte-level BPE tokenizer (the tiny GPT-2's, trained like GPT-2's) and a real SentencePiece-style one,
and the Attention page draws a tiny GPT-2's head with the raw tokens in the hover of every cell."""

import json

import numpy as np
import pytest

from attnviz.core.tokens import Label, clean, labels, word_labels
from attnviz.figures import analysis, generate, interventions, long, norms
from attnviz.figures.attention import focus_bars, weights_heatmap
from attnviz.figures.common import RAW_CELLS, hover_names
from attnviz.figures.faithfulness import shaded_rows
from helpers import ok, open_page
from test_analysis_pages import charts
from tiny_models import tokenizer

TEXT = "the cat sat\nthe <b>dog</b>"


@pytest.fixture(scope="module")
def raw():
    tokens = tokenizer("gpt2").tokenize(TEXT)
    assert "Ġcat" in tokens and "Ċ" in tokens and "<" in tokens and "Ġ" in tokens  # byte-level BPE, and markup
    return tokens


def spec(fig) -> dict:
    return json.loads(fig.to_json())


def test_labels_keep_their_raw_token(raw):
    shown = labels(raw)
    assert all(isinstance(s, Label) for s in shown) and [s.raw for s in shown] == raw
    assert shown[raw.index("Ġcat")] == "cat" and shown[raw.index("Ċ")] == "↵"
    assert "Ġ" not in "".join(shown) and "Ċ" not in "".join(shown)
    words = word_labels(["Ġre", "ading", "Ġit"], [0, 0, 1])
    assert words == ["reading", "it"] and [w.raw for w in words] == ["Ġre ading", "Ġit"]
    sp = labels(tokenizer("llama").tokenize("the cat"))
    assert [s.raw for s in sp] == ["▁the", "▁cat"] and sp == ["the", "cat"]
    assert hover_names(shown)[raw.index("Ċ")] == "↵ · token Ċ"
    assert hover_names(shown)[raw.index("Ġ")] == "␣ · token Ġ"
    assert hover_names(shown)[raw.index("<")] == "&lt; (8)"  # user text escaped; a token that reads as itself alone


def test_heatmaps_name_each_cells_raw_tokens_and_label_it_cleaned(raw):
    shown = labels(raw)
    T = len(shown)
    w = np.tril(np.ones((T, T), np.float32))
    w /= w.sum(1, keepdims=True)
    cat, newline = raw.index("Ġcat"), raw.index("Ċ")
    figures = {
        "attention": weights_heatmap(w, shown, shown),
        "log attention": weights_heatmap(w, shown, shown, log_scale=True),
        "difference": analysis.difference_map(w - w.T, shown, "t"),
        "norm weights": norms.weight_heatmap(w, shown, shown),
    }
    for name, fig in figures.items():
        heat = spec(fig)["data"][0]
        assert heat["x"] == heat["y"] == [s.replace("<", "&lt;").replace(">", "&gt;") for s in shown], name
        assert "<br>raw query → key: %{text}" in heat["hovertemplate"], name
        assert heat["text"][newline][cat] == "Ċ → Ġcat", name
    relevance = spec(analysis.relevance_map(np.ones((2, T)), shown, "t"))["data"][0]
    assert relevance["text"][1][cat] == " · token Ġcat" and "token %{x}%{text}" in relevance["hovertemplate"]
    window = spec(long.window_heatmap(w, 0, raw, "t"))["data"][0]
    assert window["text"][newline][cat] == "Ċ → Ġcat" and "%{text}" in window["hovertemplate"]
    assert all("Ġ" not in t and "Ċ" not in t for t in spec(long.window_heatmap(w, 0, raw, "t"))["layout"]["yaxis"]
               ["ticktext"])
    # Points that take clicks on the cells carry the same words, query-major as the points are.
    points = spec(interventions.clickable_cells(weights_heatmap(w, shown, shown), shown, shown))["data"][1]
    assert points["text"][newline * T + cat] == "Ċ → Ġcat"
    assert "%{text}" in points["hovertemplate"]


def test_a_heatmap_over_its_budget_leaves_the_raw_tokens_out():
    side = int(RAW_CELLS ** 0.5) + 1
    shown = labels([f"Ġw{i}" for i in range(side)])
    heat = spec(weights_heatmap(np.full((side, side), 1 / side, np.float32), shown, shown))["data"][0]
    assert "text" not in heat and "%{text}" not in heat["hovertemplate"]


def test_bars_and_token_maps_carry_the_raw_token_in_their_hover(raw):
    shown = labels(raw)
    T = len(shown)
    cat = raw.index("Ġcat")
    one = np.full(T, 1 / T)
    for name, fig in {
        "focus bars": focus_bars(one, shown),
        "next-token bars": interventions.next_token_bars(one, one, shown, "t"),
        "step attention": generate.step_attention(one, shown, 2, T - 1, "t"),
        "top tokens": generate.top_tokens(shown, one, "cat", "t"),
    }.items():
        bar = spec(fig)["data"][0]
        assert bar["customdata"][cat] == "cat · token Ġcat" and "%{customdata}" in bar["hovertemplate"], name
    change = spec(interventions.change_map(np.ones((2, T)), shown, "t"))["data"][0]
    assert change["customdata"][1][cat] == "cat · token Ġcat" and "%{customdata}" in change["hovertemplate"]
    statistic = spec(norms.stat_heatmap(np.ones((2, T)), shown))["data"][0]  # the label, then its raw token
    assert statistic["customdata"][1][cat] + statistic["text"][1][cat] == "cat · token Ġcat"
    assert "%{customdata}%{text}" in statistic["hovertemplate"]
    # The top-k bars get the tokenizer's raw tokens: they label them cleaned, the raw one in the hover.
    fig = spec(interventions.top_k_bars(["Ġcat", "Ċ"], [0.6, 0.4], ["Ċ", "Ġcat"], [0.7, 0.3], "t"))
    assert fig["layout"]["yaxis"]["ticktext"] == ["cat", "↵"]
    assert fig["data"][0]["customdata"] == ["cat · token Ġcat", "↵ · token Ċ"]


def test_text_views_show_the_clean_token_and_the_raw_one_in_the_title(raw):
    T = len(raw)
    rows = shaded_rows(raw, {"occlusion": np.linspace(-1, 1, T)})
    assert ">cat</span>" in rows and ">↵</span>" in rows and "Ġ" not in rows.replace("token Ġ", "")
    assert "· token Ġcat" in rows and "· token Ċ" in rows and "<b>" not in rows
    reach = long.reach_html(raw, np.arange(T), np.linspace(0, 1, T), raw.index("Ġcat"))
    assert 'title="' in reach and "· token Ġcat" in reach and ">cat</mark>" in reach
    html = analysis.relevance_html(labels(raw), np.linspace(0, 1, T))
    assert "· token Ċ" in html and ">↵</span>" in html


def test_the_attention_page_hovers_the_raw_tokens(tiny_model):
    key = f"hf:{tiny_model('gpt2')}"
    at = ok(open_page("pages/1_Attention.py", model=key, text=TEXT, layer="1", head="2"))
    detail = next(spec for k, spec in charts(at).items() if k.startswith("detail"))["data"][0]
    assert "cat" in detail["x"] and not any("Ġ" in x or "Ċ" in x for x in detail["x"])
    text = np.array(detail["text"])
    assert any(t.endswith("→ Ġcat") for t in text[-1]) and any(row[0].startswith("Ċ →") for row in text)
    assert "raw query → key: %{text}" in detail["hovertemplate"] and clean("Ġcat") == "cat"
