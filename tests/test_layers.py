"""attnviz's folders run one way: every import (function-level ones included) points down the layers, none
forms a circle, and only Streamlit's own layer imports Streamlit.

The order, lowest first, is the one shared/ARCHITECTURE.md draws; a module may import its own folder and any
folder below it. Read from the source with ``ast``, so an import hidden inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
