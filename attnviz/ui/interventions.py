"""The Interventions page's widgets: build edits from the head and cell picked, keep them in the link, run them.

The edits live in one text box bound to the URL (``edits=ko:1.0,pat:0.1:previous``, ``attnviz.analysis.interventions.spell``),
so a copied link reproduces them; each part the model cannot take is left out with a note, as a bad layer or head
in a link is. One run (the text as it is and edited) is two forwards, kept for this session only.
"""

from __future__ import annotations

from functools import partial

import streamlit as st

from attnviz.analysis.interventions import Knockout, Pattern, ZeroValue, parse, run, spell
from attnviz.ui.escape import code, plain
from attnviz.ui.links import note

EDITS_KEY = "edits"
ACTIONS = {
    "knock out": "the query no longer sees the key; its row is renormalised over what it still sees",
    "uniform": "the head attends evenly to every key each query may see",
    "previous": "the head attends only to the key before each query",
    "first": "the head attends only to the first key",
    "zero value": "the key's value is zeroed for every other query (value zeroing, Mohebbi et al. 2023)",
}
EVERY = "every"
CLICKABLE_MAX_TOKENS = 64  # a clickable heatmap sends a point per cell: 4,096 of them here, ~100 kB


def edit_from(action: str, layer: int, head: int, query, key):
    """The edit the controls describe (``query``/``key``: an index or EVERY)."""
    q, k = (None if v == EVERY else int(v) for v in (query, key))
    if action == "knock out":
        return Knockout(layer, head, query=q, key=k)
    if action == "zero value":
        return ZeroValue(0 if k is None else k, layer, head)
    return Pattern(layer, head, action)


def _pick_cell(chart_key: str, n_keys: int) -> None:
    """A clicked heatmap cell (``figures.interventions.clickable_cells``) becomes the next knock-out's query and key."""
    points = st.session_state[chart_key].selection.points
    if points and "point_index" in points[0]:
        query, key = divmod(int(points[0]["point_index"]), n_keys)
        st.session_state.update(edit_query=query, edit_key=key, edit_action="knock out")


def cell_chart(fig, key: str, n_keys: int, where=st) -> None:
    """Draw a head's heatmap with clickable cells; a click picks its query and key."""
    where.plotly_chart(fig, key=key, on_select=partial(_pick_cell, key, n_keys), selection_mode="points")


def _add(edit) -> None:
    spelled = spell([edit])
    current = [p for p in (st.session_state.get(EDITS_KEY) or "").split(",") if p.strip()]
    if spelled not in current:
        st.session_state[EDITS_KEY] = ",".join([*current, spelled])


def _clear() -> None:
    st.session_state[EDITS_KEY] = ""


def controls(layer: int, head: int, n_tokens: int, labels) -> None:
    """The action, query and key pickers for the picked head, and the buttons that add or clear edits."""
    c1, c2, c3 = st.columns([2, 1, 1])
    action = c1.radio("Edit", list(ACTIONS), key="edit_action", horizontal=True, help="\n\n".join(
        f"**{a}**: {d}" for a, d in ACTIONS.items()))
    positions = [EVERY, *range(n_tokens)]
    show = lambda v: "every" if v == EVERY else f"{v}: {labels[v]}"  # noqa: E731
    query = c2.selectbox("Query", positions, key="edit_query", format_func=show, disabled=action != "knock out")
    key = c3.selectbox("Key", positions, key="edit_key", format_func=show,
                       disabled=action not in ("knock out", "zero value"))
    if action == "zero value" and key == EVERY:
        st.caption("Zeroing a value needs one key: pick it.")
    edit = edit_from(action, layer, head, query, key)
    b1, b2 = st.columns(2)
    b1.button(f"Add: {spell([edit])}", key="edit_add", on_click=_add, args=(edit,),
              disabled=action == "zero value" and key == EVERY)
    b2.button("Clear all edits", key="edit_clear", on_click=_clear)


def edits(n_layers: int, n_heads: int, n_tokens: int) -> list:
    """The edits in the box (and the link), each part the model cannot take left out with a note."""
    text = st.text_input("Edits (kept in the link)", key=EDITS_KEY, bind="query-params",
                         placeholder="ko:1.0, ko:1.1:q5:k3, pat:0.1:previous, zv:3:1.0",
                         help="ko:layer.head[:q<query>][:k<key>] knocks out, pat:layer.head:uniform|previous|first "
                              "replaces a pattern, zv:token[:layer.head] zeroes a value; comma-separated.")
    found, problems = parse(text, n_layers, n_heads, n_tokens)
    for part, why in problems:
        note(f"Edit {code(part[:60])} is left out: {plain(why)}")
    return found


def effect(model_key: str, backend, text: str, found: list, chat: bool = False):
    """``run(backend, text, found)`` (``chat``: in the model's chat template), kept for this session while the model,
    text and edits stay the same."""
    what = (model_key, text, spell(found), chat)
    kept = st.session_state.get("intervention_effect")
    if kept is None or kept[0] != what:
        with st.spinner("Running the text as it is and edited…"):
            kept = st.session_state["intervention_effect"] = (what, run(backend, text, found, chat=chat))
    return kept[1]
