"""Long-text analyses, tile by tile: one pass over every head gives pooled maps, what each key receives and
how weight falls off with distance; a token's column; a window's exact weights.

Nothing here holds more than one tile of weights (``Weights.rows_per_tile``) at once, so a 16,384-token text
costs one pass over its heads, never L·H·T² floats. Shapes use the legend in ``attnviz/__init__.py``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ..tokens import clean
from ..weights import Weights

SINK_SHARE = 0.3  # a head that puts at least this share of its weight on the first token is flagged a sink


def pool_starts(n: int, size: int) -> np.ndarray:
    """Start indices of min(size, n) nearly equal blocks over n positions (as ``Weights.pooled``)."""
    return np.linspace(0, n, min(size, n) + 1).astype(np.int64)[:-1]


def _blocks(w: np.ndarray, starts: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Block max and block sum of ``w`` along ``axis``."""
    return np.maximum.reduceat(w, starts, axis=axis), np.add.reduceat(w, starts, axis=axis)


def distance_edges(n: int) -> np.ndarray:
    """Log bins of query–key distance |i − j|: [0, 1), [1, 2), [2, 4), [4, 8), … up to n."""
    edges = [0, 1]
    while edges[-1] < n:
        edges.append(edges[-1] * 2)
    return np.array(edges, np.int64)


def distance_labels(edges: np.ndarray) -> list[str]:
    """'0', '1', '2–3', '4–7', … for the bins of ``distance_edges``."""
    return [f"{a}" if b - a == 1 else f"{a:,}–{b - 1:,}" for a, b in zip(edges[:-1], edges[1:])]


def _distance_shares(w: np.ndarray, start: int, edges: np.ndarray) -> np.ndarray:
    """(h, bins): the weight rows ``start:`` of ``w`` (h, rows, Tk) put at each distance bin, summed over rows."""
    h, rows, Tk = w.shape
    c = np.zeros((h, rows, Tk + 1))
    np.cumsum(w, axis=2, dtype=np.float64, out=c[:, :, 1:])  # c[..., j] = weight on keys < j
    i = np.arange(start, start + rows)[:, None]  # (rows, 1) the query positions (self-attention: Tq = Tk)
    lo, hi = edges[None, :-1], edges[None, 1:]  # (1, bins)
    clip = lambda x: np.clip(x, 0, Tk)  # noqa: E731

    def between(a, b):  # (h, rows, bins): weight on keys a ≤ j < b, per row
        a, b = np.broadcast_to(clip(a), (rows, len(edges) - 1)), np.broadcast_to(clip(b), (rows, len(edges) - 1))
        return np.take_along_axis(c, b[None], 2) - np.take_along_axis(c, a[None], 2)

    left = between(i - hi + 1, i - lo + 1)  # keys at distance lo … hi−1 before the query (and itself at 0)
    right = between(i + np.maximum(lo, 1), i + hi)  # after it, distance 0 counted once
    return (left + right).sum(1)


class Survey(NamedTuple):
    """What one pass over every head of a stack gives."""

    starts: dict  # size -> (s,) block start positions (the same for queries and keys)
    pooled_max: dict  # size -> (L, H, s, s) block max
    pooled_mean: dict  # size -> (L, H, s, s) block mean
    layer_max: dict  # size -> (L, s, s) block max of the layer's mean over heads
    received: np.ndarray  # (L, H, Tk) weight each key receives, summed over the queries
    distance: np.ndarray  # (L, H, bins) share of weight by query–key distance (rows of a head sum to 1)
    edges: np.ndarray  # (bins + 1,) distance bin edges

    def pooled(self, size: int, reduce: str) -> np.ndarray:
        """(L, H, s, s) block max or mean."""
        return {"max": self.pooled_max, "mean": self.pooled_mean}[reduce][size]


