"""Pieces every figure shares: safe labels and the probability colour scale."""

from __future__ import annotations

import html

PROB_SCALE = "Blues"  # attention weights: 0 white, 1 dark, fixed range 0–1


def safe(labels) -> list[str]:
    """Escape user text for plotly, which renders <a>, <b>, <br> in labels as markup."""
    return [html.escape(str(s), quote=False) for s in labels]


WRAP_TITLE = 38  # characters: a longer title breaks at its " · " parts, so a phone-wide chart shows it whole


def title_above_ticks(text: str) -> dict:
    """A layout title that pushes the plot down below itself and the top axis's tick labels (however long,
    however rotated), so no text lands on other text; a long title breaks into lines at " · "."""
    if len(text) > WRAP_TITLE:
        text = text.replace(" · ", "<br>")
    return dict(text=text, automargin=True, yref="paper", y=1, yanchor="bottom", x=0, xanchor="left",
                pad=dict(b=8))
