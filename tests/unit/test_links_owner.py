"""Link state has one owner: attnviz/ui/links.py alone writes the values the shared widgets carry from page to page
(``shared_values``) and alone lists the keys a link carries (``LINK_KEYS``). A second writer or a second list
drifts: a key added to one list and not the other was carried by links but lost on a page switch.

Read from the source with ``ast`` (as tests/unit/test_layers.py reads imports), over the library, the pages and app.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

from attnviz.ui.links import LINK_KEYS

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "attnviz" / "ui" / "links.py"
SOURCES = sorted([*(ROOT / "attnviz").rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py"])


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def shared_values_uses(path: Path) -> list[int]:
    """Lines of ``path`` that name the session-state key "shared_values" (reading it or writing it)."""
    return sorted({n.lineno for n in ast.walk(ast.parse(path.read_text(), str(path)))
                   if isinstance(n, ast.Constant) and n.value == "shared_values"})


def link_key_lists(path: Path) -> list[int]:
    """Lines of ``path`` with a tuple, list or set literal of strings that holds three or more of the link's keys."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            if len(set(_strings(node)) & set(LINK_KEYS)) >= 3:
                found.append(node.lineno)
    return found


def test_shared_values_are_read_and_written_in_links_only():
    others = {str(p.relative_to(ROOT)): lines for p in SOURCES if p != OWNER and (lines := shared_values_uses(p))}
    assert others == {}, f"shared_values outside attnviz/ui/links.py (call links.remember/carry_over): {others}"
    assert shared_values_uses(OWNER), "links.py no longer keeps the shared values: update this test"


def test_one_list_of_link_keys():
    lists = {str(p.relative_to(ROOT)): lines for p in SOURCES if (lines := link_key_lists(p))}
    assert list(lists) == ["attnviz/ui/links.py"] and len(lists["attnviz/ui/links.py"]) == 1, \
        f"the keys a link carries are listed more than once (use links.LINK_KEYS): {lists}"
    assert {"model", "text", "layer", "head", "chat"} == set(LINK_KEYS)


def test_the_checks_catch_a_second_owner(tmp_path):
    """The checks above find what they look for: a stray writer and a stray list, written the ways the old code did."""
    stray = tmp_path / "stray.py"
    stray.write_text('import streamlit as st\nSHARED = ("model", "text", "layer", "head")\n\n'
                     'def keep(layer, head):\n'
                     '    st.session_state.setdefault("shared_values", {}).update(layer=layer, head=head)\n')
    assert shared_values_uses(stray) == [5]
    assert link_key_lists(stray) == [2]
