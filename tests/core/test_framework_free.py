"""The core stands alone: importing every module of ``memory_core`` loads no NoneBot module, and
its distribution (``temporal-memory``) does not require NoneBot."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

IMPORT_EVERYTHING = """
import importlib, json, pkgutil, sys
import memory_core
names = [m.name for m in pkgutil.walk_packages(memory_core.__path__, "memory_core.")]
for name in names:
    if not name.endswith("__main__"):  # that one runs the CLI
        importlib.import_module(name)
print(json.dumps({
    "imported": names,
    "nonebot": sorted(m for m in sys.modules if m.split(".")[0].startswith("nonebot")),
}))
"""


def test_importing_every_core_module_loads_no_nonebot_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERYTHING],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    found = json.loads(result.stdout.splitlines()[-1])
    assert "memory_core.storage.database" in found["imported"]
    assert "memory_core.conversation.engine" in found["imported"]
    assert found["nonebot"] == []


def test_the_core_distribution_requires_no_nonebot_package() -> None:
    required = [r for r in requires("temporal-memory") or [] if "extra ==" not in r]
    assert any(r.startswith("asyncpg") for r in required)
    assert [r for r in required if "nonebot" in r.lower()] == []
