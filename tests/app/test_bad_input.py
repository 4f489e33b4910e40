"""Bad input on every page (real Streamlit through AppTest) and in the library.

Each case gets a plain message (st.error or st.warning; for text that is merely odd, the status line
with its token count), never a traceback; the text box keeps what was typed; user text reaches charts
and HTML only escaped. The browser's side of escaping is tests/e2e/test_e2e_bad_input.py.
"""

import html
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from streamlit.testing.v1 import AppTest

import attnviz
from attnviz.figures.common import safe
from attnviz.core.tokens import clean, labels
from attnviz.ui.long import CELLS
from attnviz.settings import DEFAULT_MAX_CHARS
from helpers import chart_specs, ok, open_page

ROOT = Path(__file__).resolve().parents[2]
# Every page file but the old Long text page's, a redirect to the Attention page (its links: tests/app/test_attention_long.py)
# that cannot run alone: it switches to a page of the app's navigation.
PAGES = ["app.py", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py")
                           if p.name != "9_Long_text.py")]
HOME, ATTENTION = "app.py", "pages/1_Attention.py"
OTHER_PAGES = [p for p in PAGES if p not in (HOME, ATTENTION)]
EMPTY = "The text is empty"

MARKUP = '<b id=pwn>bold</b><img src=x onerror="window.pwned=1"> <a href="https://evil.example/">click</a> <br>next'
TEXTS = {
    "empty": "",
    "whitespace": " \n\t\u3000\u00a0 ",
    "invisible": "\x00\u200b\u200d\x07\u2066",  # NUL, zero-width space, ZWJ, bell, an isolate: nothing to read
    "100k": ("attention " * 10_000)[:100_000],
    "emoji-zwj": "family 👨‍👩‍👧‍👦 flag 🏳️‍🌈 thumbs 👍🏽 done",
    "rtl": "שלום עולם and مرحبا بالعالم mixed",
    "combining": "cafe\u0301 nai\u0308ve Z\u0334\u0321a\u0338l\u0337g\u0335o",
    "control": "bell\x07 esc\x1b[31m red\x1b[0m del\x7f tab\tend\r\n",
    "nul": "before\x00after",
    "html-script": "<script>window.pwned=1</script>" + MARKUP,
    "plotly-markup": '<a href="https://evil.example/">link</a> <b>bold</b><br>line <i>it</i><sup>up</sup>',
    "hover-template": "%{x} %{y:.2f} %{fullData.name} %{customdata[0]} <extra>box</extra>",
    "special-only": "[CLS] [SEP]",
}
EMPTY_CASES = {"empty", "whitespace", "invisible"}
# MiniLM reads each emoji as [UNK] (3 of 7 tokens): the page says so, whatever [UNK]'s special flag (issue 33)
UNKNOWN_CASES = {"emoji-zwj"}
UNKNOWN = "unknown to this model"
TAG = re.compile(r"</?[A-Za-z][^<>]*>")
TEMPLATE_KEYS = {"hovertemplate", "texttemplate"}


def typed(page: str, text: str, **params) -> AppTest:
    """A session of ``page`` in which the user typed ``text`` into the sidebar's text box."""
    at = open_page(page, alone=True, **params)
    at.text_area(key="text").set_value(text).run()
    return at


def pick_model(at: AppTest, key: str) -> AppTest:
    """Type a model key into the picker (it accepts new options) and run."""
    picker = at.selectbox(key="model")
    # AppTest's selectbox only knows its listed options; the browser sends a typed option as its string.
    if key not in picker.options:
        picker.options.append(key)
    picker.set_value(key)
    return at.run()


def strings(node, key=""):
    """(key, string) for every string in a chart spec, with the dict key it sits under."""
    if isinstance(node, str):
        yield key, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from strings(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v, key)


def rendered(at: AppTest) -> list[str]:
    """Everything on the page that a browser renders as markup: chart text and st.html bodies."""
    out = [s for spec in chart_specs(at) for k, s in strings(spec) if k not in TEMPLATE_KEYS]
    out += [h.proto.body for h in at.get("html")]
    out += [m.value for m in at.markdown if m.proto.allow_html]
    return out


