"""Operator settings: one reader (attnviz/settings.py) and one policy for a bad value — a warning naming the
variable, the value and what is used instead, never an error, so a typo cannot break the app; and importing the
library leaves the environment alone (the app's entry turns torch's huge pages on, before torch loads)."""

import ast
import logging
import os
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from attnviz import settings
from conftest import ROOT


@pytest.fixture
def logged(caplog, monkeypatch):
    monkeypatch.setattr(settings, "_warned", set())
    caplog.set_level(logging.WARNING, logger="attnviz")
    return caplog


@pytest.mark.parametrize("read, name, raw, default, wanted", [
    (settings.max_jobs, "ATTNVIZ_MAX_JOBS", "two", 2, "a whole number above 0"),
    (settings.max_jobs, "ATTNVIZ_MAX_JOBS", "2.5", 2, "a whole number above 0"),
    (settings.max_tokens, "ATTNVIZ_MAX_TOKENS", "-512", 32_768, "a whole number above 0"),
    (settings.max_tokens, "ATTNVIZ_MAX_TOKENS", "inf", 32_768, "a whole number above 0"),
    (settings.max_dense_mb, "ATTNVIZ_MAX_DENSE_MB", "1 GB", 1024, "a number above 0"),
    (settings.max_model_mb, "ATTNVIZ_MAX_MODEL_MB", "0", 2048, "a number above 0"),
    (settings.shard_write_pause, "ATTNVIZ_TEST_SHARD_PAUSE", "-1", 0.0, "a number ≥ 0"),
    (settings.max_chars, "ATTNVIZ_MAX_CHARS", "20k", 20_000, "a whole number above 0"),
    (settings.warm_mb, "ATTNVIZ_WARM_MB", "half a GB", 0, "a number ≥ 0"),
])
def test_a_bad_number_warns_once_and_uses_the_default(logged, monkeypatch, read, name, raw, default, wanted):
    monkeypatch.setenv(name, raw)
    assert read() == default and read() == default
    assert [r.getMessage() for r in logged.records] == [
        f"{name} must be {wanted}, not {raw!r}; using {default} instead"]


def test_good_values_are_read_at_call_time(logged, monkeypatch):
    monkeypatch.setenv("ATTNVIZ_MAX_JOBS", " 3 ")
    monkeypatch.setenv("ATTNVIZ_MAX_DENSE_MB", "0.5")
    monkeypatch.setenv("ATTNVIZ_TEST_SHARD_PAUSE", "0")
    assert (settings.max_jobs(), settings.max_dense_mb(), settings.shard_write_pause()) == (3, 0.5, 0.0)
    monkeypatch.setenv("ATTNVIZ_MAX_JOBS", "4.0")
    assert settings.max_jobs() == 4 and isinstance(settings.max_jobs(), int)
    assert not logged.records


def test_flags_and_the_secrets_fallback(logged, monkeypatch):
    monkeypatch.delenv("ATTNVIZ_PUBLIC", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("ATTNVIZ_MAX_CHARS", raising=False)
    assert not settings.public() and settings.public(True) and not settings.public("off")
    monkeypatch.setenv("SPACE_ID", "someone/demo")
    assert settings.public() and not settings.public("0")
    monkeypatch.setenv("ATTNVIZ_PUBLIC", "0")
    assert not settings.public(True)  # the environment wins over the secrets
    assert settings.max_chars(30) == 30 and settings.max_chars() == 20_000
    assert not logged.records
    monkeypatch.setenv("ATTNVIZ_PUBLIC", "ture")  # a typo falls back to public mode, the careful side
    monkeypatch.delenv("SPACE_ID")
    assert settings.public()
    monkeypatch.setenv("ATTNVIZ_ALLOW_PICKLE", "sure")
    assert not settings.allow_pickle()
    assert [r.getMessage() for r in logged.records] == [
        "ATTNVIZ_PUBLIC must be one of 1/true/yes/on/0/false/no/off, not 'ture'; using on instead",
        "ATTNVIZ_ALLOW_PICKLE must be one of 1/true/yes/on/0/false/no/off, not 'sure'; using off instead"]


def test_the_apps_limit_is_16384_tokens_and_one_setting_sets_it(monkeypatch):
    """The Attention page takes every length: the app's limit is ATTNVIZ_MAX_TOKENS (16,384 by default, the model's
    own limit still applies); the other pages read ATTNVIZ_PAGE_TOKENS of it. No second, long-text limit."""
    from attnviz.ui import frame

    monkeypatch.delenv("ATTNVIZ_MAX_TOKENS", raising=False)
    monkeypatch.delenv("ATTNVIZ_PAGE_TOKENS", raising=False)
    assert settings.APP_MAX_TOKENS == frame.max_tokens() == 16_384 and frame.page_cap() == settings.PAGE_TOKENS == 512
    monkeypatch.setenv("ATTNVIZ_MAX_TOKENS", "300")
    assert frame.max_tokens() == frame.page_cap() == 300
    assert not [n for n in dir(settings) if "long" in n.lower()]


def test_the_app_runs_on_a_mistyped_setting(logged, monkeypatch):
    """A typo in a limit read inside every request: the page still draws, at the default, and the log says so."""
    monkeypatch.setenv("ATTNVIZ_MAX_TOKENS", "512 tokens")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["model"] = "builtin:minilm"
    at.run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert at.get("plotly_chart")
    assert any("ATTNVIZ_MAX_TOKENS must be a whole number above 0, not '512 tokens'; using" in r.getMessage()
               for r in logged.records)


def test_only_settings_reads_the_environment():
    """No module of attnviz/ but settings.py reads (or writes) os.environ or getenv."""
    found = []
    for path in (ROOT / "attnviz").rglob("*.py"):
        if path.name == "settings.py" and path.parent.name == "attnviz":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found


PROBE = """
import os, sys
seen = {}


class Watch:  # records the environment at the moment torch is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and name not in seen:
            seen[name] = os.environ.get("THP_MEM_ALLOC_ENABLE")


sys.meta_path.insert(0, Watch())
before = dict(os.environ)
if sys.argv[1] == "library":
    import attnviz
    assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())
else:
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file("app.py", default_timeout=120)
    at.query_params["model"] = "builtin:seed"
    assert not at.run().exception
print(seen["torch"])
"""


@pytest.mark.parametrize("entry, thp", [("library", "None"), ("app", "1")])
def test_importing_the_library_leaves_the_environment_and_the_app_turns_huge_pages_on(entry, thp):
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", PROBE, entry], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == thp
