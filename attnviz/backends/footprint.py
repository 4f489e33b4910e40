"""What a trace will hold before it is made, so a server can admit heavy work by memory, not only by count.

A trace keeps, per token, each layer's captured queries and keys and its hidden states and norm statistics, so
its size is a fixed part plus a per-token part. Both are read off two short sizing traces of the model itself
(``nbytes`` of each): exact for every family (grouped-query keys, a relative bias) without a table of configs.
"""

from __future__ import annotations

import threading
import weakref

from .common import encode

SIZING_WORDS = (8, 24)  # two short texts: their traces' sizes give the fixed and the per-token part

_lock = threading.Lock()
_sizes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (fixed bytes, bytes per token)


def n_tokens(model, text: str, cap: int | None = None, chat: bool = False) -> int:
    """How many tokens ``model`` will trace of ``text`` (at most ``model.limit(cap)``; ``chat``: in its chat
    template), before any forward."""
    limit = model.limit(cap)
    tokenizer = model.tokenizer
    if tokenizer is None:  # a model with its own word or character vocabulary: no more tokens than characters
        return min(limit, len(text) + 2)
    return len(encode(tokenizer, text, limit, chat).ids)


def _stack_bytes(trace) -> int:
    return trace.encoder.nbytes if trace.kind == "encoder-decoder" else trace.nbytes


def per_token(model) -> tuple[int, int]:
    """(fixed bytes, bytes per token) of ``model``'s traces, measured once per model on two sizing texts."""
    with _lock:
        if model in _sizes:
            return _sizes[model]
    (t1, b1), (t2, b2) = [
        (tr.encoder.n_tokens if tr.kind == "encoder-decoder" else tr.n_tokens, _stack_bytes(tr))
        for tr in (model.trace(" ".join(["the"] * n)) for n in SIZING_WORDS)
    ]
    slope = max(0, (b2 - b1) // max(1, t2 - t1))
    sizes = (max(0, b1 - slope * t1), slope)
    with _lock:
        _sizes[model] = sizes
    return sizes


def trace_mb(model, tokens: int) -> float:
    """MB a trace of ``tokens`` tokens under ``model`` will hold (its captured q/k, hidden states and norms)."""
    fixed, slope = per_token(model)
    return (fixed + slope * tokens) / 2**20
