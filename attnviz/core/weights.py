"""One stack's attention weights: held dense, or computed exactly on demand from captured queries and keys.

A model run records, per layer, the queries and keys as its attention function saw them (after rotary
embeddings; grouped-query keys before repetition), the scaling, and a recipe for the mask. Any head's
weights are then softmax(q kᵀ · scaling + mask) again, tile by tile: a 16,384-token text costs what the
forward costs plus what a view asks for, never L·H·T² floats.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .. import settings

TILE_FLOATS = 1 << 22  # one tile of scores: 4 M floats (16 MB), whatever the length
HIDDEN = -1e30  # a padded batch's hidden-key score: its weight underflows to exactly 0 (as −inf's), and 0 · HIDDEN = 0


def soft_capped(scores: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """``scores`` as softcap · tanh(scores / softcap), in place (Gemma 2's logits); as they are when ``softcap`` is
    None."""
    return scores if softcap is None else torch.tanh(scores.div_(softcap)).mul_(softcap)


def softmax_into(scores: torch.Tensor, out: torch.Tensor) -> None:
    """The softmax of ``scores`` over its last axis, written into ``out``, which may be ``scores`` itself.
    ``torch._softmax`` where it can: ``torch.softmax(out=)`` costs more a call, and a long forward makes thousands."""
    if out.is_contiguous():
        torch._softmax(scores, -1, False, out=out)
    else:  # _softmax writes a strided ``out`` as if it were contiguous
        torch.softmax(scores, -1, out=out)


def hidden_keys(p: torch.Tensor, j: torch.Tensor, causal, window, n=None) -> torch.Tensor | None:
    """(…, rows, keys) bool: True where a query at position ``p`` (rows, 1) may not see the key at ``j`` (1, keys):
    j > p when ``causal``, p − j ≥ ``window`` when one is set, j ≥ ``n`` (padding past a text's n keys) when given.
    None when no key is hidden. For one text ``causal`` is a bool and ``window`` an int or None; for a padded
    batch each (and ``n``) is a (B, 1, 1) tensor, one text each (a window of None given as more than the keys).
    The one rule for which keys a query sees: LayerQK.scores and PaddedQK.scores both ask it."""
    parts = []
    if isinstance(causal, torch.Tensor):
        parts.append(causal & (j > p))
    elif causal:
        parts.append(j > p)
    if window is not None:
        parts.append(p - j >= window)
    if n is not None:
        parts.append(j >= n)
    hidden = parts[0] if parts else None
    for part in parts[1:]:
        hidden = hidden | part
    return hidden


@dataclass(frozen=True, eq=False)
class LayerQK:
    """What one attention layer needs to give its weights again.

    A key j is hidden from query i when ``causal`` and j > p, or with a ``window`` when p − j ≥ window, where
    p = i + Tk − Tq is the query's position among the keys (p = i without a cache). ``bias`` adds a value per
    head and offset j − i (T5's relative bias); ``mask`` adds anything else, dense (its size is the model's
    own: a model that builds such a mask has already paid for it).
    """

    q: torch.Tensor  # (H, Tq, Dh)
    k: torch.Tensor  # (Hkv, Tk, Dh): H/Hkv query heads share each key head
    scaling: float
    softcap: float | None = None  # logits become softcap · tanh(logits / softcap) before the mask (Gemma 2)
    causal: bool = False
    window: int | None = None
    bias: torch.Tensor | None = None  # (1 or H, Tq + Tk − 1): entry j − i + Tq − 1 is added to (i, j)
    mask: torch.Tensor | None = None  # (1 or H, Tq, Tk) additive, or bool (True: may attend)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.q.shape[0], self.q.shape[1], self.k.shape[1]  # H, Tq, Tk

    @property
    def nbytes(self) -> int:
        parts = (self.q, self.k, self.bias, self.mask)
        return sum(t.element_size() * t.nelement() for t in parts if t is not None)

    def weights(self, heads, start: int, stop: int, out: torch.Tensor | None = None,
                scaled: torch.Tensor | None = None, visit=None, chunk: int | None = None) -> torch.Tensor:
        """Exact float32 weights of query rows ``start:stop`` for the heads in ``heads`` (a list): (h, rows, Tk),
        written into ``out`` when given; ``scaled`` as in ``scores``. ``visit(w, a)``, when given, sees the
        weights w (h, ≤ chunk, Tk) of rows a:a + ``chunk`` as soon as they are made (all rows when None).

        Rows sum to 1 over the keys a query may see; hidden keys get 0, and a row that sees none is all 0.
        Only the band of keys some row of the tile may see is computed (half the work for a causal model).
        """
        lo, hi = self._band(start, stop)
        whole = out is not None and lo == 0 and hi == self.shape[2]  # scores made in ``out``, softmaxed in place
        scores = self.scores(heads, start, stop, lo, hi, out if whole else None, scaled)  # (h, rows, band)
        if out is None:
            out = torch.empty(len(heads), stop - start, self.shape[2])
        if not whole:
            out[..., :lo] = 0
            out[..., hi:] = 0
        n = stop - start
        step = min(chunk or n, n)
        # The scores come from one product over every row (the fastest), the softmax a chunk at a time: a visitor
        # then reads each chunk's weights while they are still in the cache. A chunk is a strided (h, rows, Tk)
        # view, and a softmax into one copies it: one head at a time, each chunk of a head is contiguous rows.
        for a in range(0, n, step):
            b = min(a + step, n)
            if step == n:
                softmax_into(scores, out[..., lo:hi])
            else:
                for i in range(len(heads)):
                    softmax_into(scores[i, a:b], out[i, a:b, lo:hi])
            w = out[:, a:b]
            if self.mask is not None:
                w[..., lo:hi].nan_to_num_(0.0)  # a row that sees no key: 0, not NaN
            self.edit(w, heads, start + a, start + b)
            if visit is not None:
                visit(w, start + a)
        return out

    def edit(self, w: torch.Tensor, heads, start: int, stop: int) -> None:
        """Change the weights ``w`` (h, rows, Tk) of query rows ``start:stop`` in place before anything reads them:
        nothing here (``attnviz.analysis.interventions.EditedQK`` edits them)."""

    def _band(self, start: int, stop: int) -> tuple[int, int]:
        """(lo, hi): the keys some query row of ``start:stop`` may see (causal and window limits)."""
        H, Tq, Tk = self.shape
        lo = max(0, start + Tk - Tq - self.window + 1) if self.window is not None else 0
        hi = min(Tk, stop + Tk - Tq) if self.causal else Tk
        return lo, hi

    def scores(self, heads, start: int, stop: int, lo: int, hi: int, out: torch.Tensor | None = None,
               scaled: torch.Tensor | None = None) -> torch.Tensor:
        """(h, rows, hi − lo) float32: the logits of query rows ``start:stop`` over keys ``lo:hi`` for the heads in
        ``heads`` (a list), soft-capped, biased and masked (−inf where a key is hidden); written into ``out`` when
        given. Softmax over every key of a row gives its weights. ``scaled`` (h, Tq, Dh): these heads' queries as
        float32 times ``scaling``, when a caller reading many tiles made them once (``output``)."""
        H, Tq, Tk = self.shape
        heads = torch.as_tensor(heads, dtype=torch.long)
        p = torch.arange(start, stop)[:, None] + (Tk - Tq)  # (rows, 1) the queries' positions among the keys
        j = torch.arange(lo, hi)[None, :]  # (1, band) the keys computed
        every = len(heads) == H and bool((heads == torch.arange(H)).all())  # every head in order: views, no copies
        if scaled is not None:
            q = scaled[:, start:stop]  # (h, rows, Dh)
        else:
            q = (self.q[:, start:stop] if every else self.q[heads, start:stop]).float() * self.scaling  # (h, rows, Dh)
        if every and self.k.shape[0] == H:
            k = self.k[:, lo:hi]
        elif len(heads) == 1:  # one head's keys: a view (copied per tile, a large share of one head's time)
            kh = int(self.key_heads(heads)[0])
            k = self.k[kh:kh + 1, lo:hi]
        else:
            k = self.k[self.key_heads(heads), lo:hi]
        k = k.float()  # (h, band, Dh)
        scores = soft_capped(torch.matmul(q, k.transpose(-2, -1), out=out), self.softcap)  # (h, rows, band)
        if self.bias is not None:
            scores += self._per_head(self.bias, heads)[:, j - p + (Tk - 1)]  # by offset j − i (i = p − Tk + Tq)
        hidden = hidden_keys(p, j, self.causal, self.window)  # (rows, band) or None
        if self.mask is not None:
            m = self._per_head(self.mask, heads)[:, start:stop, lo:hi]  # (h, rows, band)
            if m.dtype == torch.bool:
                hidden = ~m if hidden is None else hidden | ~m
            else:
                scores += m.float()
        if hidden is not None:
            scores.masked_fill_(hidden, float("-inf"))
        return scores

    def key_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """The key (and value) head each query head of ``heads`` reads: H/Hkv query heads share one."""
        return heads // (self.shape[0] // self.k.shape[0])

    def normaliser(self, heads, start: int, stop: int) -> torch.Tensor:
        """(2, h, rows): each row's largest score m and log Σ exp(scores − m) over its visible keys, for query rows
        ``start:stop`` of the heads in ``heads`` (a list): a row's weights are exp((scores − m) − that). Kept apart,
        not summed to a logsumexp, so a weight near 1 keeps float32's precision (scores − m is exact near the top;
        the log is at most log Tk)."""
        s = self.scores(heads, start, stop, *self._band(start, stop))  # (h, rows, band), ours
        m = s.amax(-1, keepdim=True)  # (h, rows, 1)
        m.masked_fill_(~torch.isfinite(m), 0.0)  # a row that sees no key: log 0 = −inf below, not NaN
        return torch.stack([m[..., 0], s.sub_(m).exp_().sum(-1).log_()])  # in place: half of torch.logsumexp's time

    def column(self, heads, key: int, norm: torch.Tensor) -> torch.Tensor:
        """(h, Tq): the weight every query gives key ``key``, for the heads in ``heads``, from ``normaliser`` rows
        ``norm`` (2, h, Tq): one key's scores instead of every row's."""
        Tq = self.shape[1]
        s = self.scores(heads, 0, Tq, key, key + 1)[..., 0]  # (h, Tq)
        return torch.exp((s - norm[0]) - norm[1]).nan_to_num_(0.0)  # a row that sees no key: −inf − (−inf), 0

    @staticmethod
    def _per_head(t: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        return t if t.shape[0] == 1 else t[heads]

    def output(self, v: torch.Tensor, rows: int | None = None, visit=None, tile=None,
               chunk: int | None = None) -> torch.Tensor:
        """The attention output for values ``v`` (Hkv, Tk, Dv) with these weights, ``rows`` query rows at a time:
        (H, Tq, Dv). ``visit(w, start)`` sees the weights w (H, ≤ chunk, Tk) of every ``chunk`` rows of a tile (the
        whole tile when None) as they are made; ``tile(n)``, when given, is the (H, n, Tk) tensor a tile of n rows
        is written into."""
        H, Tq, Tk = self.shape
        dtype = v.dtype
        # Values are shared as the keys are: grouped-query values copied out per query head, others read as they
        # come (an index copy of every head is fresh memory every layer).
        if v.shape[0] != H:
            v = v[torch.arange(H) // (H // v.shape[0])]
        v = v.float()  # (H, Tk, Dv)
        # Each query's heads side by side in memory, as every caller lays them out next (builtin and Hugging Face
        # models alike): their transpose is then a view, not a copy.
        out = torch.empty(Tq, H, v.shape[-1]).transpose(0, 1)  # (H, Tq, Dv)
        rows = min(rows or rows_per_tile(H, Tk), Tq)
        heads = list(range(H))
        # Made once, not per tile: under the app's 64 KiB mmap threshold (attnviz.ui.collect) each fresh 256 KB
        # of a tile's scaled queries or product was memory faulted in page by page.
        scaled = self.q.float() * self.scaling  # (H, Tq, Dh)
        product = torch.empty(H, rows, v.shape[-1])  # (H, rows, Dv)
        for a in range(0, Tq, rows):
            b = min(a + rows, Tq)
            w = self.weights(heads, a, b, None if tile is None else tile(b - a), scaled, visit, chunk)  # (H, rows, Tk)
            # A product into a contiguous buffer and its copy are faster than one written straight into this strided
            # slice (out=).
            out[:, a:b] = torch.bmm(w, v, out=product[:, :b - a])  # (H, rows, Dv)
        return out.to(dtype)


class PaddedQK:
    """One layer's LayerQKs of a right-padded batch of self-attention (one per text, cut to its own n_b tokens)
    as batch tensors, so that any rows of every text's scores come from one product. ``fast`` is False when the
    texts' recipes differ in more than length, causality and window (a dense mask or bias, another scaling or
    soft-cap): then read each text's own LayerQK (``layers``)."""

    def __init__(self, layers: list[LayerQK], T: int):
        first = layers[0]
        H, Dh = first.shape[0], first.q.shape[-1]
        self.layers, self.T, self.softcap = layers, T, first.softcap
        self.fast = all(x.mask is None and x.bias is None and x.scaling == first.scaling and x.softcap == first.softcap
                        for x in layers)
        if not self.fast:
            return
        self.q = torch.zeros(len(layers), H, T, Dh)  # (B, H, T, Dh); padding rows stay 0
        self.k = torch.zeros(len(layers), H, T, Dh)  # (B, H, T, Dh)
        for b, x in enumerate(layers):
            n = x.shape[1]
            self.q[b, :, :n] = x.q.float() * first.scaling
            self.k[b, :, :n] = x.k[x.key_heads(torch.arange(H))].float()  # grouped-query keys repeated
        self.n = torch.tensor([x.shape[1] for x in layers])[:, None, None]  # (B, 1, 1)
        self.causal = torch.tensor([x.causal for x in layers])[:, None, None]  # (B, 1, 1)
        far = [x.window if x.window is not None else T + 1 for x in layers]
        self.window = torch.tensor(far)[:, None, None]  # (B, 1, 1)

    def scores(self, start: int, stop: int) -> torch.Tensor:
        """(B, H, rows, T) float32: every text's logits of query rows ``start:stop`` over the batch's T keys,
        soft-capped, with HIDDEN added where ``hidden_keys`` hides a key (its recipe's, and every key past the
        text's end). Rows past a text's end are filler."""
        scores = soft_capped(self.q[:, :, start:stop] @ self.k.transpose(-2, -1), self.softcap)  # (B, H, rows, T)
        i = torch.arange(start, stop)[:, None]  # (rows, 1) query positions (self-attention: Tq = Tk)
        j = torch.arange(self.T)[None, :]  # (1, T)
        hidden = hidden_keys(i, j, self.causal, self.window, self.n)  # (B, rows, T)
        if bool(hidden.any()):
            scores += torch.zeros(hidden.shape).masked_fill_(hidden, HIDDEN)[:, None]  # (B, 1, rows, T)
        return scores


