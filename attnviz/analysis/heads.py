"""What each head does, as one number per head: entropy, distance, where the weight goes (Clark et al. 2019).

Every statistic is a mean over query rows of a per-row quantity, computed from an AttentionTrace's
(L, H, T, T) weights; all return (L, H) float64 arrays.
"""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

import numpy as np

from ..core.tokens import clean


class Stat(NamedTuple):
    label: str
    formula: str  # one line, shown under the heatmap
    scale: str  # colour range: "one" (0–1), "log_T" (0–ln T) or "distance" (0–T−1)


CLARK = "Clark et al. 2019, *What Does BERT Look At?*"
STATS = {
    "entropy": Stat("entropy (nats)", "H_i = −Σ_j α_ij ln α_ij, averaged over queries i (Clark et al. 2019)", "log_T"),
    "entropy_norm": Stat(
        "normalised entropy",
        "H_i / ln n_i with n_i the attendable keys (T for encoders, i + 1 for causal row i): 0 = one key, 1 = uniform",
        "one",
    ),
    "distance": Stat("mean attention distance", "Σ_j α_ij |i − j|, in tokens, averaged over queries", "distance"),
    "cls": Stat("share on [CLS]", f"Σ_j α_ij over j = the first token when it is special ([CLS], <s>) — {CLARK}", "one"),
    "sep": Stat("share on [SEP] and other specials", f"Σ_j α_ij over the other special tokens ([SEP], </s>, …) — {CLARK}", "one"),
    "punct": Stat("share on punctuation", f"Σ_j α_ij over punctuation tokens — {CLARK}", "one"),
    "prev": Stat("previous-token score", f"mean over i ≥ 1 of α_i,i−1 — {CLARK}", "one"),
    "self": Stat("self score", "mean over i of α_i,i", "one"),
    "next": Stat("next-token score", f"mean over i < T − 1 of α_i,i+1 — {CLARK}", "one"),
    "max": Stat("largest weight", "max_j α_ij, averaged over queries: how peaked a head is", "one"),
}


def _float(attn) -> np.ndarray:
    """The weights as a float array, in their own precision (float32 from a trace) to spare memory."""
    return np.asarray(attn, np.result_type(attn, np.float32))


def row_entropy(attn: np.ndarray) -> np.ndarray:
    """−Σ_j α_ij ln α_ij of every row: (..., T, T) -> (..., T) float64."""
    a = _float(attn)
    logs = np.log(a, out=np.zeros_like(a), where=a > 0)  # 0 ln 0 = 0
    return -np.einsum("...j,...j->...", a, logs).astype(np.float64)


def entropy(attn: np.ndarray) -> np.ndarray:
    """Mean row entropy in nats: (..., T, T) -> (...); between 0 and ln T."""
    return row_entropy(attn).mean(-1)


def attendable(T: int, causal: bool) -> np.ndarray:
    """How many keys each query row may attend to: (T,)."""
    return np.arange(1, T + 1) if causal else np.full(T, T)


def normalised_entropy(attn: np.ndarray, causal: bool, rows: np.ndarray | None = None) -> np.ndarray:
    """Mean of H_i / ln n_i over rows with more than one attendable key (0 when there are none): (...).

    ``rows`` are the row entropies (..., T) when already computed.
    """
    n = attendable(attn.shape[-1], causal)
    keep = n > 1
    if not keep.any():
        return np.zeros(attn.shape[:-2])
    rows = row_entropy(attn) if rows is None else rows
    return (rows[..., keep] / np.log(n[keep])).mean(-1)


def distance(attn: np.ndarray) -> np.ndarray:
    """Mean over queries of Σ_j α_ij |i − j|: (..., T, T) -> (...)."""
    a = _float(attn)
    T = a.shape[-1]
    gap = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :]).astype(a.dtype)  # (T, T)
    return np.einsum("...ij,ij->...i", a, gap).mean(-1, dtype=np.float64)


