"""The attention explorer's model: what the app's Attention page (short and long texts) and the notebook explorer show
of one stack of a trace, as plain numbers, defined once for both: its sizes and labels, whether it is long, the
explorer's constants, a head's name, its pooled blocks and their causal mask, an exact window, a token's row or column.
Drawing stays where each is drawn (pages/, ui/long.py, ui/notebook.py); this reads weights only through the trace."""

from __future__ import annotations

import numpy as np

from ..analysis.long import Survey, window as exact_window
from ..core.tokens import labels
from ..core.weights import block_counts, block_size, hidden_keys, pool

CELLS = 256  # tokens a side that a heatmap draws cell by cell: a 256 × 256 float32 head is ~0.35 MB of figure
# (exact on hover), so a page of two or three stays under 2 MB. Past it a stack is long: the Attention page
# (ui/long.py), the notebook and the CLI pool it into blocks, and the other pages draw a window
DETAIL = 256  # blocks a side of a long head at block resolution
WINDOW_MAX = 256  # tokens a side of a long text's exact window: 65,536 cells, ~0.35 MB of float32
OVERVIEW_PIXELS = 100_000  # the mosaic's pixel budget: ≲ 0.35 MB of PNG (noise-like maps) for any number of heads
GRIDS = ("detail", "overview")  # a long stack's blocks: DETAIL a side, and whole groups of them for the mosaic


def overview_size(n_layers: int, n_heads: int, most: int = 64) -> int:
    """Pixels (overview blocks) per side of each head's tile so that every head fits the mosaic's budget."""
    return int(max(8, min(most, np.sqrt(OVERVIEW_PIXELS / (n_layers * n_heads)))))


def is_long(n_queries: int, n_keys: int | None = None) -> bool:
    """Whether a stack of ``n_queries`` × ``n_keys`` (self-attention: as many) is drawn as pooled blocks and a window
    (more than CELLS × CELLS cells), not cell by cell: the one threshold of the app and the notebook."""
    return n_queries * (n_queries if n_keys is None else n_keys) > CELLS * CELLS


def head_name(layer: int, head: int | None, n_heads: int) -> str:
    """A head's name on every page and in the notebook; ``head`` None: the layer's mean."""
    return f"layer {layer}, mean of {n_heads} heads" if head is None else f"layer {layer}, head {head}"


