"""Long-text analyses, tile by tile: one pass over every head gives pooled maps, what each key receives and
how weight falls off with distance; a token's column; a window's exact weights.

Nothing here holds more than one tile of weights (``Weights.rows_per_tile``) at once, so a 16,384-token text
costs one pass over its heads, never L·H·T² floats. Shapes use the legend in ``attnviz/__init__.py``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from ..tokens import clean
from ..weights import Weights

SINK_SHARE = 0.3  # a head that puts at least this share of its weight on the first token is flagged a sink


def block_size(n: int, blocks: int) -> int:
    """Tokens per block when ``n`` positions are cut into at most ``blocks`` equal blocks (the last may be shorter)."""
    return max(1, -(-n // blocks))


def _block_reduce(x: torch.Tensor, b: int, dim: int, how: str | None = None):
    """Max and sum of ``x`` over consecutive blocks of ``b`` along ``dim`` (the last block may be shorter); only
    the max or only the sum when ``how`` is "max" or "sum"."""
    dim = dim % x.ndim
    n = x.shape[dim]
    full = n // b
    ops = [op for name, op in (("max", torch.amax), ("sum", torch.sum)) if how in (None, name)]
    parts = []
    if full:
        main = x.narrow(dim, 0, full * b)
        main = main.unflatten(dim, (full, b))  # a view: (…, full, b, …)
        parts.append([op(main, dim + 1) for op in ops])
    if n > full * b:
        rest = x.narrow(dim, full * b, n - full * b)
        parts.append([op(rest, dim, keepdim=True) for op in ops])
    out = parts[0] if len(parts) == 1 else [torch.cat(p, dim) for p in zip(*parts)]
    return out[0] if how is not None else tuple(out)


def distance_edges(n: int) -> np.ndarray:
    """Log bins of query–key distance |i − j|: [0, 1), [1, 2), [2, 4), [4, 8), … up to n."""
    edges = [0, 1]
    while edges[-1] < n:
        edges.append(edges[-1] * 2)
    return np.array(edges, np.int64)


def distance_labels(edges: np.ndarray) -> list[str]:
    """'0', '1', '2–3', '4–7', … for the bins of ``distance_edges``."""
    return [f"{a}" if b - a == 1 else f"{a:,}–{b - 1:,}" for a, b in zip(edges[:-1], edges[1:])]


def _distance_shares(w: torch.Tensor, start: int, edges: np.ndarray) -> np.ndarray:
    """(h, bins): the weight rows ``start:`` of ``w`` (h, rows, Tk) put at each distance bin, summed over rows."""
    h, rows, Tk = w.shape
    c = torch.zeros(h, rows, Tk + 1)
    torch.cumsum(w, 2, out=c[:, :, 1:])  # c[..., j] = weight on keys < j (float32: rows sum to 1, error ~1e-7)
    i = torch.arange(start, start + rows)[:, None]  # (rows, 1) the query positions (self-attention: Tq = Tk)
    lo, hi = torch.as_tensor(edges[None, :-1]), torch.as_tensor(edges[None, 1:])  # (1, bins)

    def between(a, b):  # (h, rows, bins): weight on keys a ≤ j < b, per row
        a, b = (torch.broadcast_to(x.clamp(0, Tk), (rows, lo.shape[1])).expand(h, -1, -1) for x in (a, b))
        return c.gather(2, b) - c.gather(2, a)

    left = between(i - hi + 1, i - lo + 1)  # keys at distance lo … hi−1 before the query (and itself at 0)
    right = between(i + lo.clamp(min=1), i + hi)  # after it, distance 0 counted once
    return (left + right).sum(1, dtype=torch.float64).numpy()


class Survey(NamedTuple):
    """What one pass over every head of a stack gives. Blocks are equal runs of tokens (the last may be shorter),
    the same for queries and keys; the overview's blocks are whole groups of the detail's."""

    starts: dict  # "overview" or "detail" -> (s,) block start positions
    pooled_max: dict  # "overview" or "detail" -> (L, H, s, s) block max
    pooled_mean: dict  # "overview" or "detail" -> (L, H, s, s) block mean
    layer_max: np.ndarray  # (L, s, s) detail blocks: block max of the layer's mean over heads
    received: np.ndarray  # (L, H, Tk) weight each key receives, summed over the queries
    distance: np.ndarray  # (L, H, bins) share of weight by query–key distance (rows of a head sum to 1)
    edges: np.ndarray  # (bins + 1,) distance bin edges

    def pooled(self, grid: str, reduce: str) -> np.ndarray:
        """(L, H, s, s) block max or mean on the "overview" or "detail" grid."""
        return {"max": self.pooled_max, "mean": self.pooled_mean}[reduce][grid]

    def block(self, grid: str) -> int:
        """Tokens per block on the "overview" or "detail" grid (the last block may be shorter)."""
        s = self.starts[grid]
        return int(s[1] - s[0]) if len(s) > 1 else int(self.received.shape[2])


def survey(weights: Weights, overview: int = 64, detail: int = 256,
           progress: Callable[[float], None] | None = None) -> Survey:
    """One pass over every head of a self-attention stack: pooled maps at ``detail`` and ``overview`` blocks a
    side (max and mean), what each key receives, and the distance profile. ``progress(fraction)`` after each tile."""
    L, H, Tq, Tk = weights.shape
    if Tq != Tk:
        raise ValueError(f"a survey needs self-attention (as many queries as keys), got {Tq}×{Tk}")
    b = block_size(Tk, detail)
    nb = -(-Tk // b)
    pmax = torch.zeros(L, H, nb, nb)
    psum = torch.zeros(L, H, nb, nb)
    lmax = torch.zeros(L, nb, nb)
    received = torch.zeros(L, H, Tk)
    edges = distance_edges(Tk)
    distance = np.zeros((L, H, len(edges) - 1))
    step = max(b, weights.rows_per_tile(H) // b * b)  # whole row blocks per tile
    heads = list(range(H))
    for layer in range(L):
        for a in range(0, Tq, step):
            z = min(a + step, Tq)
            w = torch.from_numpy(weights.tile(layer, heads, a, z))  # (H, rows, Tk)
            distance[layer] += _distance_shares(w, a, edges)
            r0, r1 = a // b, -(-z // b)  # the row blocks this tile covers, whole
            # Row blocks first: a reduction across rows runs along the contiguous keys and leaves b× fewer values
            # for the key blocks (max_pool2d and avg_pool2d over the tile took about 3× as long, one thread).
            rmax, rsum = _block_reduce(w, b, 1)  # (H, row blocks, Tk)
            received[layer] += rsum.sum(1)
            pmax[layer, :, r0:r1] = _block_reduce(rmax, b, 2, "max")  # (H, row blocks, nb)
            psum[layer, :, r0:r1] = _block_reduce(rsum, b, 2, "sum")
            mean = _block_reduce(w.mean(0), b, 0, "max")  # (row blocks, Tk): block max of the heads' mean
            lmax[layer, r0:r1] = _block_reduce(mean, b, 1, "max")
            if progress is not None:
                progress((layer * Tq + z) / (L * Tq))
    starts = np.arange(0, Tk, b)
    g = block_size(nb, overview)  # detail blocks per overview block
    counts = torch.as_tensor(np.diff(np.append(starts, Tk)), dtype=torch.float32)  # (nb,) tokens per block
    small_counts = _block_reduce(counts, g, 0)[1]
    small_max = _block_reduce(_block_reduce(pmax, g, 2)[0], g, 3)[0]
    small_sum = _block_reduce(_block_reduce(psum, g, 2)[1], g, 3)[1]
    mean = lambda total, n: (total / (n[:, None] * n[None, :])).numpy()  # noqa: E731
    return Survey(
        {"detail": starts, "overview": starts[::g]},
        {"detail": pmax.numpy(), "overview": small_max.numpy()},
        {"detail": mean(psum, counts), "overview": mean(small_sum, small_counts)},
        lmax.numpy(), received.numpy(),
        (distance / np.maximum(distance.sum(2, keepdims=True), 1e-30)).astype(np.float32), edges,
    )


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
