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


def test_an_unknown_model_in_a_link_leaves_the_address_as_a_bad_layer_does():
    at = ok(open_page("app.py", model="nonsense", layer="2"))
    assert "model" not in at.query_params and at.query_params["layer"] == "2"
    assert at.selectbox(key="model").value == "builtin:minilm"


def test_a_bad_model_entry_keeps_the_last_good_models_figures_under_its_message_and_a_way_back():
    at = ok(open_page("app.py", text="Owls hunt at night."))
    picker = at.selectbox(key="model")
    picker.options.append("hf:/no/such/folder")  # the browser sends a typed option as its string
    at = picker.set_value("hf:/no/such/folder").run()
    assert not at.exception
    assert [e.value for e in at.error] == ["There is no folder '/no/such/folder'."]
    assert at.caption[0].value == "Below: the last good model's figures (builtin:minilm)."
    assert any(c.value.startswith("**builtin:minilm** · encoder") for c in at.caption)  # its status line
    assert at.get("plotly_chart"), "the page went blank"
    at.selectbox(key="model").options.append("hf:/no/such/folder")  # AppTest forgets a typed option between runs
    at = ok(at.button(key="back_to_good_model").click().run())
    assert at.selectbox(key="model").value == "builtin:minilm" and at.get("plotly_chart")
    assert "back_to_good_model" not in [b.key for b in at.button] and not at.error


def test_a_bad_first_model_still_stops_with_its_message():
    at = open_page("app.py", run=False)
    at = at.run()
    picker = at.selectbox(key="model")
    picker.options.append("hf:/no/such/folder")
    at.session_state["last_good_model"] = "hf:/no/such/folder"  # no other model drew a page in this session
    at = picker.set_value("hf:/no/such/folder").run()
    assert [e.value for e in at.error] == ["There is no folder '/no/such/folder'."] and not at.get("plotly_chart")


def test_the_token_focus_follows_the_query_chosen_for_which_heads_link_two_tokens():
    at = ok(open_page("pages/1_Attention.py", text="The animal didn't cross the street because it was too tired."))
    query = at.selectbox(key="link_query")
    chosen = query.options[3]
    at.radio(key="direction").set_value("attended by")
    at = ok(query.set_value(chosen).run())
    assert at.selectbox(key="focus").value == chosen and at.radio(key="direction").value == "attends to"