def tick_lists(at: AppTest) -> list[list[str]]:
    """Every list of category labels or tick texts in the page's charts."""
    out = []
    for spec in chart_specs(at):
        for trace in spec["data"]:
            out += [trace[a] for a in ("x", "y") if isinstance(trace.get(a), list) and trace[a] and
                    all(isinstance(s, str) for s in trace[a])]
        out += [ax["ticktext"] for name, ax in spec["layout"].items() if name.startswith(("xaxis", "yaxis"))
                and isinstance(ax, dict) and "ticktext" in ax]
    return out


def assert_escaped(at: AppTest, text: str) -> None:
    """No tag from ``text`` reaches the page as markup, and no user text reaches a hover template."""
    tags = set(TAG.findall(text))
    for s in rendered(at):
        leaked = [t for t in tags if t in s]
        assert not leaked, f"user markup {leaked} reached the page raw in {s[:200]!r}"
    templates = [s for spec in chart_specs(at) for k, s in strings(spec) if k in TEMPLATE_KEYS]
    assert templates, "expected hover templates on a page with charts"
    for s in templates:
        assert "fullData" not in s and "evil.example" not in s and "box" not in s, s


def plain(message: str) -> str:
    """A message without its markdown code marks, so assertions read the words."""
    return re.sub(r"\s+", " ", message.replace("`", ""))


def assert_kept(at: AppTest, text: str, notes=()) -> None:
    """No traceback, no error; the text box holds ``text``; the warnings say ``notes`` and nothing else."""
    assert not at.exception, at.exception[0].value
    assert not at.error, at.error[0].value
    assert at.text_area(key="text").value == text
    warnings = [plain(w.value) for w in at.warning]
    assert len(warnings) == len(notes) and all(any(n in w for w in warnings) for n in notes), warnings


# ---- text typed into the sidebar, on the home page and the attention page (every case) ----


@pytest.mark.parametrize("page", [HOME, ATTENTION])
@pytest.mark.parametrize("case", list(TEXTS))
def test_typed_text(page, case):
    text = TEXTS[case]
    at = typed(page, text)
    assert not at.exception, at.exception[0].value
    if case in EMPTY_CASES:
        assert [e.value for e in at.error] == ["The text is empty: enter a sentence or two to see its attention."]
        assert not at.get("plotly_chart")
        assert at.text_area(key="text").value == text
        return
    if len(text) > DEFAULT_MAX_CHARS:  # refused whole: the box keeps its text, and the main area says so
        assert not at.exception and not at.error and at.text_area(key="text").value == DEFAULT_TEXT
        (said,) = [w.value for w in at.main.warning]
        assert f"The paste of {len(text):,} characters is over the {DEFAULT_MAX_CHARS:,}" in said
        assert f"· {attnviz.trace(DEFAULT_TEXT).n_tokens} tokens" in at.caption[0].value
        assert not ok(at.run()).warning  # said once
        return
    kept = text
    assert_kept(at, kept, (UNKNOWN,) if case in UNKNOWN_CASES else ())
    ref = attnviz.trace(kept)
    status = at.caption[0].value
    assert f"· {ref.n_tokens} tokens" in status
    if case == "100k":  # 2,000 words of one token each, plus [CLS] and [SEP]
        assert ref.truncated == kept.count("attention") + 2 - 512
        assert f"⚠️ {ref.truncated} tokens cut to fit the model's 512 positions" in status
    if page == ATTENTION and ref.n_tokens > CELLS:  # the long view: the whole text is the reach's shaded box
        (box,) = [h.proto.body for h in at.get("html")]
        assert html.unescape(re.sub(r"<[^>]*>", "", box)).split() == [clean(t) for t in ref.tokens]
    else:
        assert safe(labels(ref.tokens)) in tick_lists(at)  # the page shows exactly this text's tokens, escaped
    assert_escaped(at, text)


