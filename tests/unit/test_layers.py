"""attnviz's folders run one way: every import (function-level ones included) points down the layers, none
forms a circle, and only Streamlit's own layer imports Streamlit; models are kept in one cache, the library's
(``attnviz.backends.load``), never in a second one that a decorator hides; traces are kept in one store
(``attnviz.ui.traces``), the one that registers with the job line and evicts.

The order, lowest first, is the one shared/ARCHITECTURE.md draws; a module may import its own folder and any
folder below it. Read from the source with ``ast``, so an import hidden inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "attnviz"
# Lowest first. Each entry is a folder of attnviz/ or a module at its root.
LAYERS = [
    ["settings", "data"],
    ["core"],
    ["capture"],
    ["nn"],
    ["backends"],
    ["analysis"],
    ["corpus"],
    ["training"],
    ["figures"],
    ["export"],
    ["ui"],
    ["cli", "train", "__main__", "__init__"],
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
ROOT_MODULES_AT_MOST = 6


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import of an attnviz module in ``path``, at any depth."""
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "attnviz"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "attnviz":
                continue
            # ``from attnviz.x import y``: y may be a module of its own
            for a in node.names:
                sub = f"{target}.{a.name}"
                is_module = (ROOT / (sub.replace(".", "/") + ".py")).exists() or (ROOT / sub.replace(".", "/")).is_dir()
                found.append((node.lineno, sub if is_module else target))
    return found


def layer(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = sorted(PACKAGE.rglob("*.py"))


def graph() -> dict[str, set[str]]:
    names = {module_name(p) for p in MODULES}
    edges = {}
    for p in MODULES:
        mod = module_name(p)
        edges[mod] = {t for _, t in imports(p) if t in names and t != mod and t != "attnviz"}
    return edges


def test_every_layer_is_known():
    unknown = {layer(module_name(p)) for p in MODULES} - set(RANK)
    assert not unknown, f"folders or root modules missing from LAYERS: {sorted(unknown)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    mod = module_name(path)
    mine = RANK[layer(mod)]
    up = [f"line {line}: {target}" for line, target in imports(path)
          if target != "attnviz" and RANK.get(layer(target), -1) > mine]
    assert not up, f"{mod} imports from a layer above it: {up}"


def test_no_import_circle():
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def test_only_ui_imports_streamlit():
    offenders = []
    for p in MODULES:
        if layer(module_name(p)) == "ui":
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{p.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "streamlit"]
    assert not offenders, offenders


def test_root_holds_a_handful_of_modules():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= ROOT_MODULES_AT_MOST, root


def test_the_walk_sees_function_level_imports(tmp_path):
    """The check can fail: an import inside a function is found like any other."""
    src = PACKAGE / "core" / "weights.py"
    hidden = [t for line, t in imports(src)]
    assert "attnviz.settings" in hidden
    probe = PACKAGE / "core" / "_probe_layers.py"
    probe.write_text("def f():\n    from ..ui import frame\n")
    try:
        assert (probe.stat().st_size and [t for _, t in imports(probe)] == ["attnviz.ui.frame"])
    finally:
        probe.unlink()


# The one cache of models is attnviz.backends' (``load``); a caching decorator over a function that returns a loaded
# model (lru_cache, functools.cache, st.cache_resource or st.cache_data) would be a second copy, with its own bound.
CACHES = {"lru_cache", "cache", "cache_resource", "cache_data"}
LOADERS = {"open_model", "load", "load_hf", "get_model", "resolve", "offered", "from_pretrained", "load_smollm2",
           "LensBackend", "_open"}
APP = [ROOT / "app.py", *sorted((ROOT / "pages").glob("*.py"))]


def _name(node) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def cached_loaders(path: Path) -> list[str]:
    """``path:line name`` of every function a caching decorator wraps that returns a model a loader gave."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not any(_name(d) in CACHES for d in node.decorator_list):
            continue
        loaded = {t.id for n in ast.walk(node) if isinstance(n, ast.Assign) and _name(n.value) in LOADERS
                  for t in n.targets if isinstance(t, ast.Name)}
        if any(isinstance(n, ast.Return) and n.value is not None
               and (_name(n.value) in LOADERS and isinstance(n.value, ast.Call) or _name(n.value) in loaded)
               for n in ast.walk(node)):
            found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{node.lineno} {node.name}")
    return found


@pytest.mark.parametrize("path", MODULES + APP, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_second_cache_of_models(path):
    assert not cached_loaders(path), f"a second cache of models (use attnviz.backends.load): {cached_loaders(path)}"


def test_the_one_cache_of_models_is_the_librarys():
    """The app's loader is the library's cache: the same object for a key, however the key is spelled."""
    import attnviz
    from attnviz.ui.frame import get_model

    assert get_model(" builtin:seed ") is attnviz.load("builtin:seed") is get_model("builtin:seed")


def test_the_cache_check_can_fail(tmp_path):
    """A model loader under lru_cache or st.cache_resource is found, directly or through a name; a cached trace is
    not a cached model."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import functools\nimport streamlit as st\n"
        "@functools.lru_cache(maxsize=4)\ndef a(key):\n    return open_model(key)\n"
        "@st.cache_resource(max_entries=4)\ndef b(key):\n    model = backends.load(key)\n    return model\n"
        "@st.cache_resource\ndef c(key, text):\n    trace = get_model(key).trace(text)\n    return trace\n")
    assert [line.split()[-1] for line in cached_loaders(probe)] == ["a", "b"]


