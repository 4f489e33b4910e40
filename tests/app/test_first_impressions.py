"""What a newcomer meets first (issue 33), outside the browser: the word search, samples each model can read, the
unknown-token warning, a head opened from another page, box zooms, the link notes, the library's repr and the CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from streamlit.proto.WidgetStates_pb2 import WidgetState

import attnviz
from attnviz import cli
from attnviz.analysis import long
from attnviz.analysis.roles import ROLES, probe_trace, role_scores, role_table, strongest
from attnviz.figures.roles import ROLE_COLOURS, role_grid
from attnviz.data.samples import BY_MODEL, GENERAL, STORIES, UNKNOWN, samples_for, unknown_share
from conftest import ROOT
from helpers import ok, open_page
from test_analysis_pages import charts, select

QUOKKA = "A quokka smiled at us. Later the quokka hopped away, and two quokkas followed."
LONG_QUOKKA = QUOKKA + " The river runs on." * 60  # ~330 tokens: the Attention page's long view


# ---- 2. Find a word: whole words, however the tokenizer cut them ----

def test_find_matches_a_word_cut_into_pieces():
    t = attnviz.trace(QUOKKA)
    pieces = [i for i, tok in enumerate(t.tokens) if tok == "quo"]
    assert len(pieces) == 3 and t.tokens[pieces[0] + 1] == "##kka"  # WordPiece cuts it: quo ##kka (##s)
    assert long.find(t.tokens, "Quokka ", t.word_ids) == pieces[:2]  # the two whole words, case-insensitive
    assert long.find(t.tokens, "quokkas", t.word_ids) == pieces[2:]
    assert long.find(t.tokens, "okk", t.word_ids) == pieces  # part of a word: every word that holds it
    assert long.find(t.tokens, "kangaroo", t.word_ids) == []


def test_the_attention_pages_long_view_finds_a_split_word():
    at = ok(open_page("pages/1_Attention.py", text=LONG_QUOKKA))
    at.text_input(key="find").set_value("quokka").run()
    positions = [i for i, tok in enumerate(attnviz.trace(LONG_QUOKKA).tokens) if tok == "quo"][:2]
    assert any(c.value.startswith(f"2 positions: {positions[0]}, {positions[1]}") for c in at.caption), \
        [c.value for c in at.caption]


# ---- 3. samples a model can read, the unknown-token warning, a model switch ----

@pytest.mark.parametrize("key", sorted(k for k in BY_MODEL if k.startswith("builtin:")))
def test_every_builtin_model_is_offered_samples_it_reads(key):
    model = attnviz.load(key)
    for name, text in samples_for(key).items():
        t = model.trace(text)
        stack = t.encoder if t.kind == "encoder-decoder" else t
        assert not UNKNOWN & set(stack.tokens), (key, name, stack.tokens)


def test_unknown_tokens_count_whatever_their_special_flag():
    t = attnviz.load("builtin:lm").trace(GENERAL["Coreference"])
    assert t.special[list(t.tokens).index("[UNK]")]  # builtin:lm marks its [UNK] special
    unknown, total = unknown_share(t.tokens, t.special)
    assert unknown == list(t.tokens).count("[UNK]") > total / 2 and total == len(t.tokens) - 1  # all but [BOS]


def test_builtin_lm_warns_about_unknown_words_and_offers_its_stories():
    at = ok(open_page("pages/8_Generate.py", model="builtin:lm", text=GENERAL["Coreference"]))
    t = attnviz.load("builtin:lm").trace(GENERAL["Coreference"])
    unknown = list(t.tokens).count("[UNK]")
    assert any(w.value.startswith(f"{unknown} of {t.n_tokens - 1} tokens are unknown") for w in at.warning)
    assert {b.label for b in at.button if b.key.startswith("unknown_sample_")} == set(STORIES)


def test_a_model_switch_trades_a_sample_for_the_new_models_own():
    at = ok(open_page("pages/8_Generate.py"))
    assert at.text_area(key="text").value == GENERAL["Coreference"]
    at.selectbox(key="model").set_value("builtin:lm").run()
    ok(at)
    assert at.text_area(key="text").value == next(iter(STORIES.values()))
    assert not at.warning  # every word known: no unknown-token note
    shown = " ".join(h.proto.body for h in at.get("html"))  # prompt ‖ continuation, token by token
    assert "‖" in shown and "[UNK]" not in shown
    at.text_area(key="text").set_value("my own words").run()  # a text the visitor typed stays
    at.selectbox(key="model").set_value("builtin:minilm").run()
    assert at.text_area(key="text").value == "my own words"


def test_generate_opens_on_a_story_for_builtin_lm():
    at = ok(open_page("pages/8_Generate.py", model="builtin:lm"))
    assert at.text_area(key="text").value == next(iter(STORIES.values()))


# ---- 4. a head opened from the Roles grid lands on that head, on the page and in the address ----

def test_a_head_clicked_on_roles_opens_on_the_attention_page_with_its_address():
    at = ok(open_page("pages/7_Roles.py", text=QUOKKA))
    at = select(at, "role_grid", {"x": 7, "y": 2, "point_index": 2 * 12 + 7, "curve_number": 1})
    ok(at)
    assert at.title[0].value == "Attention"
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (2, 7)
    assert (at.query_params["layer"], at.query_params["head"]) == ("2", "7")
    at.switch_page("pages/7_Roles.py").run()  # back, and a second head: it must not reopen the first
    at = select(ok(at), "role_grid", {"x": 3, "y": 4, "point_index": 4 * 12 + 3, "curve_number": 1})
    ok(at)
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (4, 3)
    assert (at.query_params["layer"], at.query_params["head"]) == ("4", "3")


# ---- 5, 6. the long view's window: a one-axis box, the size after a longer text ----

def words(n: int) -> str:
    rng = np.random.default_rng(3)
    return " ".join(rng.choice("the river stone cloud light paper window garden music water".split(), n))


def box(at, x, y):
    """Rerun ``at`` as the browser does after a box selection on the block map."""
    (chart,) = [c for c in at.get("plotly_chart") if c.proto.id.endswith("long_blocks")]
    state = at._tree.get_widget_states()
    selection = {"points": [], "point_indices": [], "box": [{"xref": "x", "yref": "y", "x": x, "y": y}], "lasso": []}
    state.widgets.append(WidgetState(id=chart.proto.id, string_value=json.dumps({"selection": selection})))
    return ok(at._run(state))


def test_a_box_of_a_few_pixels_zooms_where_it_was_dragged():
    text = words(400)
    at = ok(open_page("pages/1_Attention.py", model="builtin:seed", text=text))
    T = attnviz.load("builtin:seed").trace(text).n_tokens
    at = box(at, [0, T], [200.4, 231.7])  # plotly's band for a drag a few pixels wide: the whole of the other axis
    assert (at.number_input(key="zoom_start").value, at.number_input(key="zoom_size").value) == (200, 32)
    at = box(at, [120.2, 140.6], [0, T])
    assert (at.number_input(key="zoom_start").value, at.number_input(key="zoom_size").value) == (120, 21)
    at = box(at, [100.0, 150.0], [130.0, 170.0])  # a box on both axes: the window holds both its sides
    assert (at.number_input(key="zoom_start").value, at.number_input(key="zoom_size").value) == (100, 70)


def test_the_window_grows_to_64_tokens_with_a_longer_text(monkeypatch):
    from attnviz.figures import explorer

    monkeypatch.setattr(explorer, "CELLS", 0)  # a text under 64 tokens in the long view (else drawn cell by cell)
    at = ok(open_page("pages/1_Attention.py", model="builtin:seed", text="A short text."))
    short = at.number_input(key="zoom_size").value
    assert short == attnviz.load("builtin:seed").trace("A short text.").n_tokens < 64
    at.text_area(key="text").set_value(words(300)).run()
    assert ok(at).number_input(key="zoom_size").value == 64
    bar = charts(at)["long_window"]["data"][0]["colorbar"]  # under the plot, which keeps the chart's width
    assert bar["orientation"] == "h" and bar["title"]["text"] == "weight"
    at.number_input(key="zoom_size").set_value(40).run()  # a size the visitor chose stays
    at.text_area(key="text").set_value(words(500)).run()
    assert ok(at).number_input(key="zoom_size").value == 40


# ---- 7. the text box's limit ----

def test_the_text_box_says_what_a_long_paste_gets_and_where_to_upload():
    at = ok(open_page("pages/1_Attention.py"))
    notes = [m.value for m in at.sidebar.markdown]
    assert any("over 20,000 characters is refused whole" in n and "upload below" in n for n in notes), notes
    assert [u.proto.label for u in at.sidebar.get("file_uploader")] == ["…or upload a document (.txt, .md)"]


# ---- 8. Roles: a colour per role on every model, probe mode's strongest role ----

def test_a_role_keeps_its_colour_whichever_roles_a_model_has():
    rng = np.random.default_rng(0)
    every = {r: rng.random((2, 3)) for r in ROLES}
    without = {r: v for r, v in every.items() if r != "induction"}

    def colour_of(scores, role):
        names = [r for r in ROLES if r in scores]
        fig = role_grid(scores, {r: ROLES[r].label for r in names}, "t")
        scale = fig.data[0].colorscale
        band = names.index(role)
        legend = {t.name: t.marker.color for t in fig.data[2:]}
        assert legend[ROLES[role].label] == scale[2 * band][1]
        return scale[2 * band][1]

    for role in without:
        assert colour_of(every, role) == colour_of(without, role) == ROLE_COLOURS[role]
    assert len(set(ROLE_COLOURS.values())) == len(ROLES) and set(ROLE_COLOURS) == set(ROLES)


def test_probe_mode_ranks_the_table_by_the_probe():
    at = ok(open_page("pages/7_Roles.py", text=QUOKKA, roles_on="the standard probe"))
    minilm = attnviz.load("builtin:minilm")
    probe = role_scores(probe_trace(minilm))
    best, names = strongest(probe)
    table = at.dataframe[0].value
    assert table["strongest role (probe)"].tolist() == [ROLES[names[i]].label for i in best.ravel()]
    text = role_scores(minilm.trace(QUOKKA, max_tokens=512))
    assert table.reset_index(drop=True).equals(role_table(text, probe, by_probe=True))


# ---- 10. the home page's words for a narrow screen ----

def test_the_home_page_says_how_to_open_a_collapsed_sidebar():
    at = ok(open_page("app.py"))
    assert "arrow at the top left opens it" in at.markdown[0].value + at.markdown[1].value


# ---- 11. a page's own link values ----

@pytest.mark.parametrize("page, params, notes", [
    ("pages/8_Generate.py", dict(model="builtin:lm", text=STORIES["Two friends"], gen_new="99999", gen_temp="-5"),
     ["New tokens: 99999 in the link is not a whole number from 1 to 256; showing 20.",
      "Temperature (0: greedy): -5 in the link is not a number from 0 to 10; showing 0."]),
    ("pages/1_Attention.py", dict(text=LONG_QUOKKA, zoom_start="999999", token="abc"),
     ["Window from token: 999999 in the link is not a whole number from 0 to {last}; showing 0.",
      "Token position: abc in the link is not a whole number from 0 to {last}; showing 1."]),
])
def test_a_pages_own_bad_link_values_get_a_note(page, params, notes):
    at = ok(open_page(page, **params))
    last = attnviz.trace(LONG_QUOKKA).n_tokens - 1
    assert [w.value for w in at.warning] == [n.format(last=last) for n in notes]
    at.run()  # the visitor's next run: the notes are gone
    assert not at.warning


def test_the_fallback_note_ends_in_one_full_stop():
    at = open_page("pages/1_Attention.py", model="no-such-model")
    (note,) = [w.value for w in at.warning]
    assert "'.." not in note and "' `. Showing builtin:minilm." in note, note


# ---- 12. the library and the command line ----

def test_a_traces_repr_fits_on_one_screen():
    t = attnviz.trace(" ".join(["word"] * 400))
    text = repr(t)
    assert len(text) < 1000, len(text)
    for part in ("builtin:minilm", "6 layers × 12 heads × 402×402", "402 tokens", "capture='interface'",
                 "hidden states 7×402×384", "MB held"):
        assert part in text, (part, text)
    pair = attnviz.trace("Friday, the 5th of March 2021", model="builtin:translator")
    text = repr(pair)
    assert len(text) < 1000 and text.startswith("Seq2SeqTrace(") and "cross:" in text, text


def test_the_command_names_itself_as_it_was_run(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/attnviz"])
    assert cli.parser().format_usage().startswith("usage: attnviz ")
    out = subprocess.run([sys.executable, "-m", "attnviz", "generate", "--help"], capture_output=True, text=True,
                         cwd=ROOT).stdout
    assert out.startswith("usage: python -m attnviz generate") and "builtin:lm" in out


def test_the_readme_corpus_example_runs_outside_the_repository(tmp_path):
    env_path = {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "attnviz", "corpus", "--input", "demo", "--limit", "3",
                           "--out", str(tmp_path / "s.csv")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, **env_path}, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "3 texts" in done.stderr and (tmp_path / "s.csv").exists()
    assert "--input demo" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_a_train_page_model_gone_after_a_reload_says_so():
    at = open_page("pages/8_Generate.py", model="session:lm")
    (note,) = [w.value for w in at.warning]
    assert "session:lm was trained on the Train page in an earlier session" in note and "Train it again" in note
    assert at.selectbox(key="model").value == "builtin:minilm"
