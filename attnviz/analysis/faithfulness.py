"""Is the attention faithful? Eight explanations of one prediction, ranked against what the model does.

Raw weights, rollout (Abnar & Zuidema 2020), norm-based attention (Kobayashi et al. 2020), value zeroing (Mohebbi
et al. 2023) and gradients often disagree about which tokens matter (Jain & Wallace 2019). ``explain`` computes
them all for one prediction, with leave-one-out occlusion as the behavioural reference; ``agreement`` ranks each
against it (Spearman) and by its deletion curve (AOPC, Samek et al. 2017). "Removing" a token, for occlusion and
the deletion curves, sets its token embedding to the integrated-gradients baseline, zero: its position stays.

The model is a loaded backend, duck-typed: ``trace(text, max_tokens=…)`` and ``scorer(text, target, max_tokens)``
(``attnviz.backends.common.Scorer``: the prediction as a differentiable function of the token embeddings). Value
zeroing is attnviz.analysis.interventions' ``ZeroValue`` edit, handed in by the caller as ``zero_value``: that module drives
backends, so this one (which never imports a backend) cannot import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

import numpy as np
import pandas as pd
import torch

from ..backends.common import chat_kw
from ..core.budget import check_forwards
from .rollout import rollout

IG_STEPS = 64  # integrated gradients' quadrature points: Explanation.completeness says how close they came
DELETION_STEPS = 10  # deletion curves remove the top 0, 1, …, 10 tokens (all of them in a shorter text)
BATCH = 16  # texts per forward pass; every text counts as one pass against ATTNVIZ_MAX_FORWARDS

METHODS = {
    "attention": "raw attention: the target position's row, every layer and head averaged",
    "attention (last layer)": "raw attention: the target position's row in the last layer, heads averaged",
    "rollout": "attention rollout after the last layer (Abnar & Zuidema 2020), the target position's row",
    "norm-based": "‖α·f(x)‖ (Kobayashi et al. 2020): the row weighted by each head's value-vector norms, "
                  "heads summed, layers averaged",
    "value zeroing": "drop of the score when the token's value vectors are zeroed for every other position in every "
                     "layer and head (Mohebbi et al. 2023)",
    "gradient × input": "∂score/∂x · x per token embedding x",
    "integrated gradients": "x · the mean gradient on the straight path from a zero embedding to x, by Gauss–Legendre "
                            f"quadrature ({IG_STEPS} points unless chosen; Sundararajan et al. 2017)",
    "occlusion": "drop of the score when the token alone is removed (its embedding zeroed): the reference",
}
AOPC = ("AOPC = mean over k = 0…K of p(text) − p(text without the top-k tokens), K = min(T, "
        f"{DELETION_STEPS}); higher: the method's top tokens matter more (Samek et al. 2017)")


class Explanation(Mapping):
    """method -> (T,) importance of every token of ``tokens``, with the deletion curves and what was scored."""

    def __init__(self, importance: dict, tokens: tuple, target: str, probability: bool, curves: dict,
                 score: float, baseline: float, missing: dict):
        self.importance = {k: np.asarray(v, np.float64) for k, v in importance.items()}
        self.tokens, self.target, self.probability = tokens, target, probability
        self.curves = curves  # method -> (K + 1,) probability (or score) after removing its top 0…K tokens
        self.score, self.baseline = score, baseline  # the score of the text, and of every embedding zeroed
        self.missing = missing  # method -> why this model cannot give it

    def __getitem__(self, method: str) -> np.ndarray:
        return self.importance[method]

    def __iter__(self):
        return iter(self.importance)

    def __len__(self) -> int:
        return len(self.importance)

    @property
    def completeness(self) -> float:
        """Σ integrated gradients ÷ (score − baseline score): 1 when the quadrature's steps were enough."""
        return float(self["integrated gradients"].sum() / (self.score - self.baseline))

    def table(self) -> pd.DataFrame:
        """One row per token: index, token, then each method's importance."""
        return pd.DataFrame({"token_index": np.arange(len(self.tokens)), "token": list(self.tokens), **self})


