"""Every page but Attention with a long document (real Streamlit, AppTest): no page asks for every weight at once.

``ATTNVIZ_MAX_DENSE_MB=1`` makes any dense (L, H, T, T) read fail, so a page that still asks for one fails here.
The pages draw every position cell by cell, so they read the text's first ATTNVIZ_PAGE_TOKENS tokens and say so in
the status line; the figures hold that trace's own weights, and each page's payload stays under 2 MB.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import attnviz
from attnviz.backends.footprint import n_tokens
from attnviz.settings import PAGE_TOKENS
from attnviz.ui.display import CELLS
from helpers import chart_specs, decode, ok, open_page
from test_load import WORDS

PAGES = ["app.py", "pages/2_Positional.py", "pages/3_Norms.py", "pages/4_Analysis.py", "pages/6_Compare.py",
         "pages/7_Roles.py", "pages/8_Generate.py", "pages/11_Interventions.py", "pages/12_Faithfulness.py"]
# Words of random WORDS that make about 3,000 and 9,000 tokens: one a token for builtin:seed, ~3.5 for the tiny Llama
LENGTHS = {"builtin:seed": {"~3,000": 3000, "~9,000": 9000}, "long llama": {"~3,000": 850, "~9,000": 2600}}
PAYLOAD = 2 * 2**20


def document(words: int) -> str:
    rng = random.Random(words)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


@pytest.fixture(scope="module")
def long_llama(tmp_path_factory):
    """A tiny Llama whose rotary positions go to 16,384: a long-context Hugging Face decoder."""
    from tiny_models import long_llama as key

    return key(tmp_path_factory.mktemp("long-llama"))


@pytest.fixture
def long_app(monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_TOKENS", "16384")
    monkeypatch.setenv("ATTNVIZ_MAX_CHARS", "200000")
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "1")


def payload(at) -> int:
    return sum(len(c.proto.spec) for c in at.get("plotly_chart")) + sum(len(h.proto.body) for h in at.get("html"))


def heat(at, key: str) -> np.ndarray:
    (spec,) = [s for c, s in zip(at.get("plotly_chart"), chart_specs(at)) if c.proto.id.endswith(key)]
    return decode(spec["data"][0]["z"]).astype(np.float64)


@pytest.mark.parametrize("length", ["~3,000", "~9,000"])
@pytest.mark.parametrize("model", ["builtin:seed", "long llama"])
def test_every_page_reads_its_share_of_a_long_document_without_a_dense_read(model, length, long_llama, long_app):
    key = long_llama if model == "long llama" else model
    text = document(LENGTHS[model][length])
    backend = attnviz.load(key)
    total = n_tokens(backend, text, 16_384)
    assert 2_500 < total < 3_500 if length == "~3,000" else 8_500 < total < 9_500
    ref = backend.trace(text, max_tokens=PAGE_TOKENS)  # what every page but Attention reads: the first tokens
    assert ref.n_tokens == PAGE_TOKENS
    for page in PAGES:
        at = ok(open_page(page, timeout=300, model=key, text=text))
        (line,) = [c.value for c in at.caption if c.value.startswith(f"**{key}**")]
        assert f"{PAGE_TOKENS} tokens" in line, (page, line)
        assert f"reads the first {PAGE_TOKENS:,} tokens and leaves {total - PAGE_TOKENS:,} out" in line, (page, line)
        assert "ATTNVIZ_PAGE_TOKENS" in line
        assert payload(at) <= PAYLOAD, (page, payload(at))
        if page == "pages/11_Interventions.py":  # edits run on the whole text: it says what it takes, and stops
            assert any(f"texts of at most {PAGE_TOKENS:,} tokens" in i.value and f"this one has {total:,}" in i.value
                       for i in at.info)
        if page == "pages/8_Generate.py" and model != "builtin:seed":  # a causal model: the prompt's limit, said
            assert any(f"prompts of at most {PAGE_TOKENS:,} tokens" in i.value and f"this one has {total:,}" in i.value
                       for i in at.info)
        if page == "app.py":  # layer 0, head 0 by default
            np.testing.assert_allclose(heat(at, "home_heatmap"), ref.head(0, 0), atol=1e-6)
        elif page == "pages/3_Norms.py":  # pages that draw two or three heads at once draw a CELLS window of them
            np.testing.assert_allclose(heat(at, "norm_raw"), ref.head(0, 0)[:CELLS, :CELLS], atol=1e-6)
        elif page == "pages/6_Compare.py":  # A is this text; head 0 of layer 0 by default
            np.testing.assert_allclose(heat(at, "compare_a"), ref.head(0, 0)[:CELLS, :CELLS], atol=1e-6)


def test_a_token_window_moves_over_the_whole_page_cap_and_a_bad_link_value_is_said(long_app):
    """Norms and Compare draw CELLS tokens at a time, from a start in the URL; each cell is the trace's own weight."""
    text = document(LENGTHS["builtin:seed"]["~3,000"])
    ref = attnviz.load("builtin:seed").trace(text, max_tokens=PAGE_TOKENS)
    last = PAGE_TOKENS - CELLS
    w = slice(last, PAGE_TOKENS)
    at = ok(open_page("pages/3_Norms.py", model="builtin:seed", text=text, norm_from=str(last), layer="2", head="3"))
    np.testing.assert_allclose(heat(at, "norm_raw"), ref.head(2, 3)[w, w], atol=1e-6)
    assert any(f"Drawn: tokens {last:,}–{PAGE_TOKENS - 1:,} of {PAGE_TOKENS:,}" in c.value for c in at.caption)
    at = ok(open_page("pages/6_Compare.py", model="builtin:seed", text=text, text_b=text, compare_from=str(last)))
    np.testing.assert_allclose(heat(at, "compare_b"), ref.head(0, 0)[w, w], atol=1e-6)
    np.testing.assert_allclose(heat(at, "compare_diff"), 0.0, atol=0)
    assert heat(at, "compare_diff").shape == (CELLS, CELLS)
    at = ok(open_page("pages/3_Norms.py", model="builtin:seed", text=text, norm_from="9999"))
    assert any("9999" in m.value and f"a whole number from 0 to {last}" in m.value
               for m in [*at.warning, *at.info, *at.caption, *at.markdown]), "the link's bad start is said"
    np.testing.assert_allclose(heat(at, "norm_raw"), ref.head(0, 0)[:CELLS, :CELLS], atol=1e-6)
