"""The clickable head grid: every chart with one point per head (layer-major, ``n_heads`` a row) opens
a head the same way, whichever page it is on and whichever page was opened first."""

from __future__ import annotations

from functools import partial

import streamlit as st

from attnviz.ui import links

ATTENTION_PAGE = "pages/1_Attention.py"
_PENDING = "open_head_page"  # session-state key: the page a click asked to open and its head, opened on the next run


def clicked_head(points: list, n_heads: int) -> tuple[int, int] | None:
    """(layer, head) of the first selected point, from its index in the layer-major grid."""
    if not points or not isinstance(points[0].get("point_index"), int):  # a heatmap cell's index is a pair
        return None
    layer, head = divmod(points[0]["point_index"], n_heads)
    return layer, head


def open_head(layer: int, head: int, page: str | None = None, at: dict | None = None) -> None:
    """Point the layer and head pickers at (layer, head), on this page and on the next one; with ``page``, open
    that page on the next run (call from a widget's callback: a chart's click, a button's "Open"), its address
    carrying ``at`` too (the long view's ``token`` and ``zoom_start``: a position to open at)."""
    st.session_state["layer"], st.session_state["head"] = layer, head
    # A page switch restores the pickers from the values kept for the next page (links.carry_over):
    # keep the clicked head there too, or the next page reopens whatever head was shown before.
    links.remember("layer", "head")
    if page is not None:
        st.session_state[_PENDING] = (page, layer, head, dict(at or {}))


def _on_select(chart_key: str, n_heads: int, page: str | None, text: str | None, at: dict | None) -> None:
    picked = clicked_head(st.session_state[chart_key].selection.points, n_heads)
    if picked is not None and text is not None:
        open_text(text, *picked, page=page, at=at)
    elif picked is not None:
        open_head(*picked, page=page, at=at)


def head_chart(fig, key: str, n_heads: int, page: str | None = ATTENTION_PAGE, where=st, text: str | None = None,
               at: dict | None = None) -> None:
    """Draw ``fig`` in ``where``; a click on a head's point opens it on ``page`` (None: on this page), on ``text``
    at ``at`` when given (``open_text``)."""
    where.plotly_chart(fig, key=key, on_select=partial(_on_select, key, n_heads, page, text, at),
                       selection_mode="points")


def open_text(text: str, layer: int, head: int, page: str = ATTENTION_PAGE, at: dict | None = None) -> None:
    """A button's callback: open ``text`` at (layer, head) on ``page`` (``at``: as ``open_head`` takes it)."""
    st.session_state["text"] = text
    links.remember("text")
    open_head(layer, head, page, at)


def follow_click() -> None:
    """Call before drawing a page: switches to the page a head click asked for, its layer and head in the address
    (a copied link reopens that head)."""
    pending = st.session_state.pop(_PENDING, None)
    if pending is not None:
        page, layer, head, at = pending
        params = {"layer": str(layer), "head": str(head), **{k: str(v) for k, v in at.items()}}
        st.switch_page(page, query_params=params)


def follow_query(query_key: str, focus_key: str, direction_key: str, direction: str) -> None:
    """A callback: the token focus follows the query just chosen in another picker (what it attends to)."""
    st.session_state[focus_key] = st.session_state[query_key]
    st.session_state[direction_key] = direction


def newly_clicked(chart_key: str) -> bool:
    """Whether the points selected on ``chart_key`` changed since this was last asked (a click, not a rerun)."""
    chart = st.session_state.get(chart_key)
    points = repr(chart.selection.points) if chart is not None and chart.selection.points else None
    seen = st.session_state.get(f"{chart_key}_seen")
    st.session_state[f"{chart_key}_seen"] = points
    return points is not None and points != seen


def scroll_into_view(key: str) -> None:
    """Bring the element keyed ``key`` to the top of the window: the head a click on a grid far below it opened
    there, ~2,000 px above where the user was looking. ``key`` is our own constant, never user text."""
    st.html(f"""<script>setTimeout(() => {{
      const el = window.parent.document.querySelector('.st-key-{key}') || document.querySelector('.st-key-{key}');
      if (el) {{ el.style.scrollMarginTop = "4.5rem"; el.scrollIntoView({{block: "start"}}); }}  // clear of the header
    }}, 300);</script>""", unsafe_allow_javascript=True)
