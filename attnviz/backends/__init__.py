"""Model keys -> loaded backends. ``builtin:*`` are attnviz's own; anything else goes to Hugging Face."""

from __future__ import annotations

import threading
from functools import lru_cache
from pathlib import Path

from .builtin import BUILTIN
from .common import Backend, check_text, encode

DEFAULT_MODEL = "builtin:minilm"
# Loaders import transformers on first use, and its lazy module is not thread-safe: two sessions opening
# their first models at once get "cannot import name 'AutoConfig'". One load at a time.
_loading = threading.Lock()


def list_models() -> list[str]:
    """The built-in model keys, default first."""
    return list(BUILTIN)


def open_model(key: str) -> Backend:
    """Load the model behind ``key`` (uncached): ``builtin:…``, ``hf:<hub id or folder>``, or a local folder."""
    key = (key or "").strip()
    with _loading:
        if key in BUILTIN:
            return BUILTIN[key]()
        if key.startswith("hf:") or (key and Path(key).expanduser().is_dir()):
            from .hf import load_hf

            return load_hf(key.removeprefix("hf:"))
    raise ValueError(
        f"Unknown model {key!r}. Known models: {', '.join(list_models())}; "
        "or 'hf:<Hugging Face id or local folder>'."
    )


@lru_cache(maxsize=4)
def load(key: str) -> Backend:
    """``open_model`` with the last few models kept in memory."""
    return open_model(key)


__all__ = ["DEFAULT_MODEL", "Backend", "list_models", "open_model", "load", "check_text", "encode"]
