"""Both wheels name their packages one by one (pyproject ``packages``): a new sub-package left
out of that list imports from the checkout but is missing from an installed wheel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def listed_packages(pyproject: Path) -> set[str]:
    return set(
        tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    )


def packages_on_disk(top: Path, base: Path) -> set[str]:
    return {
        ".".join(init.parent.relative_to(base).parts)
        for init in top.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


@pytest.mark.parametrize(
    ("pyproject", "top", "base"),
    [
        (ROOT / "pyproject.toml", ROOT / "memory_core", ROOT),
        (
            ROOT / "plugins" / "pyproject.toml",
            ROOT / "plugins" / "nonebot_plugin_temporal_memory",
            ROOT / "plugins",
        ),
    ],
    ids=["core", "plugin"],
)
def test_every_package_in_the_source_tree_is_in_its_wheel(
    pyproject: Path, top: Path, base: Path
) -> None:
    assert packages_on_disk(top, base) <= listed_packages(pyproject)
