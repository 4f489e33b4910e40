"""Head importance by ablation (Michel et al. 2019): remove one head, measure how the model's output moves.

Every backend masks heads the same way (``attnviz.capture.hooks.heads_masked``: a forward pre-hook on each layer's
attention output projection zeroes the head's slice of its input, for one call) and says what its output is
(``backend.ablation(text) -> (measure, run)``); this module only scores the change.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..core.budget import check_forwards

CITATION = "Michel et al. 2019, *Are Sixteen Heads Really Better than One?*"
MEASURES = {
    "encoder": "1 − cos(mean-pooled final hidden state with the head removed, without removing it)",
    "lm": "increase of the mean next-token loss (nats) when the head is removed",
    "classifier": "drop of the predicted class's probability when the head is removed",
}


class Ablation(NamedTuple):
    """How to ablate one backend on one text: ``run(head_mask (L, H))`` -> output, ``change(base, out)`` -> score."""

    measure: str  # a key of MEASURES
    run: Callable[[np.ndarray], torch.Tensor]
    change: Callable[[torch.Tensor, torch.Tensor], float]


def pooled_cosine_change(base: torch.Tensor, out: torch.Tensor) -> float:
    """1 − cos of the mean-pooled (T, D) states: 0 when the head changed nothing."""
    return 1.0 - F.cosine_similarity(base.double().mean(0), out.double().mean(0), dim=0).item()


def loss_increase(base: torch.Tensor, out: torch.Tensor) -> float:
    return (out - base).item()


def probability_drop(base: torch.Tensor, out: torch.Tensor) -> float:
    """p_c(unablated) − p_c(ablated) for the class c the unablated model predicts."""
    c = int(base.argmax())
    return (base[c] - out[c]).item()


CHANGES = {"encoder": pooled_cosine_change, "lm": loss_increase, "classifier": probability_drop}


def ablation(backend, text: str, max_tokens: int | None = None) -> Ablation:
    """How to ablate ``backend``; a ValueError in plain words when the model is not supported."""
    measure, run = backend.ablation(text, max_tokens)  # checks the text
    return Ablation(measure, run, CHANGES[measure])


def head_importance(backend, text: str, progress: Callable[[int, int], None] | None = None,
                    max_tokens: int | None = None) -> tuple[np.ndarray, str]:
    """(importance (L, H), measure key): the output change when each head alone is removed.

    ``progress(done, total)`` is called after each head; the text is cut to ``max_tokens`` as ``trace`` cuts it.
    A model with more heads than ATTNVIZ_MAX_FORWARDS allows is refused before the first pass.
    """
    L, H = backend.n_layers, backend.n_heads
    check_forwards(L * H + 1, "Head importance by ablation")  # one pass per head, and the baseline
    p = ablation(backend, text, max_tokens)
    keep = np.ones((L, H), np.float32)
    base = p.run(keep)
    scores = np.zeros((L, H))
    for k, (layer, head) in enumerate(np.ndindex(L, H)):
        mask = keep.copy()
        mask[layer, head] = 0.0
        scores[layer, head] = p.change(base, p.run(mask))
        if progress is not None:
            progress(k + 1, L * H)
    return scores, p.measure
