"""The model picker's line for each model (backends/cards.py) against the model itself: kind, tokens, parameters."""

import pytest

import attnviz
from attnviz.backends import describe, list_models
from attnviz.backends.cards import CARDS, takes
from attnviz.backends.packaged import SMOLLM2


@pytest.mark.parametrize("key", [k for k in list_models() if k != SMOLLM2])  # smollm2: tests/unit/test_smollm2_cache.py
def test_each_built_in_models_card_is_the_model(key):
    card, backend = CARDS[key], attnviz.load(key)
    assert card.kind == backend.kind
    assert card.tokens == backend.position_limit  # None: sinusoidal positions, any length
    assert card.params == sum(p.numel() for p in backend.net.parameters())
    assert takes(key, 16_384) == min(16_384, card.tokens or 16_384)


def test_the_lines_say_trained_or_random_kind_tokens_and_size():
    assert describe("builtin:seed") == ("the seed tutorial's encoder · random weights (for structure, not meaning) · "
                                        "encoder · any length · 34.5 M parameters")
    assert describe("builtin:minilm") == "all-MiniLM-L6-v2 · trained weights · encoder · up to 512 tokens · 22.6 M parameters"
    assert describe(SMOLLM2) == ("SmolLM2-135M-Instruct (real LLM) · trained weights · decoder (causal LM) · "
                                 "up to 8,192 tokens · 134.5 M parameters")
    assert describe("hf:gpt2") == "" and takes("hf:gpt2", 512) is None  # known only once loaded
