"""Long-text analyses, tile by tile: one pass over every head gives pooled maps, what each key receives, how
weight falls off with distance and the columns of the keys a view opens on (a survey: read after a forward, or
during it with ``trace_with_survey``, where each weight is computed once for the attention output and the survey alike); a
token's column; a window's exact weights.

Nothing here holds more than one tile of weights (``Weights.rows_per_tile``; a forward's survey: ``survey_tile``) at
once, so a 16,384-token text costs one pass over its heads, never L·H·T² floats. Shapes use the legend in
``attnviz/__init__.py``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from ..backends.common import chat_kw
from ..core.tokens import clean, word_spans
from ..capture.record import reducing
from ..core.weights import Weights, block_counts, block_reduce, block_size, rows_per_tile

# A forward's survey tiles hold this many TILE_FLOATS: fewer, larger products, since with a browser or another
# process on the same cores each two-thread operation waits for its slower thread (on a quiet machine the sizes
# cost the same: bench/long_page.py).
SURVEY_TILES = 4
# Its weights are made and surveyed a chunk of 1/CHUNKS TILE_FLOATS at a time: the softmax writes a chunk and the
# survey's reductions read it again while it is still in the CPU's cache, where a whole tile's passes each went back
# to memory.
CHUNKS = 2
SINK_SHARE = 0.3  # a head that puts at least this share of its weight on the first token is flagged a sink


def distance_edges(n: int) -> np.ndarray:
    """Log bins of query–key distance |i − j|: [0, 1), [1, 2), [2, 4), [4, 8), … up to n."""
    edges = [0, 1]
    while edges[-1] < n:
        edges.append(edges[-1] * 2)
    return np.array(edges, np.int64)


def distance_labels(edges: np.ndarray) -> list[str]:
    """'0', '1', '2–3', '4–7', … for the bins of ``distance_edges``."""
    return [f"{a}" if b - a == 1 else f"{a:,}–{b - 1:,}" for a, b in zip(edges[:-1], edges[1:])]


def survey_tile(H: int, T: int, b: int, tiles: int = SURVEY_TILES) -> tuple[int, int, int]:
    """(rows, chunk, bytes): the query rows of a survey tile of ``tiles`` TILE_FLOATS over ``T`` keys with row blocks
    of ``b`` (at most T), the rows of each chunk of it the survey reads at once, and the bytes that tile and the
    buffers a chunk's reductions are written into hold: the one rule for the survey (``Reducer.layer``) and for a
    job's memory (``attnviz.ui.long``)."""
    rows = min(T, rows_per_tile(H, T, b, larger=tiles))
    chunk = min(rows, rows_per_tile(H, T, b, smaller=CHUNKS))
    c = _corner_rows(chunk, T)
    floats = H * rows * T + H * chunk * T * ((2 / b if b > 1 else 0) + 1 / H)  # the tile; a chunk's row blocks'
    # max and sum, and its heads' sum
    floats += H * (c + 1) * (4 * c - 1) + H * (T + 1) + 2 * H * (c + T)  # corners, band, diagonals (float64)
    return rows, chunk, int(4 * floats)


