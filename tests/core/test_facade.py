"""The facade runs the lifecycle only (STYLE.md habit 18): ``TemporalMemory`` neither passes a
call through to a part nor copies a part into an attribute, so each part is reached one way,
``memory.parts.<part>``. Read from the source, as ``test_table_owners`` reads the SQL."""

from __future__ import annotations

import ast
import inspect

from memory_core import service
from memory_core.parts import MemoryParts
from memory_core.service import TemporalMemory

# Its whole face: the lifecycle and what combines several parts.
LIFECYCLE = {"connect", "maintenance_round", "start_maintenance", "stop_embedded_server"}
LIFECYCLE |= {"aclose", "close_providers", "parts", "database_description", "daily"}
FAN_OUTS = {"stats", "distilled_stats", "maintain_distilled", "purge_expired", "reembed"}


def _methods() -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(inspect.getsource(service))
    [facade] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TemporalMemory"]
    return [n for n in facade.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        return body[1:]
    return body


def _part_call(node: ast.AST) -> str | None:
    """``self.parts.<part>.<name>`` (called, awaited or not), as that dotted text."""
    if isinstance(node, ast.Await):
        node = node.value
    if isinstance(node, ast.Call):
        node = node.func
    text = ast.unparse(node)
    return text if text.startswith("self.parts.") and text.count(".") >= 3 else None


def test_no_method_of_the_facade_only_passes_a_call_to_a_part() -> None:
    forwards = []
    for method in _methods():
        body = _without_docstring(method.body)
        if len(body) != 1:
            continue
        statement = body[0]
        value = statement.value if isinstance(statement, ast.Return | ast.Expr) else None
        target = _part_call(value) if value is not None else None
        if target is not None:
            forwards.append(f"{method.name} -> {target}")
    assert forwards == []


def test_the_facade_copies_no_part_into_an_attribute() -> None:
    [init] = [m for m in _methods() if m.name == "__init__"]
    copied = [
        ast.unparse(node)
        for node in ast.walk(init)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) for t in node.targets)
        and ast.unparse(node.value).startswith("parts.")
    ]
    assert copied == []
    fields = set(MemoryParts.__dataclass_fields__)
    assert not fields & set(vars(TemporalMemory)), "a part reachable as memory.<part>"


def test_the_facade_is_the_lifecycle_and_the_fan_outs() -> None:
    public = {name for name in vars(TemporalMemory) if not name.startswith("_")}
    init = inspect.getsource(TemporalMemory.__init__)
    public |= {name for name in LIFECYCLE if f"self.{name} =" in init}
    assert public == LIFECYCLE | FAN_OUTS
