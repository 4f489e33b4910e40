"""MkDocs hooks: the settings table from attnviz/settings.py, and the repository's own files in the site.

Every ATTNVIZ_* variable has one reader in settings.py whose docstring opens with its name; the table is built from
those functions (the default is what the function returns with the variable unset), so it cannot drift from the code.
The pages link the repository's files as GitHub shows them (``../bench/RESULTS.md``, ``../attnviz/assets/x.png``);
the build adds those files to the site and points the links at them, so one source reads right in both places.
"""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- settings-table -->"
NAME = re.compile(r"([A-Z][A-Z0-9_]+)")
# repository path as the pages write it -> where the build puts it in the site
MOUNTS = {"../bench/RESULTS.md": "results.md", "../attnviz/assets/": "assets/"}


def settings_rows() -> list[tuple[str, str, str]]:
    """(variable, default, what) for every reader in attnviz.settings, in the module's order."""
    from attnviz import settings

    rows = []
    for fn_name, fn in vars(settings).items():
        if fn_name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != settings.__name__:
            continue
        doc = inspect.getdoc(fn) or ""
        m = NAME.match(doc)
        if not m:
            continue
        name = m.group(1)
        saved = {k: os.environ.pop(k) for k in (name, "SPACE_ID", "XDG_CACHE_HOME") if k in os.environ}
        try:
            value = fn()
        finally:
            os.environ.update(saved)
        rows.append((name, shown(value), " ".join(doc.removeprefix(name + ":").split())))
    return rows


def shown(value) -> str:
    """A default as the table writes it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        home = os.path.expanduser("~")
        return f"`{'~' + value[len(home):] if value.startswith(home) else value}`"
    return f"{value:g}" if isinstance(value, float) else str(value)


def cell(text: str) -> str:
    """Text for a table cell: ``|`` escaped, and ``<`` outside code spans (a docstring's ``<tmp>`` is not a tag)."""
    parts = re.split(r"(`+[^`]*`+)", text.replace("|", "\\|"))
    return "".join(p if p.startswith("`") else p.replace("<", "&lt;") for p in parts)


def settings_table() -> str:
    lines = ["| variable | default | what |", "|---|---|---|"]
    lines += [f"| `{n}` | {cell(d)} | {cell(w)} |" for n, d, w in settings_rows()]
    return "\n".join(lines)


def on_files(files, config):
    """The benchmark log and the screenshots, from where they live in the repository."""
    files.append(File.generated(config, "results.md", abs_src_path=str(ROOT / "bench" / "RESULTS.md")))
    for png in sorted((ROOT / "attnviz" / "assets").glob("*.png")):
        files.append(File.generated(config, f"assets/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, config, files):
    for source, site in MOUNTS.items():  # inline links and reference definitions
        markdown = markdown.replace(f"]({source}", f"]({site}").replace(f"]: {source}", f"]: {site}")
    if MARK in markdown:
        markdown = markdown.replace(MARK, settings_table())
    return markdown