@pytest.mark.parametrize("page", [HOME, ATTENTION])
def test_lone_surrogates_in_a_link_become_replacement_characters(page):
    """A link may carry a lone surrogate (WTF-8 bytes); it arrives as U+FFFD and the page runs."""
    raw = "lone \ud800 half \udfff end".encode("utf-8", "surrogatepass")
    at = open_page(page, alone=True, text=raw)
    shown = raw.decode("utf-8", "replace")
    assert "\ufffd" in shown
    assert_kept(at, shown)
    assert safe(labels(attnviz.trace(shown).tokens)) in tick_lists(at)


# ---- a smaller set on every other page ----

EVERY_PAGE = ["empty", "invisible", "html-script", "hover-template", "special-only"]


@pytest.mark.parametrize("page", OTHER_PAGES)
@pytest.mark.parametrize("case", EVERY_PAGE)
def test_typed_text_on_every_page(page, case):
    text = TEXTS[case]
    at = typed(page, text)
    if case in EMPTY_CASES:
        assert not at.exception, at.exception[0].value
        assert EMPTY in at.error[0].value and at.text_area(key="text").value == text
        return
    assert_kept(at, text)
    assert f"· {attnviz.trace(text).n_tokens} tokens" in at.caption[0].value
    if at.get("plotly_chart"):
        assert_escaped(at, text)


@pytest.fixture(scope="module")
def short_models(tiny_model):
    """Models that see one token in "x": the translator's encoder ([UNK]) and GPT-2 (no special tokens)."""
    return {"translator": "builtin:translator", "gpt2": f"hf:{tiny_model('gpt2')}"}


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("model", ["translator", "gpt2"])
def test_one_token_on_every_page(page, model, short_models):
    t = attnviz.trace("x", short_models[model])
    assert (t.encoder if t.kind == "encoder-decoder" else t).n_tokens == 1
    at = open_page(page, alone=True, model=short_models[model], text="x")
    # "x" is no word the translator knows: the page says so (issue 17), and nothing else.
    assert_kept(at, "x", ["1 of 1 tokens are unknown to this model"] if model == "translator" else ())


# ---- models that cannot be opened, typed into the picker ----


@pytest.fixture(scope="module")
def bad_models(tiny_model, tmp_path_factory):
    """key -> model folder (or hub id) that cannot be opened, each for its own reason."""
    good = tiny_model("bert")
    root = tmp_path_factory.mktemp("bad-models")

    def copy(name: str) -> Path:
        return Path(shutil.copytree(good, root / name))

    no_config = root / "no-config"
    no_config.mkdir()
    (no_config / "README.md").write_text("not a model")
    damaged = copy("damaged")
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    custom = copy("custom-code")
    config = (custom / "config.json").read_text()
    (custom / "config.json").write_text(config.replace("{", '{"auto_map": {"AutoModel": "modeling_x.XModel"},', 1))
    pickled = copy("pickle-only")
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    return {
        "missing": f"hf:{root / 'no-such-folder'}",
        "no-config": f"hf:{no_config}",
        "damaged": f"hf:{damaged}",
        "custom-code": f"hf:{custom}",
        "pickle-only": f"hf:{pickled}",
        "too-big": f"hf:{good}",  # fine, but over ATTNVIZ_MAX_MODEL_MB=0.01 below
        "offline-hub": "hf:attnviz-tests/no-such-model",
    }


BAD_MODELS = {
    "missing": "There is no folder",
    "no-config": "has no config.json",
    "damaged": "is damaged (truncated or not safetensors)",
    "custom-code": "needs its own Python code",
    "pickle-only": "has only a pickle checkpoint",
    "too-big": "over the limit of 0 MB",
    "offline-hub": "Could not reach the Hugging Face hub",
}