def causal_mask(Tq: int, Tk: int | None = None, device=None) -> torch.Tensor:
    """(Tq, Tk) boolean mask: query i, at key position i + Tk − Tq, may attend to keys up to it."""
    Tk = Tq if Tk is None else Tk
    return torch.arange(Tk, device=device)[None, :] <= torch.arange(Tq, device=device)[:, None] + (Tk - Tq)


def frozen(a, dtype=None) -> np.ndarray:
    """A read-only array of ``dtype``. One that already is read-only is adopted without a copy: whoever
    made it read-only gave it up (the backends do, to spare a copy); any other is copied, so the caller's
    later writes never reach the trace."""
    if isinstance(a, np.ndarray) and not a.flags.writeable and (dtype is None or a.dtype == dtype):
        return a
    a = np.array(a, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


ROW_TOLERANCE = 1e-3  # float32 rows of up to a few thousand weights sum to 1 within this (a coarser dtype: its eps)


def given_weights(layers, what: str, max_mb: float, raise_with: str) -> np.ndarray:
    """(L, H, Tq, Tk) float32, read-only, from L same-shaped (H, Tq, Tk) layers given from outside (numpy arrays,
    or torch tensors of any device and dtype): the one check of weights attnviz did not compute.

    Their size as float32 is counted from the shapes before anything is copied (a stride-0 tensor declares
    terabytes in a few bytes); then each layer must be real and finite, non-negative, its rows summing to 1
    within ROW_TOLERANCE (or the input dtype's resolution, if coarser: bfloat16) or to 0 where fully masked.
    A ValueError names what is wrong and where; ``raise_with`` says what to do about a size over ``max_mb``.
    """
    if not len(layers):
        raise ValueError(f"{what} holds no layers")
    L, (H, Tq, Tk) = len(layers), tuple(layers[0].shape)
    mb = L * H * Tq * Tk * 4 / 2**20  # Python ints: no overflow, nothing allocated
    if mb > max_mb:
        raise ValueError(f"{what} would take {mb:,.0f} MB as float32 ({L}×{H} heads of {Tq:,}×{Tk:,} tokens), over "
                         f"the {max_mb:,.0f} MB limit: {raise_with}")
    out = np.empty((L, H, Tq, Tk), np.float32)
    for layer, a in enumerate(layers):
        tensor = isinstance(a, torch.Tensor)
        a = a if tensor else np.asarray(a)
        if not (a.dtype.is_floating_point if tensor else a.dtype.kind == "f"):
            raise ValueError(f"{what} must be real floating-point weights, not {a.dtype}")
        eps = float((torch.finfo if tensor else np.finfo)(a.dtype).eps)
        out[layer] = a.detach().to("cpu", torch.float32).numpy() if tensor else a  # one layer converted at a time
        _check_layer(out[layer], what, layer, max(ROW_TOLERANCE, eps))
    out.setflags(write=False)
    return out


def _check_layer(a: np.ndarray, what: str, layer: int, tolerance: float) -> None:
    """A ValueError at the first bad weight of one (H, Tq, Tk) layer, by head and query."""
    def where(bad: np.ndarray) -> str:
        head, query = np.argwhere(bad)[0][:2]
        return f" (first in layer {layer}, head {head}, query {query})"

    if not np.isfinite(a).all():
        raise ValueError(f"{what} holds NaN or infinite values" + where(~np.isfinite(a)))
    if (a < 0).any():
        raise ValueError(f"{what} holds negative weights" + where(a < 0))
    sums = a.sum(-1, dtype=np.float64)  # (H, Tq)
    off = ~(np.isclose(sums, 1, atol=tolerance, rtol=0) | (sums == 0))
    if off.any():
        head, query = np.argwhere(off)[0]
        raise ValueError(f"rows of {what} must sum to 1 within {tolerance:.3g} (0 where fully masked); layer {layer}, "
                         f"head {head}, query {query} sums to {sums[head, query]:.6g}")


def rows_per_tile(n_heads: int, n_keys: int, block: int = 1, smaller: int = 1, larger: int = 1) -> int:
    """The query rows one tile of ``n_heads`` heads over ``n_keys`` keys holds: as many as fit TILE_FLOATS
    (``smaller`` times fewer, for a tile that many passes read; ``larger`` times more, for a forward's survey),
    whole blocks of ``block`` rows, at least one block. The one rule for every tile."""
    return max(block, TILE_FLOATS * larger // smaller // (n_heads * n_keys) // block * block)


def tensor_view(a) -> torch.Tensor:
    """``a`` (an array) as a tensor sharing its memory, a read-only array included: for reading only."""
    a = np.ascontiguousarray(a)
    if a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():  # torch warns that writes would reach the array: none are made
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)


def block_size(n: int, blocks: int) -> int:
    """Positions per block when ``n`` positions are cut into at most ``blocks`` blocks: ceil(n / blocks), every block
    that long but the last, which may be shorter. The one block-boundary rule: ``Weights.pooled``, the long-text
    survey's grids, the overview tiles and the notebook all cut blocks so (``block_reduce``, ``pool``)."""
    return max(1, -(-n // blocks))


def pool(a: np.ndarray, size: int, axis: int, how: str = "max") -> np.ndarray:
    """``a`` (an array) shrunk to at most ``size`` along ``axis`` by the block ``how`` ("max", "min" or "sum") of
    blocks of ``block_size`` positions; ``a`` itself where it already fits."""
    b = block_size(a.shape[axis], size)
    return a if b == 1 else block_reduce(tensor_view(a), b, axis, how).numpy()


def block_reduce(x: torch.Tensor, b: int, dim: int, how: str | None = None, out: torch.Tensor | None = None):
    """Max and sum of ``x`` over consecutive blocks of ``b`` positions along ``dim`` (the last may be shorter); only
    the max, min or sum when ``how`` is "max", "min" or "sum". The one pooling function: ``Weights.pooled``, the
    long-text survey and the figures' mosaics all reduce through it, with blocks of ``block_size``. ``out`` (one
    ``how``): the tensor the result is written into and returned, so a loop over tiles allocates nothing."""
    dim = dim % x.ndim
    if out is not None:
        return _block_reduce_into(x, int(b), dim, how, out)
    shape = list(x.shape)
    shape[dim] = -(-shape[dim] // b)  # (…, blocks, …)
    outs = [_block_reduce_into(x, int(b), dim, name, x.new_empty(shape)) for name in ([how] if how else ["max", "sum"])]
    return outs[0] if how is not None else tuple(outs)


def _block_reduce_into(x: torch.Tensor, b: int, dim: int, how: str, out: torch.Tensor) -> torch.Tensor:
    """``block_reduce(x, b, dim, how)`` written into ``out``: the full blocks (a view, (…, full, b, …)), then a
    shorter last one. A max over blocks of the last, contiguous axis is max_pool1d's (a shorter last block is its
    ceil_mode window): ``amax`` over the view's inner axis of b is several times slower, and these row blocks are
    a large share of a long forward's survey."""
    n = x.shape[dim]
    if how == "max" and b > 1 and dim == x.ndim - 1 and x.stride(dim) == 1 and x.is_floating_point():
        pooled = F.max_pool1d(x.reshape(-1, 1, n), b, ceil_mode=True)  # (…, 1, blocks)
        return out.copy_(pooled.view(out.shape))
    op = {"max": torch.amax, "min": torch.amin, "sum": torch.sum}[how]
    full = n // b
    if full:
        op(x.narrow(dim, 0, full * b).unflatten(dim, (full, b)), dim + 1, out=out.narrow(dim, 0, full))
    if n > full * b:
        op(x.narrow(dim, full * b, n - full * b), dim, keepdim=True, out=out.narrow(dim, full, 1))
    return out


def block_counts(n: int, b: int) -> torch.Tensor:
    """(ceil(n / b),) float32: the positions in each block of ``block_reduce`` (the last may hold fewer)."""
    return block_reduce(torch.ones(n), b, 0, "sum")


class Weights:
    """One stack's attention weights, (L, H, Tq, Tk) float32: ``tile`` gives any rows of any heads exactly."""

    shape: tuple[int, int, int, int]

    def tile(self, layer: int, heads: list, start: int, stop: int) -> np.ndarray:
        """(len(heads), stop − start, Tk) float32."""
        raise NotImplementedError

    def tile_into(self, out: np.ndarray, layer: int, heads: list, start: int, stop: int) -> None:
        """``tile`` written into ``out`` (len(heads), stop − start, Tk)."""
        out[...] = self.tile(layer, heads, start, stop)

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    def rows_per_tile(self, n_heads: int = 1) -> int:
        return rows_per_tile(n_heads, self.shape[3])

    def spans(self, n_heads: int = 1) -> list[tuple[int, int]]:
        """(start, stop) of every run of query rows that one tile of ``n_heads`` heads holds, in order."""
        Tq, step = self.shape[2], self.rows_per_tile(n_heads)
        return [(a, min(a + step, Tq)) for a in range(0, Tq, step)]

    def heads(self, head: int | None) -> list[int]:
        """The heads a view of ``head`` reads: that one, or every head of the layer (their mean) when None."""
        return list(range(self.shape[1])) if head is None else [head]

    def head(self, layer: int, head: int | None) -> np.ndarray:
        """(Tq, Tk): one head, or the mean of the layer's heads when ``head`` is None."""
        _, _, Tq, Tk = self.shape
        heads = self.heads(head)
        out = np.empty((Tq, Tk), np.float32)
        for a, b in self.spans(len(heads)):
            if head is not None:
                self.tile_into(out[None, a:b], layer, heads, a, b)  # straight into the result
            else:
                out[a:b] = self.tile(layer, heads, a, b).mean(0)
        return out

    def layer(self, layer: int) -> np.ndarray:
        """(H, Tq, Tk): every head of one layer (an L-th of ``dense``), tile by tile."""
        _, H, Tq, Tk = self.shape
        out = np.empty((H, Tq, Tk), np.float32)
        for a, b in self.spans(H):
            self.tile_into(out[:, a:b], layer, list(range(H)), a, b)
        return out

    def received(self, layer: int, head: int | None) -> np.ndarray:
        """(Tk,): the weight each key receives, summed over the queries (float64)."""
        heads = self.heads(head)
        total = np.zeros(self.shape[3])
        for a, b in self.spans(len(heads)):
            total += self.tile(layer, heads, a, b).mean(0).sum(0, dtype=np.float64)
        return total

    def column(self, layer: int, head: int | None, key: int) -> np.ndarray:
        """(Tq,): the weight each query gives key ``key`` (its column; the layer's mean when ``head`` is None)."""
        heads = self.heads(head)
        out = np.empty(self.shape[2], np.float32)
        for a, b in self.spans(len(heads)):
            out[a:b] = self.tile(layer, heads, a, b)[:, :, key].mean(0)
        return out

    def pooled(self, size: int, reduce: str = "max") -> np.ndarray:
        """(L, H, s_q, s_k): every head pooled to at most size × size blocks of ``block_size`` positions, by block
        max or mean; tile by tile, whole row blocks per tile."""
        return np.stack([self._pool(layer, self.heads(None), size, reduce, False) for layer in range(self.shape[0])])

    def pooled_head(self, layer: int, head: int | None, size: int, reduce: str = "max") -> np.ndarray:
        """(s_q, s_k): one head pooled as ``pooled`` pools it; ``head`` None: the block max or mean of the layer's
        mean over heads (not the mean of each head's block max)."""
        return self._pool(layer, self.heads(head), size, reduce, head is None)[0]

    def _pool(self, layer: int, heads: list, size: int, reduce: str, mean: bool) -> np.ndarray:
        """(h, s_q, s_k) the ``heads`` of ``layer`` pooled, or (1, s_q, s_k) their mean's when ``mean``."""
        if reduce not in ("max", "mean"):
            raise ValueError(f"reduce must be 'max' or 'mean', not {reduce!r}")
        if size < 1:
            raise ValueError(f"the pooled size must be at least 1, not {size}")
        _, _, Tq, Tk = self.shape
        bq, bk = block_size(Tq, size), block_size(Tk, size)
        out = torch.empty(1 if mean else len(heads), -(-Tq // bq), -(-Tk // bk))
        step = rows_per_tile(len(heads), Tk, bq)  # whole row blocks per tile
        how = "max" if reduce == "max" else "sum"
        with torch.inference_mode():
            for a in range(0, Tq, step):
                w = self._tensor(layer, heads, a, min(a + step, Tq))  # (h, rows, Tk)
                if mean:
                    w = w.mean(0, keepdim=True)  # (1, rows, Tk)
                w = block_reduce(block_reduce(w, bq, 1, how), bk, 2, how)  # (h, rows / bq, s_k), rows first
                out[:, a // bq: a // bq + w.shape[1]] = w
            if reduce == "mean":
                out /= block_counts(Tq, bq)[:, None] * block_counts(Tk, bk)[None, :]
        return out.numpy()

    def _tensor(self, layer: int, heads: list, start: int, stop: int) -> torch.Tensor:
        """``tile`` as a torch tensor."""
        return torch.from_numpy(np.array(self.tile(layer, heads, start, stop)))

    def dense(self) -> np.ndarray:
        """(L, H, Tq, Tk), every weight, read-only; a ValueError naming ``head`` past ATTNVIZ_MAX_DENSE_MB."""
        L, H, Tq, Tk = self.shape
        mb, limit = L * H * Tq * Tk * 4 / 2**20, settings.max_dense_mb()
        if mb > limit:
            raise ValueError(
                f"All {L}×{H} heads of {Tq:,}×{Tk:,} tokens would take {mb:,.0f} MB, over the {limit:,.0f} MB "
                "limit (ATTNVIZ_MAX_DENSE_MB): read heads one at a time with trace.head(layer, head), or "
                "trace.pooled(size) for an overview."
            )
        out = np.empty(self.shape, np.float32)
        for layer in range(L):
            out[layer] = self.layer(layer)  # one layer at a time: at most an L-th more than the result
        out.setflags(write=False)
        return out


class DenseWeights(Weights):
    """Weights held as one read-only (L, H, Tq, Tk) array: an eager model's own, or a file's."""

    def __init__(self, array):
        self.array = frozen(array, np.float32)  # (L, H, Tq, Tk)
        self.shape = self.array.shape

    def tile(self, layer, heads, start, stop):
        return self.array[layer, heads, start:stop]

    def head(self, layer, head):
        return self.array[layer].mean(0) if head is None else self.array[layer, head]

    def layer(self, layer):
        return self.array[layer]

    def dense(self):
        return self.array

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    def __reduce__(self):
        return DenseWeights, (self.array,)


class OnDemandWeights(Weights):
    """Weights computed when asked from each layer's captured queries and keys (a list of LayerQK)."""

    def __init__(self, layers: list[LayerQK]):
        if not layers:
            raise ValueError("on-demand weights need at least one layer")
        shapes = {layer.shape for layer in layers}
        if len(shapes) != 1:
            raise ValueError(f"every layer must have the same heads and positions, got {sorted(shapes)}")
        self.layers = tuple(layers)
        self.shape = (len(layers), *shapes.pop())
        self._dense, self._lock = None, threading.Lock()
        self._norms: dict[tuple[int, int], torch.Tensor] = {}  # (layer, head) -> (2, Tq) its rows' normalisers

    def column(self, layer, head, key):
        """One key's scores per query against each row's normaliser, which a head's first column computes once
        (one pass over its scores): a token's column costs a pass over the head (every head of the layer for
        their mean) once, then next to nothing."""
        heads = self.heads(head)
        with torch.inference_mode():
            with self._lock:
                new = [h for h in heads if (layer, h) not in self._norms]
                if new:
                    made = torch.cat([self.layers[layer].normaliser(new, a, b) for a, b in self.spans(len(new))], 2)
                    self._norms.update({(layer, h): made[:, i].clone() for i, h in enumerate(new)})  # (2, Tq) each
                norm = torch.stack([self._norms[layer, h] for h in heads], 1)  # (2, h, Tq)
            return self.layers[layer].column(heads, key, norm).mean(0).numpy()

    def tile(self, layer, heads, start, stop):
        with torch.inference_mode():
            return self.layers[layer].weights(heads, start, stop).numpy()

    def _tensor(self, layer, heads, start, stop):
        return self.layers[layer].weights(heads, start, stop)

    def tile_into(self, out, layer, heads, start, stop):
        with torch.inference_mode():
            self.layers[layer].weights(heads, start, stop, out=torch.from_numpy(out))

    def dense(self):
        """Every weight, computed once and kept (pages of a short text read them all)."""
        with self._lock:
            if self._dense is None:
                self._dense = super().dense()
            return self._dense

    @property
    def nbytes(self) -> int:
        held = sum(t.nbytes for t in self._norms.values()) + (0 if self._dense is None else self._dense.nbytes)
        return sum(layer.nbytes for layer in self.layers) + held

    def __reduce__(self):
        return OnDemandWeights, (list(self.layers),)
