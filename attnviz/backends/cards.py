"""One line about each model attnviz offers by key, known without loading it: what the model picker shows, and
what a page offers when it needs another kind of model (a causal LM, a longer context).

tests/unit/test_model_cards.py loads every model and checks its card against it (kind, tokens, parameters).
"""

from __future__ import annotations

from typing import NamedTuple


class Card(NamedTuple):
    name: str
    trained: bool  # False: random weights, for structure, not meaning
    kind: str  # "encoder", "decoder" or "encoder-decoder"
    tokens: int | None  # the most tokens it takes; None: any length (sinusoidal positions)
    params: int  # parameters


CARDS = {
    "builtin:minilm": Card("all-MiniLM-L6-v2", True, "encoder", 512, 22_565_376),
    "builtin:seed": Card("the seed tutorial's encoder", False, "encoder", None, 34_542_592),
    "builtin:classifier": Card("a sentiment classifier (generated task)", True, "encoder", 64, 73_090),
    "builtin:translator": Card("a date translator (generated task)", True, "encoder-decoder", 64, 197_960),
    "builtin:lm": Card("a tiny story LM (generated stories)", True, "decoder", 112, 68_693),
    "smollm2": Card("SmolLM2-135M-Instruct (real LLM)", True, "decoder", 8192, 134_515_008),
}
KINDS = {"encoder": "encoder", "decoder": "decoder (causal LM)", "encoder-decoder": "encoder–decoder"}


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


def takes(key: str, limit: int) -> int | None:
    """How many tokens the model behind ``key`` takes within ``limit`` (the app's cap); None: unknown key."""
    card = CARDS.get(key)
    return None if card is None else min(limit, card.tokens or limit)


def describe(key: str) -> str:
    """``key``'s line: name, trained or random weights, kind, how many tokens it takes, its size ("" if unknown)."""
    card = CARDS.get(key)
    if card is None:
        return ""
    weights = "trained weights" if card.trained else "random weights (for structure, not meaning)"
    tokens = "any length" if card.tokens is None else f"up to {card.tokens:,} tokens"
    return f"{card.name} · {weights} · {KINDS[card.kind]} · {tokens} · {_size(card.params)} parameters"
