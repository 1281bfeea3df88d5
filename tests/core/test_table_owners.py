"""One owner per table: every statement in ``memory_core`` that writes a table (INSERT, UPDATE,
DELETE, TRUNCATE, COPY, and the shared row shapes of ``storage.row_changes``) sits in the module
or package that owns it. A turn's text in particular changes only through ``dialogue/``
(``TurnWriter.rewrite``), so no feature can give a turn a text without the columns derived from it.

The SQL is read from the source: every string constant (f-string parts too) but docstrings, and
the table names handed to ``copy_records_to_table`` and the ``row_changes`` builders. A table
created by a migration without an owner here fails too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "memory_core"

# Table -> the module or package (a path under the repository, ending in "/" for a package)
# allowed to write it.
OWNERS = {
    "dialogues": "memory_core/dialogue/",
    "dialogue_import": "memory_core/dialogue/",
    "dialogue_sessions": "memory_core/dialogue/",
    "memory_meta": "memory_core/dialogue/",
    "turn_pictures": "memory_core/pictures/",
    "distilled_memories": "memory_core/distill/",
    "distilled_sessions": "memory_core/distill/",
    "answer_cache": "memory_core/answer_cache/",
    "evaluation_queue": "memory_core/evaluation/",
    "memory_audit_log": "memory_core/storage/audit_log.py",
    "memory_daily_stats": "memory_core/storage/counters.py",
    "memory_opt_outs": "memory_core/storage/opt_outs.py",
    "memory_recycle_bin": "memory_core/storage/recycle_bin.py",
    "memory_shared_groups": "memory_core/storage/shared_groups.py",
    "schema_migrations": "memory_core/storage/database.py",
}

_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|COPY)\s+([a-z_]+)", re.I
)
_CREATED = re.compile(
    r"CREATE\s+(?:TEMP(?:ORARY)?\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I
)
# Calls whose first argument names the table they write.
_WRITING_CALLS = {"copy_records_to_table", "edit_sql", "take_sql", "put_back_sql"}


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring nodes of the module, its classes and functions."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def written_tables(source: str) -> Iterator[str]:
    """The tables the SQL in ``source`` (a Python module) writes, each time it does."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield from (m.group(1).lower() for m in _WRITE.finditer(node.value))
        elif isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else name
            first = node.args[0]
            if name in _WRITING_CALLS and isinstance(first, ast.Constant):
                yield str(first.value)


def known_tables() -> set[str]:
    sql = [p.read_text(encoding="utf-8") for p in (ROOT / "migrations").glob("*.sql")]
    sql += [p.read_text(encoding="utf-8") for p in CORE.rglob("*.py")]
    return {m.group(1).lower() for text in sql for m in _CREATED.finditer(text)}


def foreign_writes() -> list[str]:
    tables = known_tables()
    found = []
    for path in sorted(CORE.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for table in written_tables(path.read_text(encoding="utf-8")):
            if table not in tables:
                continue  # a word after UPDATE in prose or a clause ("DO UPDATE SET")
            owner = OWNERS[table]
            if not (where.startswith(owner) if owner.endswith("/") else where == owner):
                found.append(f"{where} writes {table} (owner: {owner})")
    return found


def test_every_table_has_an_owner():
    assert known_tables() - set(OWNERS) == set()


def test_no_module_writes_a_table_it_does_not_own():
    assert foreign_writes() == []


def test_the_scan_sees_a_write_from_a_foreign_module():
    """The scan is not blind: the picture reader's old update of a turn's text, and the
    accounts' claim on the metadata, are found."""
    old = '''
SQL_SET_TEXT = """
UPDATE dialogues SET content = $2 WHERE id = $1
"""
SQL_CLAIM = f"INSERT INTO memory_meta (key, value) VALUES ('first_account', $1::text)"
TAKE = take_sql("distilled_memories")
'''
    assert sorted(written_tables(old)) == ["dialogues", "distilled_memories", "memory_meta"]
    assert list(written_tables('"""Each UPDATE of dialogues goes through the writer."""')) == []
