"""Two traces side by side: where their token sequences match, and the difference of their weights there."""

from __future__ import annotations

import difflib
from typing import NamedTuple

import numpy as np


class Difference(NamedTuple):
    diff: np.ndarray  # (M, M) weight of A minus weight of B at the matched positions
    index_a: np.ndarray  # (M,) positions in A
    index_b: np.ndarray  # (M,) the same tokens' positions in B


def match(tokens_a, tokens_b) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the tokens the two sequences share, in order (longest matching blocks, as in difflib)."""
    blocks = difflib.SequenceMatcher(None, list(tokens_a), list(tokens_b), autojunk=False).get_matching_blocks()
    a = [i for blk in blocks for i in range(blk.a, blk.a + blk.size)]
    b = [j for blk in blocks for j in range(blk.b, blk.b + blk.size)]
    return np.array(a, np.int64), np.array(b, np.int64)


def difference(attn_a: np.ndarray, attn_b: np.ndarray, tokens_a, tokens_b) -> Difference:
    """A − B for one head's (T, T) weights, over the query and key positions whose tokens match.

    The weights are the full-sequence ones read at those positions: rows need not sum to 1.
    """
    ia, ib = match(tokens_a, tokens_b)
    diff = np.asarray(attn_a, np.float64)[np.ix_(ia, ia)] - np.asarray(attn_b, np.float64)[np.ix_(ib, ib)]
    return Difference(diff, ia, ib)