class Explorer:
    """One stack of a trace as the explorer shows it. ``survey``: the long page's, read during the forward (its pooled
    grids and kept columns spare a pass over the weights); without one, pooled blocks come from ``trace.pooled``."""

    def __init__(self, trace, stack: str | None = None, survey: Survey | None = None):
        s = trace.stack(None if stack == "self" else stack)
        self.trace, self.name, self.survey = trace, s.name, survey
        self.side = None if s.name == "self" else s.name
        self.weights = s.weights
        self.L, self.H, self.Tq, self.Tk = s.weights.shape
        self.causal = s.causal
        self.q_tokens, self.k_tokens = s.queries.tokens, s.keys.tokens
        self.q_labels, self.k_labels = labels(self.q_tokens), labels(self.k_tokens)
        self.long = is_long(self.Tq, self.Tk)
        self._pooled = {}  # reduce -> (L, H, s_q, s_k) on the detail grid, from the weights

    def head_name(self, layer: int, head: int | None) -> str:
        return head_name(layer, head, self.H)

    def block(self, grid: str = "detail") -> tuple[int, int]:
        """(query, key) tokens per block on ``grid`` (the last block of each axis may be shorter); an overview block
        is a whole group of detail blocks, as the survey's are."""
        bq, bk = block_size(self.Tq, DETAIL), block_size(self.Tk, DETAIL)
        if grid == "overview":
            small = overview_size(self.L, self.H)
            bq, bk = bq * block_size(-(-self.Tq // bq), small), bk * block_size(-(-self.Tk // bk), small)
        return bq, bk

    def starts(self, grid: str = "detail") -> np.ndarray:
        """(s_q,) the first query position of each block on ``grid`` (the key axis's are the same for self-attention)."""
        return np.arange(0, self.Tq, self.block(grid)[0])

    def pooled(self, grid: str = "detail", reduce: str = "max") -> np.ndarray:
        """(L, H, s_q, s_k) every head's block max or mean on ``grid``."""
        if self.survey is not None:
            return self.survey.pooled(grid, reduce)
        if reduce not in self._pooled:
            self._pooled[reduce] = self.trace.pooled(DETAIL, self.side, reduce)
        detail = self._pooled[reduce]
        if grid == "detail":
            return detail
        small = overview_size(self.L, self.H)
        if reduce == "max":
            return pool(pool(detail, small, 2), small, 3)
        # A block's mean is its sum over its positions: weigh each detail block by its own (the last may be shorter).
        (bq, bk), (gq, gk) = self.block("detail"), self.block("overview")
        counts = (block_counts(self.Tq, bq)[:, None] * block_counts(self.Tk, bk)[None, :]).numpy()  # (s_q, s_k)
        sums = pool(pool(detail * counts, small, 2, "sum"), small, 3, "sum")
        return sums / (block_counts(self.Tq, gq)[:, None] * block_counts(self.Tk, gk)[None, :]).numpy()

    def block_map(self, layer: int, head: int | None, reduce: str = "max") -> np.ndarray:
        """(s_q, s_k) one head on the detail grid; ``head`` None: the blocks of the layer's mean over heads."""
        if head is not None:
            return self.pooled("detail", reduce)[layer, head]
        if reduce == "mean":  # a block's mean of the heads' mean is the mean of their block means
            return self.pooled("detail", reduce)[layer].mean(0)
        if self.survey is not None:
            return self.survey.layer_max[layer]
        return self.weights.pooled_head(layer, None, DETAIL, "max")

    def block_mask(self, grid: str = "detail") -> np.ndarray | None:
        """(s_q, s_k) bool: blocks a causal model cannot see at all (its first key after the block's last query);
        None when nothing is hidden."""
        if not self.causal:
            return None
        bq, bk = self.block(grid)
        last = np.minimum(np.arange(0, self.Tq, bq) + bq, self.Tq) - 1 + (self.Tk - self.Tq)  # (s_q,) positions
        return hidden_keys(last[:, None], np.arange(0, self.Tk, bk)[None, :], True, None)

    def mask(self, q0: int, q1: int, k0: int, k1: int) -> np.ndarray | None:
        """(q1 − q0, k1 − k0) bool, True where a causal model cannot look; None when nothing is hidden."""
        if not self.causal:
            return None
        p = np.arange(q0, q1)[:, None] + (self.Tk - self.Tq)  # the queries' positions among the keys
        return hidden_keys(p, np.arange(k0, k1)[None, :], True, None)

    def head(self, layer: int, head: int | None) -> np.ndarray:
        """(Tq, Tk) the whole head, exact (what a short stack draws)."""
        return self.trace.head(layer, head, self.side)

    def window(self, layer: int, head: int | None, start: int, stop: int) -> np.ndarray:
        """Exact weights of queries and keys ``start:stop``, each clipped to its axis."""
        return exact_window(self.weights, layer, head, start, stop)

    def line(self, layer: int, head: int | None, index: int, direction: str) -> np.ndarray:
        """What token ``index`` attends to (its row, ``"to"``, (Tk,)) or what attends to it (its column, ``"from"``,
        (Tq,)); a column the survey kept is read from it."""
        if direction == "to":
            return self.trace.row(layer, head, index, self.side)
        if direction != "from":
            raise ValueError(f"direction must be 'to' or 'from', not {direction!r}")
        kept = None if self.survey is None else self.survey.columns.get(index)  # (L, H, Tq)
        if kept is None:
            return self.trace.column(layer, head, index, self.side)
        return kept[layer, self.weights.heads(head)].mean(0)
