"""Hostile input to the library and the sidebar (issue 58, item 7): each case is refused in plain words
(a ValueError, or the app's own message), never NaN drawn as attention, a MemoryError, a RecursionError,
an AttributeError or an OSError, through the call a user makes."""

import json
from pathlib import Path

import pytest

import attnviz

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads recurses once a level: RecursionError, unless caught


@pytest.mark.parametrize("config", ["[]", "3", '"bert"', "null", DEEP], ids=["list", "number", "string", "null", "deep"])
def test_a_config_that_is_not_an_object_is_refused_by_name(tmp_path: Path, config: str):
    (tmp_path / "config.json").write_text(config, encoding="utf-8")
    with pytest.raises(ValueError, match=r"config\.json in .* (is not a JSON object|nests its JSON too deeply)"):
        attnviz.load(str(tmp_path))


@pytest.mark.parametrize("name", [123, 1.5, b"builtin:minilm", ["builtin:minilm"]], ids=["int", "float", "bytes", "list"])
def test_a_model_name_that_is_not_text_is_refused(name):
    with pytest.raises(ValueError, match=r"^A model name is text \('builtin:minilm', 'hf:<Hugging Face id>' or the path"):
        attnviz.load(name)
    with pytest.raises(ValueError, match="A model name is text"):
        attnviz.trace("The cat sat.", name)


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
