"""Dependencies inside ``memory_core`` point one way: no package that ``service.py`` (the facade)
or ``wiring.py`` (the composition root) is built from imports ``service.py`` back, ``console/``
sits only above the core, and the plugin uses the core's public names only.

Imports under ``if TYPE_CHECKING:`` count too: they are not executed, but they are an arrow in
the design all the same (a module that names ``TemporalMemory`` in its signatures depends on the
facade), and skipping them hid that ``service.py`` imports ``console/store.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "memory_core"

KNOWN_UPWARD: dict[tuple[str, str], str] = {}
"""Arrows the tests tolerate for now, each with the branch that removes it."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The ``memory_core`` modules ``path`` imports anywhere in it: at the top, inside
    functions, and under ``if TYPE_CHECKING:``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.startswith("memory_core"):
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("memory_core"))
    return found


def _graph() -> dict[str, set[str]]:
    """Each module's imports of other ``memory_core`` modules, the tolerated arrows left out."""
    modules = {_module_name(p): p for p in CORE.rglob("*.py")}
    return {
        name: {
            m
            for m in _imports(path)
            if m in modules and m != name and (name, m) not in KNOWN_UPWARD
        }
        for name, path in modules.items()
    }


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") > 1 else module


def test_the_import_reader_sees_imports_under_type_checking() -> None:
    module = CORE / "console" / "service.py"  # names MemoryParts under TYPE_CHECKING only
    source = module.read_text(encoding="utf-8")
    block = source.split("if TYPE_CHECKING:\n", 1)[1].split("\n\n", 1)[0]
    assert "    from ..parts import MemoryParts" in block.splitlines()
    assert "memory_core.parts" in _imports(module)
    assert "memory_core.parts" in _graph()["memory_core.console.service"]


def _below(graph: dict[str, set[str]], top: str) -> set[str]:
    """Every module ``top`` imports, directly or through another."""
    below: set[str] = set()
    todo = [top]
    while todo:
        for imported in graph[todo.pop()] - below:
            below.add(imported)
            todo.append(imported)
    return below


def test_no_package_below_the_facade_imports_service_py() -> None:
    graph = _graph()
    below = _below(graph, "memory_core.service") | _below(graph, "memory_core.wiring")
    packages_below = {_package(m) for m in below if m.count(".") > 1}
    importers = {m for m, imports in graph.items() if "memory_core.service" in imports}
    upward = sorted(m for m in importers if _package(m) in packages_below or m in below)
    assert "memory_core.cli" in importers  # the CLI is a client of the facade
    assert upward == []


# The layers above the core: the operator's console and the agents' MCP server (which audits
# its calls in the console's log), each a public face of its own; and the command line, a front
# end like the plugin (its ``stats`` prints the console's /memstat dashboard).
ABOVE_THE_CORE = ("memory_core.console", "memory_core.agents", "memory_core.cli")


def test_nothing_below_the_layers_above_the_core_imports_console() -> None:
    graph = _graph()
    into_console = sorted(
        (module, imported)
        for module, imports in graph.items()
        if not module.startswith(ABOVE_THE_CORE)
        for imported in imports
        if imported.startswith("memory_core.console")
    )
    assert into_console == []


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


def test_the_cores_face_lists_no_presentation() -> None:
    """What people read (the /memstat dashboard, Chinese labels and times) is presented by the
    console's face, not listed among the core's nouns."""
    import memory_core
    import memory_core.console
    from memory_core.console import dashboard

    shown = {
        n
        for n in dir(dashboard)
        if getattr(getattr(dashboard, n), "__module__", "") == dashboard.__name__
    }
    chinese = [n for n in memory_core.__all__ if n.lower().endswith("_zh") or "_ZH" in n]
    assert chinese == []
    assert sorted(shown & set(memory_core.__all__)) == []
    assert {"dashboard_zh", "relative_time_zh", "CATEGORY_ZH"} <= set(memory_core.console.__all__)