def forwards(n_tokens: int, steps: int = IG_STEPS) -> int:
    """Forward passes ``explain`` runs for a text of ``n_tokens``: occlusion and value zeroing one per token,
    integrated gradients one per step, the deletion curves one per removal and method."""
    return 2 + 2 * n_tokens + 1 + steps + len(METHODS) * min(n_tokens, DELETION_STEPS)


def _read(trace, layer: int, head: int | None, position: int | None) -> np.ndarray:
    """(T,) what the target reads in one head (None: the layer's mean): one row, or every row's mean."""
    if position is None:
        return trace.received(layer, head) / trace.n_tokens
    return trace.row(layer, head, position)


def _attention(trace, position: int | None) -> dict:
    L, H = trace.n_layers, trace.n_heads
    rows = np.stack([_read(trace, layer, None, position) for layer in range(L)])  # (L, T)
    r = rollout(trace.weights)[-1]  # (T, T)
    out = {"attention": rows.mean(0), "attention (last layer)": rows[-1],
           "rollout": r.mean(0) if position is None else r[position]}
    if "value_norms" in trace.norms:
        vn = trace.norms["value_norms"]  # (L, H, T)
        out["norm-based"] = np.mean([sum(_read(trace, layer, h, position) * vn[layer, h] for h in range(H))
                                     for layer in range(L)], 0)
    return out


def _batched(score: Callable, xs: torch.Tensor, tick=None) -> np.ndarray:
    """score of each of ``xs`` (N, T, D), BATCH at a time, without gradients: (N,)."""
    out = []
    with torch.no_grad():
        for i in range(0, len(xs), BATCH):
            out.append(score(xs[i:i + BATCH]))
            if tick:
                tick(len(out[-1]))
    return torch.cat(out).numpy()


def value_zeroed(scorer, zero_value: Callable, tick=None) -> np.ndarray:
    """(T,) the score with token j's value vectors zeroed, for each j: one recorded forward inside ``zero_value(j)``
    each (``lambda j: editing([ZeroValue(j)])`` from attnviz.analysis.interventions)."""
    out = []
    with torch.no_grad():
        for j in range(len(scorer.embeds)):
            with zero_value(j):
                out.append(float(scorer.score(scorer.embeds[None], recorded=True)[0]))
            if tick:
                tick(1)
    return np.array(out)


def _removed(x: torch.Tensor, order: np.ndarray, ks) -> torch.Tensor:
    """``x`` (T, D) with its first k tokens by ``order`` zeroed, for each k: (len(ks), T, D)."""
    xs = x.expand(len(ks), -1, -1).clone()  # (K, T, D)
    for row, k in enumerate(ks):
        xs[row, order[:k]] = 0.0
    return xs


def gradient_input(score: Callable, x: torch.Tensor) -> np.ndarray:
    """(T,) ∂score/∂x_i · x_i for token embeddings ``x`` (T, D)."""
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(score(x[None]).sum(), x)  # gradients of x only: the model's stay unset
    return (grad * x).sum(-1).detach().double().numpy()


def integrated_gradients(score: Callable, x: torch.Tensor, steps: int = IG_STEPS, tick=None) -> np.ndarray:
    """(T,) x_i · ∫₀¹ ∂score/∂x_i(α·x) dα for token embeddings ``x`` (T, D) and a zero baseline, by ``steps``-point
    Gauss–Legendre quadrature (as Captum does): exact for a score polynomial in α of degree < 2·steps."""
    nodes, weights = np.polynomial.legendre.leggauss(steps)  # on [−1, 1]
    alphas, weights = torch.tensor((nodes + 1) / 2), torch.tensor(weights / 2)  # on [0, 1]
    total = torch.zeros_like(x, dtype=torch.float64)  # (T, D)
    for i in range(0, steps, BATCH):
        a, w = alphas[i:i + BATCH], weights[i:i + BATCH]
        path = (a[:, None, None].to(x) * x.detach()).requires_grad_(True)  # (B, T, D)
        with torch.enable_grad():
            (grad,) = torch.autograd.grad(score(path).sum(), path)
        total += (w[:, None, None] * grad.double()).sum(0)
        if tick:
            tick(len(a))
    return (total * x.double()).sum(-1).numpy()


