"""The explorer in a real JupyterLab, in Chromium: run the cell, click a head in the overview, see the detail change;
hover a cell of a byte-level BPE text's head and read its raw tokens beside the cleaned labels.

JupyterLab serves on loopback with a random token and is stopped by its PID. The screenshot of the explorer is saved
under tests/screenshots (attnviz/assets/notebook.png, in the docs' notebook page, is one of them).
"""

import os
import re
import secrets
import subprocess
import sys
import time
import urllib.request

import pytest

for name in ("anywidget", "jupyterlab", "nbformat"):
    pytest.importorskip(name, reason="pip install -r requirements-notebook.txt")

import attnviz  # noqa: E402
import nbformat  # noqa: E402
from playwright.sync_api import expect  # noqa: E402

from conftest import ROOT, SCREENSHOTS, free_port  # noqa: E402

CELL = """import attnviz
t = attnviz.trace("The animal didn't cross the street because it was too tired.")
attnviz.show(t, 2, 9)"""
KERNEL_IDLE = """(() => {
    const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === "idle";
})()"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``lab(name, cell) -> URL``: a notebook of one cell in JupyterLab, on a free loopback port with a random
    token, opened in a workspace of its own (the only notebook there, so the cells run are its)."""
    root = tmp_path_factory.mktemp("lab")
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
           "JUPYTER_CONFIG_DIR": str(root / ".config"), "JUPYTERLAB_WORKSPACES_DIR": str(root / ".workspaces")}
    log = open(root / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        + (["--allow-root"] if os.geteuid() == 0 else []),
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        assert proc.poll() is None, (root / "lab.log").read_text()[-3000:]
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            assert time.time() < deadline, "JupyterLab did not answer in time"
            time.sleep(0.5)

    def notebook(name: str, cell: str) -> str:
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, root / name)
        return f"{url}/lab/workspaces/{name.removesuffix('.ipynb')}/tree/{name}?token={token}"  # its own workspace

    yield notebook
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def run(page, url: str):
    """The notebook at ``url`` run in the page once its kernel is idle: (its explorer, the detail's title, drawn)."""
    page.goto(url)
    page.wait_for_function(KERNEL_IDLE, timeout=180_000, polling=250)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
    explorer = page.locator(".attnviz").first
    title = explorer.locator(".av-detail-title")
    title.wait_for(timeout=180_000)
    return explorer, title


def test_click_a_head_in_jupyterlab(lab, page):
    page.set_viewport_size({"width": 1400, "height": 1500})  # the whole explorer on screen, for its screenshot
    explorer, title = run(page, lab("explore.ipynb", CELL))
    assert title.inner_text() == "layer 2, head 9"
    canvas = explorer.locator(".av-detail canvas.av-heatmap")
    before = canvas.evaluate("c => c.toDataURL()")

    # Layer 4, head 7 of MiniLM's 6 × 12: the middle of its tile (tiles and their one-pixel gaps split the image evenly).
    box = explorer.locator(".av-mosaic").bounding_box()
    x = box["x"] + box["width"] * (7 + 0.5) / 12
    y = box["y"] + box["height"] * (4 + 0.5) / 6
    page.mouse.click(x, y)
    expect(title).to_have_text("layer 4, head 7", timeout=60_000)  # the detail is drawn anew: a locator, not a handle
    assert canvas.evaluate("c => c.toDataURL()") != before  # the heatmap is drawn anew from layer 4, head 7
    assert explorer.locator(".av-head").input_value() == "7" and explorer.locator(".av-layer").input_value() == "4"
    assert explorer.locator(".av-focus-title").inner_text().endswith("layer 4, head 7")
    page.add_style_tag(content=".Toastify { display: none !important; }")  # JupyterLab's news question, over the cell
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    explorer.screenshot(path=str(SCREENSHOTS / "notebook_explorer.png"))


def test_hovering_a_cell_names_its_raw_tokens(lab, page, tiny_model):
    """A tiny GPT-2's head (byte-level BPE): the labels read "cat" and "↵", the hover of the cell where "↵" looks at
    "cat" names the raw tokens Ċ and Ġcat as well."""
    text, key = "the cat sat\nthe <b>dog</b>", f"hf:{tiny_model('gpt2')}"
    tokens = list(attnviz.trace(text, key).tokens)
    query, key_index = tokens.index("Ċ"), tokens.index("Ġcat")
    cell = f"import attnviz\nattnviz.show(attnviz.trace({text!r}, {key!r}), 1, 2)"
    explorer, title = run(page, lab("raw.ipynb", cell))
    assert title.inner_text() == "layer 1, head 2"
    shown = explorer.locator(".av-klabels span").all_inner_texts()
    assert shown[key_index] == "cat" and not any("Ġ" in s or "Ċ" in s for s in shown)
    canvas = explorer.locator(".av-detail canvas.av-heatmap")
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] * (key_index + 0.5) / len(tokens),
                    box["y"] + box["height"] * (query + 0.5) / len(tokens))
    hover = f"query {query} “↵” (token Ċ) · key {key_index} “cat” (token Ġcat) · weight "
    expect(explorer.locator(".av-readout")).to_have_text(re.compile("^" + re.escape(hover)))
