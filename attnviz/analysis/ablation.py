"""Head importance by ablation (Michel et al. 2019): remove one head, measure how the model's output moves.

Built-in encoders mask heads through ``head_mask_forward``; the built-in classifier through its
``head_mask`` argument; Hugging Face models (whose ``head_mask`` argument is gone in transformers 5) through
a forward pre-hook on each layer's attention output projection that zeroes the head's slice of its input,
registered for one call and removed.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..backends.common import check_text, encode
from ..backends.hooks import stacks
from ..budget import check_forwards
from ..nn import TextClassifier

CITATION = "Michel et al. 2019, *Are Sixteen Heads Really Better than One?*"
MEASURES = {
    "encoder": "1 − cos(mean-pooled final hidden state with the head removed, without removing it)",
    "lm": "increase of the mean next-token loss (nats) when the head is removed",
    "classifier": "drop of the predicted class's probability when the head is removed",
}


class Probe(NamedTuple):
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


def projections(net, n_layers: int) -> list[torch.nn.Module]:
    """Each layer's attention output projection (its input: the heads side by side), or a ValueError."""
    found = stacks(net)
    if len(found) != 1 or len(found[0].layers) != n_layers:
        kind = getattr(getattr(net, "config", None), "model_type", type(net).__name__)
        raise ValueError(
            f"Head ablation does not know where {kind} keeps its attention output projections; "
            "it supports BERT-, DistilBERT-, GPT-2-, Llama- and BART-style encoders and causal LMs."
        )
    stack = found[0]
    return [layer.get_submodule(stack.spec.out_proj) for layer in stack.layers]


@contextmanager
def heads_masked(projs: list[torch.nn.Module], head_mask: np.ndarray):
    """Scale each head's slice of the output projections' input by ``head_mask`` (L, H) for the calls
    inside the block; the hooks are removed on exit, whatever happens."""
    mask = torch.as_tensor(np.asarray(head_mask), dtype=torch.float32)
    H = mask.shape[1]

    def hook_for(m: torch.Tensor):
        def scale(module, args):
            x = args[0]
            Dh = x.shape[-1] // H
            return (x * m.to(x).repeat_interleave(Dh), *args[1:])  # (B, T, H·Dh) × (H·Dh,)

        return scale

    handles = []
    try:
        for proj, m in zip(projs, mask):
            if not bool((m == 1).all()):
                handles.append(proj.register_forward_pre_hook(hook_for(m)))
        yield
    finally:
        for h in handles:
            h.remove()


def _hf_probe(backend, text: str) -> Probe:
    net = backend.net
    projs = projections(net, backend.n_layers)
    ids = torch.tensor([encode(backend.tokenizer, text, backend.max_tokens).ids], device=backend.device)  # (1, T)
    causal = backend.kind == "decoder"
    if causal and ids.shape[1] < 2:
        raise ValueError("The next-token loss needs at least two tokens: enter a longer text.")

    def run(head_mask):
        with backend.lock, torch.inference_mode(), heads_masked(projs, head_mask):
            out = net(input_ids=ids)
        if causal:
            return F.cross_entropy(out.logits[0, :-1].double(), ids[0, 1:])  # predicts token t + 1 from t
        return out.last_hidden_state[0]  # (T, D)

    return Probe("lm", run, loss_increase) if causal else Probe("encoder", run, pooled_cosine_change)


def _classifier_probe(backend, text: str) -> Probe:
    tokens = backend.source.tokens(check_text(text))[: backend.max_tokens]
    ids = torch.tensor([backend.source.ids(tokens)])  # (1, T)

    def run(head_mask):
        with backend.lock, torch.inference_mode():
            logits, _ = backend.net(ids, head_mask=torch.as_tensor(head_mask, dtype=torch.float32))
        return logits[0].double().softmax(-1)  # (n_classes,)

    return Probe("classifier", run, probability_drop)


def probe(backend, text: str) -> Probe:
    """The ablation probe for ``backend``; a ValueError in plain words when the model is not supported."""
    text = check_text(text)
    if backend.kind == "encoder-decoder":
        raise ValueError("Head ablation covers encoders and causal LMs; encoder–decoder models are not supported.")
    if isinstance(getattr(backend, "net", None), TextClassifier):
        return _classifier_probe(backend, text)
    if hasattr(backend, "head_mask_forward"):
        return Probe("encoder", lambda m: backend.head_mask_forward(text, m), pooled_cosine_change)
    if hasattr(getattr(backend, "net", None), "config") and hasattr(backend, "tokenizer"):
        return _hf_probe(backend, text)
    raise ValueError(f"Head ablation is not available for {backend.key}.")


def head_importance(backend, text: str, progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, str]:
    """(importance (L, H), measure key): the output change when each head alone is removed.

    ``progress(done, total)`` is called after each head. A model with more heads than ATTNVIZ_MAX_FORWARDS
    allows is refused before the first pass.
    """
    L, H = backend.n_layers, backend.n_heads
    check_forwards(L * H + 1, "Head importance by ablation")  # one pass per head, and the baseline
    p = probe(backend, text)
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
