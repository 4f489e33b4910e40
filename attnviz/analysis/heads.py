"""What each head does, as one number per head: entropy, distance, where the weight goes (Clark et al. 2019).

Every statistic is a mean over query rows of a per-row quantity, computed from an AttentionTrace's
(L, H, T, T) weights; all return (L, H) float64 arrays.
"""

from __future__ import annotations

import unicodedata
from typing import NamedTuple

import numpy as np
import torch

from ..core.tokens import clean
from ..core.weights import tensor_view


class Stat(NamedTuple):
    label: str
    formula: str  # one line, shown under the heatmap
    scale: str  # colour range: "one" (0–1), "log_T" (0–ln T) or "distance" (0–T−1)


CLARK = "Clark et al. 2019, *What Does BERT Look At?*"
HEAD_STATS = {
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


PER_ROW = ("entropy", "entropy_norm", "distance", "max", "prev", "self", "next")  # row_sums' first rows, in order


def row_sums(w: torch.Tensor, start: int, masks: torch.Tensor, inv_log_n: torch.Tensor,
             ent: torch.Tensor | None = None, top: torch.Tensor | None = None) -> torch.Tensor:
    """Every per-row quantity of the statistics, summed over one tile's query rows: (len(PER_ROW) + K, ..., H)
    float64, PER_ROW's then each key mask's share (the weight on its keys).

    ``w`` (..., H, rows, T) float32 holds the weights of query rows ``start:start + rows`` (one text: (H, rows, T);
    a padded batch: (B, H, rows, T)); a row to leave out is all 0, and so are its ``ent``, ``top`` and ``inv_log_n``.
    ``masks`` (..., T, K) float32: the K key masks (of each text). ``inv_log_n`` (..., rows): 1 / ln n_i, n_i the keys
    row i may attend to, 0 for a row left out of entropy_norm. ``ent`` and ``top`` (..., H, rows): the rows'
    entropies and largest weights, when already known.
    """
    T = w.shape[-1]
    ent = -torch.special.xlogy(w, w).sum(-1) if ent is None else ent  # (..., H, rows); 0 ln 0 = 0
    top = w.amax(-1) if top is None else top  # (..., H, rows)
    r = torch.arange(start, start + w.shape[-2])  # (rows,) query positions
    gap = (r[:, None] - torch.arange(T)[None, :]).abs().float()  # (rows, T)
    rows = torch.stack([ent, ent * inv_log_n[..., None, :], (w * gap).sum(-1), top])  # (4, ..., H, rows)
    # α_i,i+offset (prev, self, next): diagonal start + offset of the tile; none where i + offset is not a key
    diagonals = [torch.diagonal(w, start + offset, dim1=-2, dim2=-1).sum(-1, dtype=torch.float64)
                 for offset in (-1, 0, 1)]
    # (..., H, K): the weight each mask's keys receive; float64 products, so a mask's share is the same to the last
    # digits whichever masks stand beside it
    shares = w.sum(-2).double() @ masks.double()
    return torch.cat([rows.sum(-1, dtype=torch.float64), torch.stack(diagonals), shares.movedim(-1, 0)])


def row_means(sums: dict, n, decoder: bool) -> dict[str, np.ndarray]:
    """Each statistic's mean over its rows, from row_sums' totals ``sums`` (name -> (..., L, H) float64) of texts
    of ``n`` tokens (a number, or a (B, 1, 1) tensor for a batch): entropy_norm over the rows that may attend to
    more than one key, prev and next over the n − 1 rows that have such a neighbour, the rest over all n."""
    n = torch.as_tensor(n, dtype=torch.float64)
    count = {"entropy_norm": n - 1 if decoder else torch.where(n > 1, n, 0), "prev": n - 1, "next": n - 1}
    return {name: torch.where(count.get(name, n) > 0, total / count.get(name, n).clamp(min=1), total).numpy()
            for name, total in sums.items()}


def head_stats(trace, shares: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every statistic in HEAD_STATS for every head of one stack: name -> (L, H); with ``shares`` (name -> (T,) bool
    key mask), also each mask's share of the weight (mean over queries), in the same pass.

    Row by row, a tile of query rows at a time (``trace.weights``), through the same ``row_sums`` and
    ``row_means`` a corpus batch goes through, so any length costs what the forward costs, never L·H·T² floats
    at once.
    """
    w = trace.weights
    L, H, T, _ = w.shape
    keys = {**key_masks(trace), **(shares or {})}
    masks = torch.from_numpy(np.stack(list(keys.values()), axis=1).astype(np.float32))  # (T, K): cls, sep, punct, …
    decoder = trace.kind == "decoder"
    n = attendable(T, decoder)
    inv_log_n = torch.from_numpy(np.where(n > 1, 1 / np.log(np.maximum(n, 2)), 0).astype(np.float32))  # (T,)
    sums = torch.zeros(len(PER_ROW) + len(keys), L, H, dtype=torch.float64)
    with torch.inference_mode():
        for layer in range(L):
            for a, b in w.spans(H):
                tile = np.asarray(w.tile(layer, list(range(H)), a, b), np.float32)  # (H, rows, T)
                ent = torch.from_numpy(row_entropy(tile).astype(np.float32))  # (H, rows): numpy's log is faster
                sums[:, layer] += row_sums(tensor_view(tile), a, masks, inv_log_n[a:b], ent)
    means = row_means(dict(zip((*PER_ROW, *keys), sums)), T, decoder)
    return {name: means[name] for name in (*HEAD_STATS, *keys)}


def stat_range(name: str, T: int) -> tuple[float, float]:
    """The fixed colour range of a statistic for T tokens."""
    scale = HEAD_STATS[name].scale
    top = {"one": 1.0, "log_T": np.log(T), "distance": T - 1.0}[scale]
    return 0.0, max(float(top), 1e-9)


def head_table(stats: dict[str, np.ndarray]):
    """A pandas DataFrame with one row per head: layer, head, then every statistic."""
    import pandas as pd

    L, H = next(iter(stats.values())).shape
    layer, head = np.divmod(np.arange(L * H), H)
    columns = {HEAD_STATS[k].label: v.ravel() for k, v in stats.items()}
    return pd.DataFrame({"layer": layer, "head": head, **columns})
