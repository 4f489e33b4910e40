"""Operator settings from environment variables, read at call time so a running app picks up changes."""

from __future__ import annotations

import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, not {raw!r}")
    return value


def allow_pickle() -> bool:
    """ATTNVIZ_ALLOW_PICKLE=1 lets Hugging Face models load from pickle checkpoints (pytorch_model.bin)."""
    return _flag("ATTNVIZ_ALLOW_PICKLE")


def max_model_mb() -> float:
    """ATTNVIZ_MAX_MODEL_MB: the largest weights (in MB on disk) a Hugging Face model may have."""
    return _number("ATTNVIZ_MAX_MODEL_MB", 2048)


def max_tokens() -> int:
    """ATTNVIZ_MAX_TOKENS: the most tokens one text may have, whatever the model could take.

    Attention grows with the square of the length: GPT-2 at 1,024 tokens makes 600 MB of weights per text.
    """
    return int(_number("ATTNVIZ_MAX_TOKENS", 512))


def max_new_tokens() -> int:
    """ATTNVIZ_MAX_NEW_TOKENS: how many tokens an encoder–decoder may generate when no target is given."""
    return int(_number("ATTNVIZ_MAX_NEW_TOKENS", 32))


def hub_timeout() -> float:
    """ATTNVIZ_HUB_TIMEOUT: seconds to wait for the Hugging Face hub before calling it unreachable."""
    return _number("ATTNVIZ_HUB_TIMEOUT", 3)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE=1: never contact the Hugging Face hub (models come from folders or the local cache)."""
    return _flag("HF_HUB_OFFLINE")
