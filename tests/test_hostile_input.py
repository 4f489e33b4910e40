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