def _corner_rows(rows: int, T: int) -> int:
    """Query rows per diagonal walk of a chunk: its corners (H, c + 1, 4c − 1) stay within half the chunk."""
    return max(1, min(rows, T // 8))


class _Arena:
    """The memory a survey's tiles and their reductions are written into, made once per survey and reused by
    every layer and tile. The app holds glibc's mmap threshold at 64 KiB (``attnviz.ui.collect``), so every fresh
    tensor above that is memory the kernel faults in page by page, and fresh results per tile (or even per layer)
    spent much of a long forward in system time. Each name holds one flat tensor, grown to
    the largest shape asked for; a smaller shape (a shorter last tile) is a view of its first part, so the survey
    never holds more than its largest tile's buffers (what ``survey_tile`` counts)."""

    def __init__(self):
        self._flat: dict[str, torch.Tensor] = {}
        self._shape: dict[str, tuple] = {}
        self._made: dict[type, tuple] = {}  # a buffers kind -> (its arguments, its buffers) last made

    def take(self, name: str, shape: tuple, fill: float | None = None, dtype=torch.float32) -> torch.Tensor:
        """A contiguous ``shape`` tensor of ``name``'s memory; ``fill`` fills it when its shape changes (callers
        leave the filled parts as they are, so a fill lasts while tiles of one size come)."""
        n = int(np.prod(shape))
        flat = self._flat.get(name)
        if flat is None or flat.numel() < n or flat.dtype != dtype:
            flat = self._flat[name] = torch.empty(n, dtype=dtype)
            self._shape[name] = None
        view = flat[:n].view(shape)
        if fill is not None and self._shape[name] != shape:
            view.fill_(fill)
        self._shape[name] = shape
        return view

    def buffers(self, kind: type, *args):
        """``kind(*args, self)``, the views one step of the survey writes into, made again only when ``args`` change:
        chunk after chunk of one shape reuses them (their filled parts still filled: no other kind takes their
        names), where making them every chunk meant thousands of calls a forward."""
        made = self._made.get(kind)
        if made is None or made[0] != args:
            made = self._made[kind] = (args, kind(*args, self))
        return made[1]

    def clear(self) -> None:
        self._flat.clear()
        self._shape.clear()
        self._made.clear()


class _Scratch:
    """What the survey's reductions of one chunk (H, rows, T) are written into, from the survey's arena."""

    def __init__(self, H: int, rows: int, T: int, b: int, arena: _Arena):
        nr = -(-rows // b)  # row blocks of a chunk
        if b > 1:  # blocks of one row are the tile itself
            self.rmax, self.rsum = arena.take("rmax", (H, nr, T)), arena.take("rsum", (H, nr, T))
        self.block_ones = arena.take("block_ones", (H, 1, nr), fill=1.0)
        self.heads, self.heads_max = arena.take("heads", (rows, T)), arena.take("heads_max", (nr, T))


class _Walk:
    """The buffers of ``_diagonal_sums`` over ``c`` query rows of T keys, from the survey's arena."""

    def __init__(self, H: int, c: int, T: int, arena: _Arena):
        self.ones = arena.take("walk_ones", (H, 1, c), fill=1.0)
        self.band = arena.take("band", (H, 1, T - c + 1))
        # Both corners side by side, each after c zero columns (see _diagonal_sums), and a zero row.
        self.corners = arena.take("corners", (H, c + 1, 4 * c - 1), fill=0.0)
        self.corner_sums = arena.take("corner_sums", (H, 1, 4 * c - 1))
        self.diagonals = arena.take("diagonals", (H, c + T), fill=0.0, dtype=torch.float64)


def _diagonal_sums(w: torch.Tensor, s: _Walk) -> torch.Tensor:
    """(h, rows + Tk) float64, in ``s.diagonals``: the weight of ``w`` (h, rows, Tk; each row Tk contiguous keys)
    at each key offset j − i, summed over the rows; entry m is offset m − rows (−rows … Tk − 1; the first is 0).

    Offsets 0 … Tk − rows lie in every row: a strided view of the tile itself (a row step of Tk + 1 elements)
    walks each of them down a column, one pass and no copy, summed by a product with ones (twice as fast as
    ``sum`` over that view). Each row's few keys outside that band (j < i on the left, j > i + Tk − rows on the
    right) lie in the tile's corners (rows × rows and rows × (rows − 1)), copied side by side into a buffer
    whose rows are one element longer than a row's step: [:, :, 0:r] zero, the left corner at r:2r, zero at
    2r:3r, the right corner at 3r:4r − 1, and a zero row. Walking that buffer the same way, diagonal m < r holds
    the left corner's offset m − r alone, diagonal 3r + c the right corner's offset c (past the band) alone; a
    walk that runs off a row's end continues in the next row's first r columns, zeros.
    """
    h, rows, Tk = w.shape
    assert w.stride(1) == Tk and w.stride(2) == 1, w.stride()
    n = Tk - rows + 1  # ≥ 1: a tile's rows are at most its keys
    out = s.diagonals  # (h, rows + Tk) float64
    band = w.as_strided((h, rows, n), (w.stride(0), Tk + 1, 1))  # [i, d] = w[i, i + d]
    out[:, rows:rows + n] = torch.bmm(s.ones, band, out=s.band)[:, 0]  # each column's sum
    if rows > 1:
        c = s.corners  # (h, rows + 1, 4 rows − 1)
        c[:, :rows, rows:2 * rows] = w[:, :, :rows]
        c[:, :rows, 3 * rows:] = w[:, :, n:]
        walk = c.as_strided((h, rows, 4 * rows - 1), (c.stride(0), 4 * rows, 1))  # [i, m] = c[i, i + m]
        sums = torch.bmm(s.ones, walk, out=s.corner_sums)[:, 0]  # (h, 4 rows − 1)
        out[:, :rows] = sums[:, :rows]  # offsets −rows … −1 (keys j < i); the first is 0
        out[:, rows + n:] = sums[:, 3 * rows:]  # offsets Tk − rows + 1 … Tk − 1
    return out  # float32 sums over at most a tile's rows, accumulated by the caller in float64


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
    columns: dict  # key position -> (L, H, Tq) the weight every query gives it, for the keys the survey kept

    def pooled(self, grid: str, reduce: str) -> np.ndarray:
        """(L, H, s, s) block max or mean on the "overview" or "detail" grid."""
        return {"max": self.pooled_max, "mean": self.pooled_mean}[reduce][grid]

    def block(self, grid: str) -> int:
        """Tokens per block on the "overview" or "detail" grid (the last block may be shorter)."""
        s = self.starts[grid]
        return int(s[1] - s[0]) if len(s) > 1 else int(self.received.shape[2])


class _Layer:
    """One layer's running reductions (tensors): filled tile by tile, whole row blocks at a time."""

    def __init__(self, H: int, T: int, b: int, arena: _Arena, keys: tuple = ()):
        nb = -(-T // b)
        self.H, self.T, self.b, self.arena, self.keys = H, T, b, arena, list(keys)
        self.pmax = torch.zeros(H, nb, nb)
        self.psum = torch.zeros(H, nb, nb)
        self.lmax = torch.zeros(nb, nb)
        self.received = torch.zeros(H, T)
        self.diagonals = torch.zeros(H, 2 * T + 1, dtype=torch.float64)  # entry T + d: weight at offset d = j − i
        self.columns = torch.zeros(len(keys), H, T)  # (keys, H, Tq): what every query gives each kept key
        self.rows = 0  # query rows seen so far

    def tile(self, rows: int) -> torch.Tensor:
        """(H, rows, T): the buffer for the next tile of ``rows`` query rows, the survey's own from tile to tile and
        layer to layer (a fresh 64 MB per layer is fresh memory to touch)."""
        return self.arena.take("tile", (self.H, rows, self.T))

    def add(self, w: torch.Tensor, start: int) -> None:
        """Fold in the weights ``w`` (H, rows, T) of query rows ``start:``; ``start`` begins a row block."""
        H, rows, T = w.shape
        b = self.b
        if start != self.rows or start % b:
            raise ValueError(f"tiles must come in order, whole row blocks at a time: got row {start} after {self.rows}")
        s = self.arena.buffers(_Scratch, H, rows, T, b)
        r0, r1 = start // b, -(-(start + rows) // b)  # the row blocks this tile covers, whole
        # Row blocks first: a reduction across rows runs along the contiguous keys and leaves b× fewer values
        # for the key blocks (max_pool2d and avg_pool2d over the tile took about 3× as long, one thread).
        rmax, rsum = (block_reduce(w, b, 1, "max", s.rmax), block_reduce(w, b, 1, "sum", s.rsum)) if b > 1 else (w, w)
        self.received[:, None].baddbmm_(s.block_ones, rsum)  # += the row blocks' sum: one product, (H, 1, T)
        block_reduce(rmax, b, 2, "max", self.pmax[:, r0:r1])  # (H, row blocks, nb)
        block_reduce(rsum, b, 2, "sum", self.psum[:, r0:r1])
        # The block max of the heads' mean: of their sum, then / H (x ↦ x / H rounds monotonically, so this is
        # the max of each mean as w.mean(0) would round it).
        heads = block_reduce(torch.sum(w, 0, out=s.heads), b, 0, "max", s.heads_max)  # (row blocks, T)
        block_reduce(heads, b, 1, "max", self.lmax[r0:r1]).div_(H)
        # The diagonals, c rows at a time (corners within half the chunk). Diagonal m of rows a:a + c is offset
        # m − c from its own row, m − c − start − a from the query's position.
        if w.stride(2) != 1 or w.stride(1) != T:  # a forward's chunks are rows of its tile: no copy
            w = w.contiguous()
        c = _corner_rows(rows, T)
        for a in range(0, rows, c):
            part = w[:, a:a + c]  # (H, ≤ c, T)
            k = part.shape[1]
            lo = T - k - start - a  # ≥ 0: the tile's rows end by T
            self.diagonals[:, lo:lo + k + T] += _diagonal_sums(part, self.arena.buffers(_Walk, H, k, T))
        if self.keys:
            self.columns[:, :, start:start + rows] = w[:, :, self.keys].permute(2, 0, 1)  # (keys, H, rows)
        self.rows += rows


class Reducer:
    """A survey built from weight tiles as they are computed, layer by layer: ``layer(H, T)`` starts the next
    layer and returns ``(rows, visit, tile, chunk)``: the layer's weights, in tiles of ``rows`` query rows best
    computed into ``tile(rows)``, go to ``visit(w, start)`` ``chunk`` rows at a time, in order (``LayerQK.output``
    does this, so a forward feeds it while it attends: ``capture.reducing``).
    ``progress(fraction)`` after each chunk, over ``n_layers`` when given. The columns of ``keys`` (key
    positions: those a view opens on) are kept whole as they pass: a token's column from the trace is a pass over
    every row of the layer's heads (0.3–0.45 s at 4,096 tokens for the mean of builtin:seed's 8 heads).

    ``kept``: the whole layers (``whole()``) of a reducer whose forward of the same text was stopped: the next
    forward's first calls are not read again (``layer`` returns None: they attend on their fast path), so a rerun
    pays for the layers that were not read, and the survey is the one an uninterrupted forward reads."""

    def __init__(self, detail: int = 256, n_layers: int | None = None,
                 progress: Callable[[float], None] | None = None, tiles: int = SURVEY_TILES, keys: tuple = (),
                 kept: list | tuple = ()):
        self.detail, self.n_layers, self.progress, self.tiles = detail, n_layers, progress, tiles
        self.keys = tuple(keys)
        self.layers: list[_Layer] = list(kept)
        self._kept, self._calls = len(self.layers), 0
        self._arena = _Arena()  # every layer's tiles and buffers, freed once the last layer is seen

    def whole(self) -> list:
        """The layers seen whole (a stopped forward's, to keep for its rerun: ``kept``); frees the tiles' memory."""
        self._arena.clear()
        return [x for x in self.layers if x.rows == x.T]

    def layer(self, H: int, T: int) -> tuple[int, Callable, Callable, int] | None:
        """Start the next layer: ``(rows, visit, tile, chunk)``, the arguments of ``LayerQK.output`` that feed it;
        None for a layer that ``kept`` holds already."""
        if self.layers and (self.layers[0].H, self.layers[0].T) != (H, T):
            raise ValueError(f"every layer of a survey must have the same heads and positions, got {H} heads × {T}")
        self._calls += 1
        if self._calls <= self._kept:
            return None
        b = block_size(T, self.detail)
        current = _Layer(H, T, b, self._arena, tuple(k for k in self.keys if k < T))
        self.layers.append(current)
        done = len(self.layers) - 1

        def visit(w, start):
            current.add(w, start)
            if current.rows == T and len(self.layers) == self.n_layers:
                self._arena.clear()
            if self.progress is not None and self.n_layers:
                self.progress(min(1.0, (done + (start + w.shape[1]) / T) / self.n_layers))

        rows, chunk, _ = survey_tile(H, T, b, self.tiles)  # whole row blocks per tile and chunk
        return rows, visit, current.tile, chunk

    def complete(self, shape: tuple) -> bool:
        """Whether every layer of weights of ``shape`` (L, H, T, T) has been seen whole."""
        L, H, Tq, Tk = shape
        return len(self.layers) == L and Tq == Tk and all((x.H, x.T, x.rows) == (H, Tk, Tq) for x in self.layers)

    def result(self, overview: int = 64) -> Survey:
        """The Survey, with ``overview`` blocks a side on the overview grid."""
        if not self.layers or any(x.rows != x.T for x in self.layers):
            raise ValueError("the survey has not seen every query row of every layer")
        self._arena.clear()
        T, b = self.layers[0].T, self.layers[0].b
        stack = lambda name: torch.stack([getattr(x, name) for x in self.layers])  # noqa: E731
        pmax, psum, lmax = stack("pmax"), stack("psum"), stack("lmax")  # (L, H, nb, nb), …, (L, nb, nb)
        d = np.abs(np.arange(-T, T + 1))  # the offset of each diagonal entry
        edges = distance_edges(T)
        bins = np.searchsorted(edges, d, side="right") - 1  # (2T + 1,) distance bin of each offset
        diagonals = stack("diagonals").numpy()  # (L, H, 2T + 1)
        distance = np.stack([diagonals[..., bins == k].sum(-1) for k in range(len(edges) - 1)], -1)  # (L, H, bins)
        starts = np.arange(0, T, b)
        g = block_size(len(starts), overview)  # detail blocks per overview block
        counts, small_counts = block_counts(T, b), block_counts(T, b * g)  # (nb,), (s,) tokens per block
        small_max = block_reduce(block_reduce(pmax, g, 2)[0], g, 3)[0]
        small_sum = block_reduce(block_reduce(psum, g, 2)[1], g, 3)[1]
        mean = lambda total, n: (total / (n[:, None] * n[None, :])).numpy()  # noqa: E731
        return Survey(
            {"detail": starts, "overview": starts[::g]},
            {"detail": pmax.numpy(), "overview": small_max.numpy()},
            {"detail": mean(psum, counts), "overview": mean(small_sum, small_counts)},
            lmax.numpy(), stack("received").numpy(),
            (distance / np.maximum(distance.sum(2, keepdims=True), 1e-30)).astype(np.float32), edges,
            {k: c.numpy() for k, c in zip(self.layers[0].keys, stack("columns").unbind(1))},  # (L, H, Tq) each
        )


def trace_with_survey(model, text: str, max_tokens: int | None = None, detail: int = 256,
           progress: Callable[[float], None] | None = None, tiles: int = SURVEY_TILES, keys: tuple = (),
           chat: bool = False, reducer: Reducer | None = None) -> tuple:
    """(trace, reducer): ``model``'s trace of ``text`` (``chat``: in its chat template) with a survey of every head
    read during the same forward (``capture.reducing``) in tiles of ``tiles`` TILE_FLOATS, keeping the columns of
    ``keys``; ``reducer.complete`` is False for a model whose forward did not hand its attention over (held eager):
    survey its weights instead. ``reducer``: the Reducer to feed instead of one made from those arguments (one
    with layers ``kept`` from a stopped forward of this text)."""
    with reducing(reducer or Reducer(detail, model.n_layers, progress, tiles, keys)) as reducer:
        return model.trace(text, max_tokens=max_tokens, **chat_kw(chat)), reducer


def survey(weights: Weights, overview: int = 64, detail: int = 256,
           progress: Callable[[float], None] | None = None, keys: tuple = ()) -> Survey:
    """One pass over every head of a self-attention stack: pooled maps at ``detail`` and ``overview`` blocks a
    side (max and mean), what each key receives, the distance profile and the columns of ``keys``.
    ``progress(fraction)`` after each chunk."""
    L, H, Tq, Tk = weights.shape
    if Tq != Tk:
        raise ValueError(f"a survey needs self-attention (as many queries as keys), got {Tq}×{Tk}")
    reducer = Reducer(detail, L, progress, keys=keys)
    heads = list(range(H))
    for layer in range(L):
        rows, visit, tile, chunk = reducer.layer(H, Tk)
        for a in range(0, Tq, rows):
            b = min(a + rows, Tq)
            w = tile(b - a)
            weights.tile_into(w.numpy(), layer, heads, a, b)  # straight into the reducer's buffer
            for c in range(0, b - a, chunk):
                visit(w[:, c:c + chunk], a + c)
    return reducer.result(overview)


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


def window(weights: Weights, layer: int, head: int | None, start: int, stop: int) -> np.ndarray:
    """(rows, keys): exact weights of queries ``start:stop`` over keys ``start:stop``, each clipped to its axis."""
    return weights.tile(layer, weights.heads(head), start, min(stop, weights.shape[2]))[:, :, start:stop].mean(0)


def top_keys(w: np.ndarray, k: int) -> np.ndarray:
    """The positions of the ``k`` largest weights of ``w`` (T,), largest first."""
    k = min(k, w.size)
    top = np.argpartition(-w, k - 1)[:k]
    return top[np.argsort(-w[top], kind="stable")]


def find(tokens, word: str, word_ids=None) -> list[int]:
    """First positions of the words (tokens grouped by ``word_ids``; None: each token a word) that read ``word``
    (case-insensitive), or contain it when none is equal: a word the tokenizer cut into pieces is found whole."""
    word = word.strip().lower()
    if not word:
        return []
    spans = word_spans(np.arange(len(tokens)) if word_ids is None else word_ids)
    words = ["".join(clean(t).lower() for t in tokens[a:b]) for a, b in spans]
    equal = [a for (a, _), w in zip(spans, words) if w == word]
    return equal or [a for (a, _), w in zip(spans, words) if word in w]


def context(tokens, position: int, width: int = 8) -> tuple[str, str, str]:
    """(before, the token, after): up to ``width`` cleaned tokens either side, as plain text."""
    text = lambda a, b: " ".join(clean(t) for t in tokens[max(0, a):max(0, b)])  # noqa: E731
    return text(position - width, position), clean(tokens[position]), text(position + 1, position + 1 + width)
