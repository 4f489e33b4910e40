"""``python -m attnviz`` run as a user runs it, from the repo root, compared with attnviz.trace in-process."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import attnviz
from attnviz.export import from_npz
from conftest import ROOT
from helpers import decode

TEXT = "The animal didn't cross the street because it was too tired."


def run(args, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnviz", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="module")
def runs(out):
    """Every command of this module, run at once (each pays for importing torch and loading a model)."""
    (out / "in.txt").write_text(TEXT, encoding="utf-8")
    commands = {
        "help": (["--help"], None),
        "models": (["models"], None),
        "trace": (["trace", "--model", "builtin:minilm", "--text", "-", "--out", str(out / "t.npz")], TEXT),
        "html": (["plot", "--file", str(out / "in.txt"), "--layer", "3", "--head", "7", "--out", str(out / "f.html"),
                  "--cdn"], None),
        "svg": (["plot", "--text", "Cats sleep.", "--layer", "1", "--head", "2", "--out", str(out / "f.svg")], None),
        "missing": (["trace", "--file", "no/such/file.txt", "--out", "x.npz"], None),
        "empty": (["trace", "--text", "-", "--out", "x.npz"], "  \n"),
        "gif": (["plot", "--text", "hi", "--out", "x.gif"], None),
    }
    with ThreadPoolExecutor(3) as pool:
        done = {name: pool.submit(run, *c) for name, c in commands.items()}
        return {name: f.result() for name, f in done.items()}


@pytest.fixture(scope="module")
def reference():
    return attnviz.trace(TEXT)


def test_help_and_models(runs):
    top, models = runs["help"], runs["models"]
    assert top.returncode == models.returncode == 0
    assert all(c in top.stdout for c in ("models", "trace", "plot"))
    assert models.stdout.split() == attnviz.list_models()


def test_trace_from_stdin_writes_npz_equal_to_the_library(runs, out, reference):
    assert runs["trace"].returncode == 0, runs["trace"].stderr
    with np.load(out / "t.npz", allow_pickle=False) as f:
        np.testing.assert_allclose(f["attentions"], reference.attentions, atol=1e-6)
        np.testing.assert_allclose(f["hidden_states"], reference.hidden_states, atol=1e-5)
        assert json.loads(str(f["meta"]))["tokens"] == list(reference.tokens)
    back = from_npz(out / "t.npz")
    assert back.text == TEXT and back.norms.keys() == reference.norms.keys()
    for k, v in reference.norms.items():
        np.testing.assert_allclose(back.norms[k], v, rtol=1e-5, atol=1e-5)


def _plotly_data(page: str) -> list:
    start = page.index("[", page.index("Plotly.newPlot("))
    return json.JSONDecoder().raw_decode(page[start:])[0]


def test_plot_from_file_writes_html_with_the_head(runs, out, reference):
    assert runs["html"].returncode == 0, runs["html"].stderr
    page = (out / "f.html").read_text(encoding="utf-8")
    assert "layer 3, head 7" in page
    assert "<title>builtin:minilm · layer 3, head 7</title>" in page  # a browser tab says what it shows
    np.testing.assert_allclose(decode(_plotly_data(page)[0]["z"]), reference.attentions[3, 7], atol=1e-6)


def test_plot_writes_svg_through_kaleido(runs, out):
    assert runs["svg"].returncode == 0, runs["svg"].stderr
    svg = (out / "f.svg").read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "layer 1, head 2" in svg and "sleep" in svg


@pytest.mark.parametrize("name, message", [
    ("missing", "cannot read 'no/such/file.txt': No such file"),
    ("empty", "The text is empty"),
    ("gif", "--out must end in .html"),
])
def test_bad_input_gets_one_clear_line_and_status_2(runs, name, message):
    r = runs[name]
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (ROOT / "x.npz").exists()


ENGLISH = " ".join(["The river passes the old mill at dawn, and the miller counts the sacks of grain."] * 3_800)


def test_the_library_counts_every_token_it_cuts_past_the_old_character_cap(monkeypatch):
    """300,000 characters, over the 100,000 once cut silently before tokenizing: truncated counts the whole text."""
    monkeypatch.setenv("ATTNVIZ_MAX_TOKENS", "512")
    assert len(ENGLISH) > 300_000
    backend = attnviz.load("builtin:seed")
    whole = len(backend.tokenizer(ENGLISH)["input_ids"])  # the tokenizer's own count, specials included
    t = attnviz.trace(ENGLISH, "builtin:seed")
    assert t.n_tokens == 512 and t.truncated == whole - 512 and whole > 60_000


def test_the_cli_reads_a_file_within_its_budget_and_says_what_it_cut(tmp_path):
    done = run(["trace", "--file", "/dev/zero", "--out", str(tmp_path / "z.npz")])
    assert done.returncode == 2 and done.stderr.strip().endswith("'/dev/zero' holds more than 16 MB, more text than "
                                                                   "any model here takes"), done.stderr
    (tmp_path / "essay.txt").write_text(ENGLISH, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "attnviz", "trace", "--model", "builtin:seed", "--file",
                           str(tmp_path / "essay.txt"), "--out", str(tmp_path / "e.npz")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**__import__("os").environ,
                                                                            "ATTNVIZ_MAX_TOKENS": "512"})
    assert done.returncode == 0, done.stderr
    cut = from_npz(tmp_path / "e.npz")
    assert cut.n_tokens == 512 and cut.truncated > 60_000 - 512
    assert f"the text has {cut.truncated:,} tokens more than builtin:seed takes here; they were cut" in done.stderr
