"""Where the files shipped with the core are: migrations and the operator-editable defaults.

In this repository they are the top-level ``migrations/`` and ``config/`` folders; the package
build maps them to ``memory_core.migrations`` and ``memory_core.defaults`` (see
``pyproject.toml``), so an installed wheel finds them the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError


def _package_dir(name: str) -> Path:
    module = importlib.import_module(name)
    if module.__file__ is None:
        raise RuntimeError(f"{name} is not a folder on disk")
    return Path(module.__file__).resolve().parent


MIGRATIONS_DIR = _package_dir("memory_core.migrations")
DEFAULTS_DIR = _package_dir("memory_core.defaults")


def read_prompt_template(path: Path, placeholders: Sequence[str], what: str) -> str:
    """A prompt template's text; ``ConfigError`` naming ``what`` (e.g. "the evaluator prompt")
    when it cannot be read or lacks one of ``placeholders``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from exc
    missing = [p for p in placeholders if p not in text]
    if missing:
        raise ConfigError(f"{what} {path} lacks {', '.join(missing)}")
    return text