@pytest.mark.parametrize("case", list(BAD_MODELS))
def test_a_model_that_cannot_be_opened(case, bad_models, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if case == "too-big":
        monkeypatch.setenv("ATTNVIZ_MAX_MODEL_MB", "0.01")
    text = "Models fail; the text stays."
    at = typed(HOME, text)
    pick_model(at, bad_models[case])
    assert not at.exception, at.exception[0].value
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and BAD_MODELS[case] in errors[0], errors
    assert at.text_area(key="text").value == text
    assert at.get("plotly_chart") and "Below: the last good model's figures (builtin:minilm)." in [
        c.value for c in at.caption]  # the page keeps what the last good model drew (issue 57)
    pick_model(at, "builtin:seed")  # the session keeps working
    assert not at.exception and not at.error and at.text_area(key="text").value == text
    assert safe(labels(attnviz.trace(text, "builtin:seed").tokens)) in tick_lists(at)


# ---- links with bad parameters, on every page but home (tests/app/test_share.py covers home) ----

DEFAULT_TEXT = "The animal didn't cross the street because it was too tired."
HUGE = "word " * 30_000  # 150,000 characters
LINKS = {
    "unknown-model": (dict(model="no-such-model"), DEFAULT_TEXT, ["no-such-model could not be opened"]),
    "huge-text": (dict(text=HUGE), HUGE[:DEFAULT_MAX_CHARS],
                  ["text has 150,000 characters; this app takes at most 20,000"]),
    "repeated-keys": (dict(text=["first text", "second text"], model=["builtin:minilm", "builtin:seed"]),
                      "second text", ["gives text 2 times; using the last one", "gives model 2 times"]),
}


# A page's own notes on the text itself: they stay after the link's notes are gone.
PAGE_NOTES = {("pages/12_Faithfulness.py", "huge-text"): ["an operator can raise the budget with ATTNVIZ_MAX_FORWARDS"]}


@pytest.mark.parametrize("page", PAGES[1:])
@pytest.mark.parametrize("case", list(LINKS))
def test_bad_link(page, case):
    params, text, notes = LINKS[case]
    own = PAGE_NOTES.get((page, case), [])
    at = open_page(page, alone=True, **params)
    assert_kept(at, text, notes + own)
    at.run()  # the user's next run: the link's notes are gone
    warnings = [plain(w.value) for w in at.warning]
    assert not at.exception and len(warnings) == len(own) and all(any(n in w for w in warnings) for n in own)


LAYER_PAGES = [p for p in PAGES[1:] if "layer_head(" in (ROOT / p).read_text()]


@pytest.mark.parametrize("page", LAYER_PAGES)
def test_layer_and_head_out_of_range_in_a_link(page):
    at = open_page(page, alone=True, layer="99", head="-1")
    assert_kept(at, DEFAULT_TEXT, ["Layer 99 in the link is out of range", "Head -1 in the link is out of range"])
    assert at.selectbox(key="layer").value == 0


# ---- the library: every text case through each kind of model ----


@pytest.fixture(scope="module")
def models(tiny_model):
    return {"minilm": "builtin:minilm", "seed": "builtin:seed",
            "gpt2": f"hf:{tiny_model('gpt2')}", "t5": f"hf:{tiny_model('t5')}"}


@pytest.mark.parametrize("model", ["minilm", "seed", "gpt2", "t5"])
@pytest.mark.parametrize("case", list(TEXTS) + ["lone-surrogate"])
def test_library_text(case, model, models):
    """A ValueError for text with nothing to read; otherwise a consistent trace whose text is what ran."""
    text = TEXTS.get(case, "lone \ud800 half \udfff end")
    target = "a fixed target" if model == "t5" else None  # greedy generation is tested in test_hf.py, and slow
    if case in EMPTY_CASES:
        with pytest.raises(ValueError, match=EMPTY):
            attnviz.trace(text, models[model], target)
        return
    t = attnviz.trace(text, models[model], target)
    assert t.text == text.encode("utf-8", "replace").decode("utf-8")
    for side in ([t.encoder, t.decoder] if t.kind == "encoder-decoder" else [t]):
        T = side.n_tokens
        assert T >= 1 and side.weights.shape[-2:] == (T, T)
        assert len(side.special) == len(side.word_ids) == T
        assert len(set(labels(side.tokens))) == T
        # Rows sum to 1: softmax, no NaN. Every head; at 10,000 tokens (builtin:seed takes any length) a first,
        # middle and last query of each, computed on demand, rather than 18 GB of weights.
        queries = range(T) if T <= 2048 else (0, T // 2, T - 1)
        for layer, head in np.ndindex(*side.weights.shape[:2]):
            rows = np.stack([side.row(layer, head, q) for q in queries])
            np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-4)