def survey(weights: Weights, sizes=(64, 256), progress: Callable[[float], None] | None = None) -> Survey:
    """One pass over every head of a self-attention stack: pooled maps at each size (max and mean), what each
    key receives, and the distance profile. ``progress(fraction)`` is called after each tile."""
    L, H, Tq, Tk = weights.shape
    if Tq != Tk:
        raise ValueError(f"a survey needs self-attention (as many queries as keys), got {Tq}×{Tk}")
    starts = {s: pool_starts(Tk, s) for s in sizes}
    sizes_of = {s: np.diff(np.append(b, Tk)).astype(np.float64) for s, b in starts.items()}  # block lengths
    pmax = {s: np.zeros((L, H, len(b), len(b)), np.float32) for s, b in starts.items()}
    psum = {s: np.zeros((L, H, len(b), len(b)), np.float64) for s, b in starts.items()}
    lmax = {s: np.zeros((L, len(b), len(b)), np.float32) for s, b in starts.items()}
    received = np.zeros((L, H, Tk), np.float64)
    edges = distance_edges(Tk)
    distance = np.zeros((L, H, len(edges) - 1))
    step = weights.rows_per_tile(H)
    done, total = 0, L * Tq
    for layer in range(L):
        for a in range(0, Tq, step):  # a row block split between tiles accumulates (max, sum) across them
            b = min(a + step, Tq)
            w = weights.tile(layer, list(range(H)), a, b)  # (H, rows, Tk)
            mean = w.mean(0)  # (rows, Tk) the layer's mean over heads
            received[layer] += w.sum(1, dtype=np.float64)
            distance[layer] += _distance_shares(w, a, edges)
            for s, st in starts.items():
                rows = np.clip(np.searchsorted(st, np.arange(a, b), side="right") - 1, 0, None)  # (rows,) block of each row
                kmax, ksum = _blocks(w, st, 2)  # (H, rows, s)
                lk = np.maximum.reduceat(mean, st, axis=1)  # (rows, s)
                first = np.flatnonzero(np.diff(np.append(-1, rows)))  # where each row block begins in the tile
                blocks = rows[first]
                np.maximum.at(pmax[s][layer], (slice(None), blocks), np.maximum.reduceat(kmax, first, axis=1))
                psum[s][layer][:, blocks] += np.add.reduceat(ksum, first, axis=1)
                np.maximum.at(lmax[s][layer], blocks, np.maximum.reduceat(lk, first, axis=0))
            done += b - a
            if progress is not None:
                progress(done / total)
    pmean = {s: (psum[s] / np.multiply.outer(sizes_of[s], sizes_of[s])).astype(np.float32) for s in sizes}
    rows_seen = np.maximum(distance.sum(2, keepdims=True), 1e-30)  # each head's total weight (rows that see a key)
    return Survey(starts, pmax, pmean, lmax, received.astype(np.float32), (distance / rows_seen).astype(np.float32),
                  edges)


def first_token_share(s: Survey) -> np.ndarray:
    """(L, H): the share of each head's weight that lands on the first token."""
    total = np.maximum(s.received.sum(2), 1e-30)
    return s.received[:, :, 0] / total


def delimiters(tokens, special) -> np.ndarray:
    """(T,) bool: special tokens and tokens with no letter or digit (punctuation, newlines)."""
    return np.array([bool(sp) or not any(c.isalnum() for c in clean(t)) for t, sp in zip(tokens, special)])


def delimiter_share(s: Survey, mask: np.ndarray) -> np.ndarray:
    """(L, H): the share of each head's weight that lands on the positions in ``mask`` (T,) bool."""
    total = np.maximum(s.received.sum(2), 1e-30)
    return s.received[:, :, mask].sum(2) / total


def sinks(s: Survey, threshold: float = SINK_SHARE) -> list[tuple[int, int, float]]:
    """(layer, head, share) of every head whose first-token share is at least ``threshold``, largest first."""
    share = first_token_share(s)
    found = [(int(l), int(h), float(share[l, h])) for l, h in zip(*np.nonzero(share >= threshold))]
    return sorted(found, key=lambda x: -x[2])


def _heads(weights: Weights, head: int | None) -> list[int]:
    return list(range(weights.shape[1])) if head is None else [head]


def column(weights: Weights, layer: int, head: int | None, key: int) -> np.ndarray:
    """(Tq,): how much each query gives key ``key`` (its column; the layer's mean when ``head`` is None)."""
    heads = _heads(weights, head)
    Tq = weights.shape[2]
    out = np.empty(Tq, np.float32)
    step = weights.rows_per_tile(len(heads))
    for a in range(0, Tq, step):
        b = min(a + step, Tq)
        out[a:b] = weights.tile(layer, heads, a, b)[:, :, key].mean(0)
    return out


def window(weights: Weights, layer: int, head: int | None, start: int, stop: int) -> np.ndarray:
    """(rows, keys): exact weights of queries ``start:stop`` over keys ``start:stop``."""
    return weights.tile(layer, _heads(weights, head), start, stop)[:, :, start:stop].mean(0)


def top_keys(w: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` largest weights of ``w`` (T,), largest first."""
    k = min(k, w.size)
    top = np.argpartition(-w, k - 1)[:k]
    return top[np.argsort(-w[top], kind="stable")]


def find(tokens, word: str) -> list[int]:
    """Positions whose cleaned token equals ``word`` (case-insensitive), or contains it when none is equal."""
    word = word.strip().lower()
    if not word:
        return []
    cleaned = [clean(t).lower() for t in tokens]
    equal = [i for i, c in enumerate(cleaned) if c == word]
    return equal or [i for i, c in enumerate(cleaned) if word in c]


def context(tokens, position: int, width: int = 8) -> tuple[str, str, str]:
    """(before, the token, after): up to ``width`` cleaned tokens either side, as plain text."""
    text = lambda a, b: " ".join(clean(t) for t in tokens[max(0, a):max(0, b)])  # noqa: E731
    return text(position - width, position), clean(tokens[position]), text(position + 1, position + 1 + width)
