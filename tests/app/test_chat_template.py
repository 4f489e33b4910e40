"""The chat template on the pages that explain and edit a decoder's prediction, on a tiny GPT-2 whose tokenizer
brings a chat template (byte-level BPE, so its newlines are Ċ tokens): head patching runs both prompts in the
template, as a direct computation on the rendered token ids does; the Faithfulness page explains the templated
text exactly as the library does."""

import html
import re

import numpy as np
import pandas as pd
import pytest
import torch
import transformers as tf

import attnviz
from attnviz.analysis.faithfulness import agreement, explain
from attnviz.analysis.interventions import LogitDiff, ZeroValue, editing, patch_heads
from attnviz.backends.common import chat_prompt
from attnviz.core.tokens import clean
from helpers import chart_specs, decode, ok, open_page
from test_analysis_pages import charts
from tiny_models import build

# One user turn and the assistant's cue; <|endoftext|> is the tiny vocabulary's own special token.
TEMPLATE = ("{% for m in messages %}<|endoftext|>{{ m['role'] }}:\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|endoftext|>assistant:\n{% endif %}")
CLEAN, CORRUPTED = "the cat sat on the mat", "the dog sat on the mat"


@pytest.fixture(scope="module")
def chat_key(tmp_path_factory):
    folder = build("gpt2", tmp_path_factory.mktemp("tiny-chat-gpt2"))
    tok = tf.AutoTokenizer.from_pretrained(folder)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(folder)
    return f"hf:{folder}"


@pytest.fixture(scope="module")
def lm(chat_key):
    from attnviz.ui.frame import get_model  # the app's cache: the pages below share this backend

    m = get_model(chat_key)
    assert m.can("chat")
    return m


def rendered_ids(lm, text) -> list[int]:
    return lm.tokenizer(chat_prompt(lm.tokenizer, text)[0], add_special_tokens=False)["input_ids"]


def logits_and_tokens(lm):
    """The model's logits (T, V) on each rendered prompt, and the tokens to measure: each prompt's top prediction
    (the corrupted one's runner-up where random weights predict the same token after both)."""
    with torch.no_grad():
        logits = [lm.net(torch.tensor([rendered_ids(lm, text)])).logits[0] for text in (CLEAN, CORRUPTED)]
    good, bad = (lm.tokenizer.convert_ids_to_tokens(int(row[-1].argmax())) for row in logits)
    if good == bad:
        bad = lm.tokenizer.convert_ids_to_tokens(int(logits[1][-1].topk(2).indices[1]))
    return logits, good, bad


def test_head_patching_runs_both_prompts_in_the_chat_template(lm):
    clean_ids, corrupt_ids = rendered_ids(lm, CLEAN), rendered_ids(lm, CORRUPTED)
    assert len(clean_ids) == len(corrupt_ids) > len(lm.tokenizer(CLEAN)["input_ids"]) + 4
    logits, good, bad = logits_and_tokens(lm)
    metric = LogitDiff(good, bad)
    result = patch_heads(lm, CLEAN, CORRUPTED, metric, chat=True)
    # the metric of each prompt straight from the model's logits on the rendered template
    for got, row in zip((result.clean, result.corrupted), logits):
        assert got == pytest.approx(float(row[-1, lm.tokenizer.convert_tokens_to_ids(good)]
                                          - row[-1, lm.tokenizer.convert_tokens_to_ids(bad)]), abs=1e-5)
    assert list(result.tokens) == lm.tokenizer.convert_ids_to_tokens(corrupt_ids)
    assert "Ċ" in result.tokens and "<|endoftext|>" in result.tokens
    # every head patched on the rendered ids themselves, with no chat keyword anywhere
    direct = patch_heads(lm, clean_ids, corrupt_ids, metric)
    np.testing.assert_allclose(result.patched, direct.patched, atol=1e-9)
    np.testing.assert_allclose(result.restored, direct.restored, atol=1e-9)
    plain = patch_heads(lm, CLEAN, CORRUPTED, metric)
    assert not np.allclose(plain.patched, result.patched)  # the template changes what is measured


@pytest.fixture
def offered(chat_key, monkeypatch):
    """The tiny model as the one model offered, so the model box keeps it through a click (a typed folder is not an
    option of the box, and AppTest drops a value that is not one)."""
    monkeypatch.setenv("ATTNVIZ_MODELS", chat_key)
    return chat_key


def test_the_interventions_page_patches_in_the_chat_template(lm, offered):
    chat_key = offered
    at = ok(open_page("pages/11_Interventions.py", model=chat_key, text=CLEAN, corrupted=CORRUPTED, chat="true"))
    _, good, bad = logits_and_tokens(lm)
    at.text_input(key="patch_good").set_value(good)
    at.text_input(key="patch_bad").set_value(bad)
    at = ok(at.button(key="patch").click().run())
    expected = patch_heads(lm, CLEAN, CORRUPTED, LogitDiff(good, bad), chat=True)
    heat = charts(at)["patch_map"]["data"][0]
    shown = expected.moved() if expected.barely else expected.restored
    np.testing.assert_allclose(decode(heat["z"]), shown, atol=1e-6)
    assert at.session_state["patching"][0][-1] is True


def test_the_faithfulness_page_explains_the_templated_text(lm, offered):
    chat_key = offered
    at = ok(open_page("pages/12_Faithfulness.py", model=chat_key, text=CLEAN, chat="true"))
    assert at.checkbox(key="chat").value
    at = ok(at.button(key="faith_run").click().run())
    expected = explain(lm, CLEAN, zero_value=lambda j: editing([ZeroValue(j)]), chat=True)
    shown = at.session_state["faithfulness"][1]
    assert list(shown.tokens) == list(lm.trace(CLEAN, chat=True).tokens) == list(expected.tokens)
    assert "<|endoftext|>" in shown.tokens and "Ċ" in shown.tokens
    (table,) = [d.value for d in at.dataframe]
    pd.testing.assert_frame_equal(table.reset_index(drop=True), agreement(expected), atol=1e-6)
    (curves,) = chart_specs(at)
    for line in curves["data"]:
        np.testing.assert_allclose(decode(line["y"]), expected.curves[line["name"]], atol=1e-6)
    (rows,) = [h.proto.body for h in at.get("html")]
    first = rows.split("</tr>")[0]  # one method's row: every token, the template's too, as a person reads it
    assert re.findall(r">([^<]*)</span>", first) == [html.escape(clean(t)) for t in expected.tokens]
    assert "&lt;|endoftext|&gt;" in first and ">↵</span>" in first and ">cat</span>" in first
    plain = explain(lm, CLEAN, zero_value=lambda j: editing([ZeroValue(j)]))
    assert len(plain.tokens) < len(expected.tokens)
