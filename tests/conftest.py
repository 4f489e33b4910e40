"""Shared fixtures: the repo root on sys.path, a real Streamlit server and a real browser.

Tests are laid out by what they run: unit/ (the library, models and kernels, no page), app/ (pages in AppTest or a
real Streamlit server, without a browser) and e2e/ (a real Chromium). ``pytest tests/unit`` is the fast loop; the
markers below cut across folders. A test module may import another's helpers by its name, wherever it lies."""

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[1:1] = [str(ROOT / "tests" / part) for part in ("unit", "app", "e2e")]

from tiny_models import tiny_backend, tiny_model  # noqa: E402,F401  session fixtures: tiny_model(family) -> folder, tiny_backend(family) -> loaded
from real_models import smollm2, smollm2_eager  # noqa: E402,F401  SmolLM2 from its GGUF file, loaded once

SCREENSHOTS = ROOT / "tests" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(env: dict | None = None, timeout: float = 90):
    """``streamlit run app.py`` on a free loopback port -> (process, base URL); waits for health."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.address", "127.0.0.1", "--server.port", str(port)],
        cwd=ROOT, env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited: {proc.stderr.read()[-2000:]}")
        try:
            if urllib.request.urlopen(url + "/_stcore/health", timeout=2).read() == b"ok":
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("streamlit did not become healthy in time")


@pytest.fixture(scope="session")
def app_url():
    """A real Streamlit server for the whole session; stopped by its PID at the end."""
    proc, url = start_server()
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (never ``playwright install``)."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Chromium is missing: apt-get install chromium (.ci/run does this)")
        pytest.skip("end-to-end tests need Debian's chromium: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, request):
    """A fresh browser page; a screenshot of it is saved under tests/screenshots/<test name>.png."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    yield pg
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        pg.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"), full_page=True)
    finally:
        context.close()


@pytest.fixture
def checkpoints(monkeypatch):
    """Counts ``jobs.checkpoint`` calls (one a step of any long work) and raises StopException there, as Streamlit's
    Stop does, at the ``stop``-th when it is set; progress bars drawn from the first step."""
    from streamlit.runtime.scriptrunner import StopException

    from attnviz.ui import jobs, progress

    count = {"n": 0, "stop": None}
    real = jobs.checkpoint

    def checkpoint():
        count["n"] += 1
        if count["n"] == count["stop"]:
            raise StopException()
        real()

    monkeypatch.setattr(jobs, "checkpoint", checkpoint)
    monkeypatch.setattr(progress, "BAR_AFTER_S", 0.0)
    return count


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain nothing from more threads, and threads spin on busy cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# Markers, given by what a test uses, so `pytest -m "not e2e"` (or "not e2e and not server and not slow") is a
# fast loop: e2e drives Chromium, server starts `streamlit run`, slow loads the real SmolLM2 (a minute to dequantise).
MARKERS = {
    "e2e": "drives a real Chromium (the browser fixture)",
    "server": "starts a real Streamlit server (app_url or start_server)",
    "slow": "loads the real SmolLM2-135M-Instruct from its GGUF file",
}


def pytest_configure(config):
    for name, why in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {why}")


def _calls(func, name: str) -> bool:
    code = getattr(func, "__code__", None)
    return code is not None and name in code.co_names


def pytest_collection_modifyitems(items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        funcs = [getattr(item, "function", None)] + [d.func for ds in defs.values() for d in ds]
        if "browser" in used:
            item.add_marker("e2e")
        if "app_url" in used or any(_calls(f, "start_server") for f in funcs):
            item.add_marker("server")
        if used & {"smollm2", "smollm2_eager"}:
            item.add_marker("slow")
