"""Who may use what: public mode, an operator's allowlist of models, the longest text, and what a visitor is told
when a model fails. Operator settings come from ATTNVIZ_* variables (attnviz.settings), with the host's secrets
(``[attnviz]`` in .streamlit/secrets.toml) as a fallback.
"""

from __future__ import annotations

import streamlit as st

from attnviz import settings
from attnviz.ui.escape import code


def _secret(name: str):
    """``[attnviz] name`` from .streamlit/secrets.toml (or the host's secrets), None when unset."""
    try:
        return st.secrets.get("attnviz", {}).get(name)
    except FileNotFoundError:  # no secrets file at all
        return None


def allowed_models() -> list[str] | None:
    """ATTNVIZ_MODELS (comma list) or secrets ``[attnviz] models``: the only models offered; None: any."""
    return settings.allowed_models(_secret("models"))


def public() -> bool:
    """Public mode: the app faces visitors it does not know, so they choose only among offered models.

    On with ATTNVIZ_PUBLIC=1 or secrets ``[attnviz] public = true``, and by itself on Hugging Face Spaces
    (which sets SPACE_ID); ATTNVIZ_PUBLIC=0 turns it off there. Off for a local ``streamlit run app.py``.
    """
    return settings.public(_secret("public"))


def locked() -> bool:
    """Visitors pick from a fixed list (public mode, or an operator's allowlist); no typed model keys."""
    return public() or allowed_models() is not None


def open_failed(key: str, error: Exception) -> str:
    """Why model ``key`` could not be opened; in public mode only that it could not, since the reasons
    can name the server's paths and tell which of its files exist."""
    if public():
        return f"The model {code(key)} could not be opened here."
    return str(error)


def fault(key: str, error: Exception) -> str:
    """What a visitor is told when model ``key`` fails unexpectedly (the server log keeps the traceback)."""
    if public():
        return f"Could not run {key}; the server's log has the details."
    return f"Could not run {key}: {type(error).__name__}: {error}"


def max_chars() -> int:
    """ATTNVIZ_MAX_CHARS or secrets ``[attnviz] max_chars``: the longest text the text box takes."""
    return settings.max_chars(_secret("max_chars"))


def check_allowed(key: str, options: list[str]) -> None:
    """A ValueError when models are locked (public mode, allowlist) and ``key`` is not among ``options``.

    Nothing is looked up for such a key; in public mode the message does not even repeat it, so every
    refused key (a path, a file, nothing) reads the same.
    """
    if locked() and key not in options:
        named = "That model" if public() else f"Model {code(key)}"
        raise ValueError(f"{named} is not offered here; choose one of: {', '.join(options)}.")
