"""Pieces every figure shares: safe labels and the probability colour scale."""

from __future__ import annotations

import html

PROB_SCALE = "Blues"  # attention weights: 0 white, 1 dark, fixed range 0–1


def safe(labels) -> list[str]:
    """Escape user text for plotly, which renders <a>, <b>, <br> in labels as markup."""
    return [html.escape(str(s), quote=False) for s in labels]
