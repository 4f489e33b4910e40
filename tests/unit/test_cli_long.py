"""``attnviz plot`` on a long text writes what the pages draw, within their budgets (a 6,464-token essay once gave a
238 MB page): at 8,192 tokens the head at block resolution, an exact window and every head pooled, a few MB in all
with plotly.js inlined. And the exports are reachable from ``import attnviz`` alone."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import attnviz
from attnviz.data import CORPUS
from conftest import ROOT
from helpers import decode

N = 8192
MB = 2**20


def plotted(page: str) -> list[list]:
    """The data of every Plotly.newPlot call in a page, in order."""
    out, at = [], 0
    while (at := page.find("Plotly.newPlot(", at)) >= 0:
        start = page.index("[", at)
        out.append(json.JSONDecoder().raw_decode(page[start:])[0])
        at = start
    return out


def test_plot_of_8192_tokens_stays_within_a_few_mb(tmp_path):
    text = CORPUS.read_text(encoding="utf-8")
    (tmp_path / "essay.txt").write_text(text * (1 + 60_000 // len(text)), encoding="utf-8")
    page = tmp_path / "head.html"
    cli = [sys.executable, "-m", "attnviz", "plot", "--model", "builtin:seed", "--file", str(tmp_path / "essay.txt"),
           "--layer", "2", "--head", "3", "--out", str(page)]
    with ThreadPoolExecutor(1) as pool:  # the command and the reference trace, side by side
        done = pool.submit(subprocess.run, cli, cwd=ROOT, capture_output=True, text=True, timeout=1500)
        t = attnviz.load("builtin:seed").trace((tmp_path / "essay.txt").read_text(encoding="utf-8"))
        run = done.result()
    assert run.returncode == 0, run.stderr
    assert t.n_tokens >= N  # the library's limit is 32,768: the whole essay is traced
    size = page.stat().st_size
    assert size <= 6 * MB, size  # plotly.js is ~4.8 MB of it
    blocks, window, mosaic = plotted(page.read_text(encoding="utf-8"))
    head = t.head(2, 3)  # (T, T) exact
    b = -(-t.n_tokens // 256)  # tokens a block: at most 256 blocks a side
    edges = np.arange(0, t.n_tokens, b)
    np.testing.assert_allclose(decode(blocks[0]["z"]), np.maximum.reduceat(np.maximum.reduceat(head, edges, 0), edges, 1),
                               atol=1e-6)
    np.testing.assert_allclose(decode(window[0]["z"]), head[:256, :256], atol=1e-6)
    assert mosaic[0]["type"] == "image"  # every head in one PNG
    shown = page.read_text(encoding="utf-8").replace("\\u00a0", " ").replace("\u00a0", " ")  # a count and its unit
    assert f"{t.n_tokens:,} tokens" in shown  # stay on one line of a wrapped title (a no-break space)


def test_the_exports_are_reachable_from_import_attnviz(tmp_path):
    code = ("import attnviz, sys\n"
            "t = attnviz.trace('The cat sat on the mat.')\n"
            "data = attnviz.export.to_npz(t)\n"
            "back = attnviz.export.from_npz(data)\n"
            "print(back.tokens == t.tokens, len(attnviz.export.matrix_csv(t.head(0, 0), t.tokens, t.tokens)) > 0)")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # this checkout, installed or not
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True"]