def share(attn: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Mean over queries of the weight on the keys where ``keys`` (T,) is True: (...)."""
    a = _float(attn)
    return (a @ np.asarray(keys, a.dtype)).mean(-1, dtype=np.float64)  # a matrix product: no (..., T, T) copy


def diagonal(attn: np.ndarray, offset: int) -> np.ndarray:
    """Mean of α_i,i+offset over the rows where i + offset is a position (0 if none): (...)."""
    d = np.diagonal(attn, offset, axis1=-2, axis2=-1)  # (..., T − |offset|)
    return d.mean(-1, dtype=np.float64) if d.shape[-1] else np.zeros(attn.shape[:-2])


def largest(attn: np.ndarray) -> np.ndarray:
    """Mean over queries of the row's largest weight: (...)."""
    return _float(attn).max(-1).mean(-1, dtype=np.float64)


def is_punctuation(token: str) -> bool:
    """True for tokens made only of punctuation marks ("." "," "##?" "Ġ!")."""
    text = clean(token)
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def key_masks(trace) -> dict[str, np.ndarray]:
    """(T,) masks of the [CLS]-like first special token, the other special tokens, and punctuation."""
    special = np.asarray(trace.special, bool)
    first = np.zeros_like(special)
    first[0] = special[0]
    punct = np.array([is_punctuation(t) for t in trace.tokens]) & ~special
    return {"cls": first, "sep": special & ~first, "punct": punct}


def head_stats(trace, shares: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every statistic in STATS for every head of one stack: name -> (L, H); with ``shares`` (name -> (T,) bool
    key mask), also each mask's share of the weight (mean over queries), in the same pass.

    Row by row, a tile of query rows at a time (``trace.weights``), so any length costs what the forward
    costs, never L·H·T² floats at once.
    """
    w = trace.weights
    L, H, T, _ = w.shape
    keys = {**key_masks(trace), **(shares or {})}
    masks = np.stack(list(keys.values()), axis=1).astype(np.float32)  # (T, K): cls, sep, punct, then ``shares``
    n = attendable(T, trace.kind == "decoder")
    log_n = np.log(np.maximum(n, 2)).astype(np.float32)  # rows with one attendable key are left out below
    sums = {name: np.zeros((L, H)) for name in (*STATS, *keys)}
    for layer in range(L):
        for a, b in w.spans(H):
            tile = np.asarray(w.tile(layer, list(range(H)), a, b), np.float32)  # (H, rows, T)
            rows = np.arange(a, b)
            ent = row_entropy(tile)  # (H, rows)
            s = sums
            s["entropy"][layer] += ent.sum(-1)
            s["entropy_norm"][layer] += (ent[:, n[a:b] > 1] / log_n[a:b][n[a:b] > 1]).sum(-1)
            gap = np.abs(rows[:, None] - np.arange(T)[None, :]).astype(np.float32)  # (rows, T)
            s["distance"][layer] += np.einsum("hij,ij->h", tile, gap, dtype=np.float64)
            weight_on = (tile @ masks).sum(1, dtype=np.float64)  # (H, K)
            for i, name in enumerate(keys):
                s[name][layer] += weight_on[:, i]
            for name, offset in (("prev", -1), ("self", 0), ("next", 1)):
                r = rows[(rows + offset >= 0) & (rows + offset < T)]
                s[name][layer] += tile[:, r - a, r + offset].sum(-1, dtype=np.float64)
            s["max"][layer] += tile.max(-1).sum(-1, dtype=np.float64)
    counts = {"entropy_norm": int((n > 1).sum()), "prev": T - 1, "next": T - 1}
    return {name: total / counts.get(name, T) if counts.get(name, T) else total for name, total in sums.items()}


def stat_range(name: str, T: int) -> tuple[float, float]:
    """The fixed colour range of a statistic for T tokens."""
    scale = STATS[name].scale
    top = {"one": 1.0, "log_T": np.log(T), "distance": T - 1.0}[scale]
    return 0.0, max(float(top), 1e-9)


def head_table(stats: dict[str, np.ndarray]):
    """A pandas DataFrame with one row per head: layer, head, then every statistic."""
    import pandas as pd

    L, H = next(iter(stats.values())).shape
    layer, head = np.divmod(np.arange(L * H), H)
    columns = {STATS[k].label: v.ravel() for k, v in stats.items()}
    return pd.DataFrame({"layer": layer, "head": head, **columns})
