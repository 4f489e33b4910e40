"""Continuing a prompt with a causal model: the settings, and what a continuation gives back.

A backend's ``generate(prompt, settings)`` runs the model step by step with its key/value cache, then one
recorded forward over prompt + continuation: that forward's trace is what every view shows (equal to tracing
the whole sequence afresh), and its logits give each step's top next tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

TOP_K_SHOWN = 5
MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class Sampling:
    """How to pick each next token: greedy (``temperature`` 0) or sampled with temperature and top-k from ``seed``."""

    max_new_tokens: int = 20
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: every token
    seed: int = 0

    def __post_init__(self):
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"The number of new tokens must be between 1 and {MAX_NEW_TOKENS}, not {self.max_new_tokens}.")
        if not 0 <= self.temperature <= 10:
            raise ValueError(f"The temperature must be between 0 (greedy) and 10, not {self.temperature}.")
        if self.top_k < 0:
            raise ValueError(f"top-k must be 0 (every token) or more, not {self.top_k}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


class Generation(NamedTuple):
    """A prompt and the model's continuation, traced as one sequence."""

    trace: object  # AttentionTrace over prompt + continuation (kind "decoder")
    prompt_len: int  # tokens of the prompt (specials included): token ``prompt_len`` is the first generated
    continuation: str  # the generated text
    top_ids: np.ndarray  # (N, 5) int: at step s (generating token prompt_len + s), the 5 likeliest next tokens
    top_tokens: tuple  # (N, 5) their token strings
    top_probs: np.ndarray  # (N, 5) float: their probabilities under the model (before temperature and top-k)
    sampling: Sampling

    @property
    def n_new(self) -> int:
        return self.trace.n_tokens - self.prompt_len

    def arrays(self) -> dict[str, np.ndarray]:
        """What a trace file adds for a generation (``export.to_npz(g.trace, g.arrays())``), pickle-free."""
        return {"generation/prompt_len": np.array(self.prompt_len), "generation/top_ids": self.top_ids,
                "generation/top_probs": self.top_probs, "generation/top_tokens": np.array(self.top_tokens, str),
                "generation/continuation": np.array(self.continuation)}


def top_next(logits: torch.Tensor, k: int = TOP_K_SHOWN) -> tuple[np.ndarray, np.ndarray]:
    """Logits (N, V) -> (ids (N, k), probabilities (N, k)) of the k likeliest tokens at each row."""
    probs = torch.softmax(logits.double(), dim=-1)
    top = probs.topk(min(k, probs.shape[-1]), dim=-1)
    return top.indices.numpy(), top.values.numpy()