# Traces are kept in one store (attnviz/ui/traces.py): the only module that registers with the job line's memory
# count (``jobs.keeper``), defines an eviction, or holds values in a table of its own (a weak-valued table, an ordered
# dict); a caching decorator over a forward anywhere would be a second store of traces, with its own bound.
TRACE_STORE = PACKAGE / "ui" / "traces.py"
FORWARDS = {"trace", "run_with_trace", "trace_with_survey", "build_trace", "stored_trace", "surveyed_trace"}
TABLES = {"WeakValueDictionary", "OrderedDict"}


def trace_keeping(path: Path) -> list[str]:
    """``path:line what`` of every place ``path`` keeps traces itself: a keeper registered, an eviction defined, a
    table of values made, a forward under a caching decorator."""
    found, where = [], path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and _name(node) == "keeper":
            found.append(f"{where}:{node.lineno} jobs.keeper")
        elif isinstance(node, ast.Call) and _name(node) in TABLES:
            found.append(f"{where}:{node.lineno} {_name(node)}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if "evict" in node.name:
                found.append(f"{where}:{node.lineno} {node.name}")
            if any(_name(d) in CACHES for d in node.decorator_list) and any(
                    isinstance(n, ast.Call) and _name(n) in FORWARDS for n in ast.walk(node)):
                found.append(f"{where}:{node.lineno} cached {node.name}")
    return found


@pytest.mark.parametrize("path", [p for p in MODULES + APP if p != TRACE_STORE], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_second_store_of_traces(path):
    assert not trace_keeping(path), f"a second store of traces (use attnviz.ui.traces): {trace_keeping(path)}"


def test_the_store_registers_once():
    """The store itself: one keeper, and the one eviction the job line calls."""
    found = [line.split()[-1] for line in trace_keeping(TRACE_STORE)]
    assert found.count("jobs.keeper") == 1 and found.count("evict") == 1, found


def test_the_store_check_can_fail(tmp_path):
    """A second keeper, an eviction, a weak table and a cached forward are each found."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import weakref\nimport streamlit as st\nfrom attnviz.ui import jobs\n"
        "_MADE = weakref.WeakValueDictionary()\n"
        "def _evict():\n    return False\n"
        "jobs.keeper(lambda: 0.0, _evict)\n"
        "@st.cache_resource(max_entries=8)\ndef _cached(key, text):\n    return get_model(key).trace(text)\n"
        "@st.cache_resource\ndef model(key):\n    return 1\n")
    assert sorted(line.split(maxsplit=1)[-1] for line in trace_keeping(probe)) == [
        "WeakValueDictionary", "_evict", "cached _cached", "jobs.keeper"], trace_keeping(probe)


# One progress bar and stop point for every long step: ui/progress.py's Bar, which calls jobs.checkpoint at every
# step. A page or module drawing st.progress itself would have a bar that no rerun or closed tab stops.
PROGRESS = PACKAGE / "ui" / "progress.py"
def progress_bars(path: Path) -> list[str]:
    """``path:line`` of every ``st.progress(…)`` call in ``path``."""
    return [f"{path.name}:{n.lineno}" for n in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "progress"
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "st"]


@pytest.mark.parametrize("path", [p for p in MODULES + APP if p != PROGRESS],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_one_progress_bar(path):
    assert not progress_bars(path), f"a progress bar of its own (use attnviz.ui.progress.Bar): {progress_bars(path)}"


def test_the_progress_check_can_fail(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import streamlit as st\nbar = st.progress(0.0)\nbar.progress(0.5)\n")
    assert progress_bars(probe) == ["probe.py:2"] and progress_bars(PROGRESS)
