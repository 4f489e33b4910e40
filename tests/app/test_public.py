"""Public mode (real Streamlit, AppTest): visitors pick only offered models and learn nothing about the disk.

Before: ``hf:/etc/shadow`` said "is a file", ``hf:/root`` "has no config.json", ``hf:/nonexistent`` "There is
no folder" — a file-existence oracle that also showed the home path.
"""

import re
from pathlib import Path

import pytest

from attnviz.backends import list_models
from attnviz.ui import access
from helpers import open_page

ORACLE = ["hf:/etc/shadow", "hf:/root", "hf:/nonexistent", "/root", "hf:~/.ssh", "hf:/proc/self/environ"]
ENV = ("ATTNVIZ_PUBLIC", "SPACE_ID", "ATTNVIZ_MODELS")


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def public(clean_env):
    clean_env.setenv("ATTNVIZ_PUBLIC", "1")
    return clean_env


@pytest.mark.parametrize("env, on", [
    ({}, False),
    ({"ATTNVIZ_PUBLIC": "1"}, True),
    ({"ATTNVIZ_PUBLIC": "true"}, True),
    ({"SPACE_ID": "someone/attnviz"}, True),  # Hugging Face Spaces says so
    ({"SPACE_ID": "someone/attnviz", "ATTNVIZ_PUBLIC": "0"}, False),  # the operator's word wins
])
def test_public_mode_is_an_operator_setting_and_on_where_the_host_says(clean_env, env, on):
    for k, v in env.items():
        clean_env.setenv(k, v)
    assert access.public() is on


run = open_page


def messages(at) -> list[str]:
    return [e.value for kind in ("error", "warning") for e in getattr(at, kind)]


def test_public_mode_offers_only_the_built_in_models(public):
    at = run()
    assert not at.exception and not at.error
    picker = at.selectbox(key="model")
    assert picker.options == list_models() and not picker.proto.accept_new_options


def test_public_mode_from_secrets(clean_env):
    at = run(secrets={"attnviz": {"public": True}})
    assert not at.selectbox(key="model").proto.accept_new_options


def test_a_local_run_keeps_the_open_picker(clean_env):
    at = run()
    assert at.selectbox(key="model").proto.accept_new_options


@pytest.mark.parametrize("param, page", [("model", "app.py"), ("model", "pages/6_Compare.py"),
                                         ("model_b", "pages/6_Compare.py")])
def test_oracle_paths_give_identical_messages_in_public_mode(public, param, page):
    seen = {}
    for path in ORACLE:
        at = run(page, **{param: path})
        assert not at.exception
        seen[path] = messages(at)
        assert not any("/" in m.replace(f"({at.selectbox(key='model').value})", "") for m in seen[path]), seen[path]
    assert len({tuple(m) for m in seen.values()}) == 1, seen
    if param == "model":  # the link's model is refused with one note, the page runs on the default
        assert seen[ORACLE[0]] == ["The link's model is not offered here; showing builtin:minilm."]


def test_keys_past_the_picker_are_refused_identically_before_anything_is_opened(public):
    """What a forged widget value reaches: ``offered``, which every page calls before it opens a model."""
    from attnviz.ui.frame import offered

    seen = set()
    for path in ORACLE:
        with pytest.raises(ValueError) as refused:
            offered(path)
        seen.add(str(refused.value))
    assert seen == {"That model is not offered here; choose one of: " + ", ".join(list_models()) + "."}
    assert offered(" builtin:seed ".strip()).key == "builtin:seed"


def test_a_local_run_still_says_what_is_wrong(clean_env):
    """Off public mode the reasons stay: the person running it locally owns the disk."""
    at = run(model="hf:/nonexistent")
    assert any("There is no folder" in m for m in messages(at)), messages(at)


PAGES = ["app.py", *sorted(f"pages/{p.name}" for p in (Path(__file__).parents[2] / "pages").glob("*.py"))]
LOCATION = re.compile(r"ray|address|path|folder|directory|server|location|url|host|cluster", re.I)


def locations(at) -> list[str]:
    """Every typed field or offered choice that names a place: a Ray address, a server path, a folder, …"""
    found = [f"{w.key}: {w.label}" for kind in ("text_input", "text_area") for w in getattr(at, kind)
             if LOCATION.search(f"{w.key} {w.label}")]
    found += [f"{r.key}: {o}" for r in at.radio for o in r.options if LOCATION.search(o)]
    return found + [f"{s.key}: new options" for s in at.selectbox if s.proto.accept_new_options]


@pytest.mark.parametrize("mode", ["public", "models"])
def test_no_page_offers_a_location_in_a_locked_demo(clean_env, tmp_path, mode):
    """Public mode, or an operator's model list: no page asks where to connect or what to read, even with an
    operator's ATTNVIZ_CORPUS_DIR set; a local run shows the Corpus page's fields, so the check can see them."""
    clean_env.setenv("ATTNVIZ_CORPUS_DIR", str(tmp_path))
    clean_env.setenv("ATTNVIZ_CORPUS_WORK", str(tmp_path / "work"))
    clean_env.setenv(*(("ATTNVIZ_PUBLIC", "1") if mode == "public" else ("ATTNVIZ_MODELS", "builtin:minilm")))
    for page in PAGES:
        at = run(page)
        assert not at.exception, (page, at.exception)
        assert locations(at) == [], (page, locations(at))
        if page.endswith("Corpus.py"):
            at = at.radio(key="corpus_source").set_value("upload").run()
            assert locations(at) == [] and not at.exception, locations(at)

    clean_env.delenv("ATTNVIZ_PUBLIC", raising=False)
    clean_env.delenv("ATTNVIZ_MODELS", raising=False)
    at = run("pages/10_Corpus.py")
    assert locations(at) == ["corpus_ray: Ray address (optional)", "corpus_source: A file on the server",
                             "model: new options"]
