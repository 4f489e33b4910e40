"""The settings a local run and a host read from .streamlit/config.toml."""

import tomllib

from conftest import ROOT


def config() -> dict:
    return tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))


def test_a_local_run_opens_the_browser():
    # server.headless would stop `streamlit run app.py` from opening the browser; hosts set it themselves.
    assert "headless" not in config().get("server", {})
