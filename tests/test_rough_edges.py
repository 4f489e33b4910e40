"""Issue 57's rough edges of the explorer, in AppTest: icons that need no emoji font, messages where the user looks
(a refused paste, an unreadable upload, a bad model entry), the Corpus table's headers, head patching's warning."""

import ast
from pathlib import Path

from helpers import ROOT, ok, open_page


def test_every_alert_icon_is_a_material_icon_that_needs_no_emoji_font():
    found = []
    for path in [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "attnviz").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "icon" and isinstance(node.value, ast.Constant):
                if not str(node.value.value).startswith(":material/"):
                    found.append(f"{path.relative_to(ROOT)}:{node.value.lineno} {node.value.value!r}")
    assert not found, found


def test_a_link_note_carries_a_material_icon():
    at = ok(open_page("app.py", layer="99"))
    assert [w.icon for w in at.warning] == [":material/link:"], [(w.value, w.icon) for w in at.warning]