def explain(model, text: str, target: str | None = None, steps: int = IG_STEPS,
            progress: Callable[[int, int], None] | None = None, max_tokens: int | None = None,
            zero_value: Callable | None = None, chat: bool = False) -> Explanation:
    """Every method's (T,) importance for ``model``'s prediction on ``text`` (see METHODS), with deletion curves.

    ``model`` is a loaded backend (``attnviz.load(key)``); ``target`` a classifier's label or a causal LM's next
    word (default: the predicted one); ``zero_value`` see ``value_zeroed`` (without it value zeroing is left out);
    ``chat``: the text in the model's chat template.
    ``progress(done, total)`` counts forward passes; a text needing more than ATTNVIZ_MAX_FORWARDS is refused first.
    """
    if model.kind not in ("encoder", "decoder"):
        raise ValueError("Faithfulness explains one stack's prediction: encoder–decoder models are not supported.")
    if not model.can("scorer"):
        raise ValueError(f"{model.key} cannot yet give its prediction as a function of its token embeddings: "
                         "faithfulness covers the built-in models and Hugging Face encoders and causal LMs.")
    trace = model.trace(text, max_tokens=max_tokens, **chat_kw(chat))
    T = trace.n_tokens
    total = forwards(T, steps)
    check_forwards(total, f"Explaining a prediction on {T} tokens")
    s = model.scorer(text, target, max_tokens, **chat_kw(chat))
    x = s.embeds
    if len(x) != T:
        raise ValueError(f"the scorer sees {len(x)} tokens but the trace has {T}")
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress is not None:
            progress(min(done[0], total), total)

    importance, missing = _attention(trace, s.position), {}
    if "norm-based" not in importance:
        missing["norm-based"] = "this model's trace has no value-vector norms"
    base, baseline = _batched(s.score, torch.stack([x, torch.zeros_like(x)]), tick=tick)
    alone = x.expand(T, -1, -1).clone()  # (T, T, D): text i has token i zeroed
    alone[torch.arange(T), torch.arange(T)] = 0.0
    occluded = _batched(s.score, alone, tick=tick)
    if zero_value is None:
        missing["value zeroing"] = "no zero_value was given (attnviz.analysis.interventions' ZeroValue edit)"
        tick(T)
    else:
        importance["value zeroing"] = base - value_zeroed(s, zero_value, tick)
    importance["gradient × input"] = gradient_input(s.score, x)
    tick(1)
    importance["integrated gradients"] = integrated_gradients(s.score, x, steps, tick)
    importance["occlusion"] = base - occluded

    ks = list(range(min(T, DELETION_STEPS) + 1))
    curves = {}
    for method, values in importance.items():
        order = np.argsort(-values, kind="stable")
        scores = np.concatenate([[base], _batched(s.score, _removed(x, order, ks[1:]), tick=tick)])
        curves[method] = 1 / (1 + np.exp(-scores)) if s.probability else scores
    return Explanation(importance, trace.tokens, s.target, s.probability, curves, float(base), float(baseline), missing)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's of the ranks, ties given their mean rank (NaN if either is flat)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def aopc(curve: np.ndarray) -> float:
    """Area over the deletion curve: the mean drop from its first value, k = 0 included (Samek et al. 2017)."""
    curve = np.asarray(curve, np.float64)
    return float((curve[0] - curve).mean())


def agreement(explanation: Explanation) -> pd.DataFrame:
    """One row per method (columns method, spearman, aopc): rank agreement with occlusion and the deletion AOPC."""
    reference = explanation["occlusion"]
    return pd.DataFrame({
        "method": list(explanation),
        "spearman": [spearman(v, reference) for v in explanation.values()],
        "aopc": [aopc(explanation.curves[m]) for m in explanation],
    })
