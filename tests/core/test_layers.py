"""Dependencies inside ``memory_core`` point one way: no package that ``service.py`` (the facade
and composition root) is built from imports ``service.py`` back at run time."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "memory_core"


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path) -> set[str]:
    """The ``memory_core`` modules ``path`` imports when it runs (not under TYPE_CHECKING)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                if base.startswith("memory_core"):
                    found.add(base)
                    found.update(f"{base}.{alias.name}" for alias in child.names)
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("memory_core"))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in CORE.rglob("*.py")}
    return {
        name: {m for m in _runtime_imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") > 1 else module


def _below(graph: dict[str, set[str]], top: str) -> set[str]:
    """Every module ``top`` imports at run time, directly or through another."""
    below: set[str] = set()
    todo = [top]
    while todo:
        for imported in graph[todo.pop()] - below:
            below.add(imported)
            todo.append(imported)
    return below


def test_no_package_below_the_facade_imports_service_py() -> None:
    graph = _graph()
    below = _below(graph, "memory_core.service")
    packages_below = {_package(m) for m in below if m.count(".") > 1}
    importers = {m for m, imports in graph.items() if "memory_core.service" in imports}
    upward = sorted(m for m in importers if _package(m) in packages_below or m in below)
    assert "memory_core.wiring" in importers  # the composition root builds the facade
    assert upward == []


def test_the_console_sits_above_the_core() -> None:
    """The console is built on the facade; nothing the facade or its composition root is
    built from imports the console (its recycle bin, which /forget and the purge empty, is
    the core's: ``storage.recycle_bin``)."""
    graph = _graph()
    below = _below(graph, "memory_core.wiring") | {"memory_core.wiring"}
    assert sorted(m for m in below if _package(m) == "console") == []


PLUGIN = CORE.parent / "plugins" / "nonebot_plugin_temporal_memory"
PUBLIC_FACES = {"memory_core", "memory_core.agents", "memory_core.console"}


def test_the_plugin_uses_only_the_cores_public_names() -> None:
    """The plugin imports ``memory_core`` (and the console and the agents' MCP server above
    it) by their public faces, never a module behind them, and only names their ``__all__``
    lists."""
    import memory_core
    import memory_core.agents
    import memory_core.console

    listed = {"memory_core": set(memory_core.__all__)}
    listed["memory_core.agents"] = set(memory_core.agents.__all__)
    listed["memory_core.console"] = set(memory_core.console.__all__)
    inner, unlisted = [], []
    for path in sorted(PLUGIN.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memory_core"):
                where = f"{path.relative_to(PLUGIN)}: {node.module}"
                if node.module not in PUBLIC_FACES:
                    inner.append(where)
                    continue
                unlisted += [
                    f"{where}.{a.name}" for a in node.names if a.name not in listed[node.module]
                ]
            elif isinstance(node, ast.Import):
                inner += [a.name for a in node.names if a.name.startswith("memory_core.")]
    assert inner == []
    assert unlisted == []
