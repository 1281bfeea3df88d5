"""The effective settings as the console shows them: every value, secrets masked."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, SecretStr

MASK = "已设置（隐藏）"
UNSET = "（空）"
# Any setting named like a secret is masked even when it is a plain string ("token", not the
# counts named "..._TOKENS").
_SECRET_NAME = re.compile(r"token(?!s)|secret|password|api_key|dsn|signature", re.I)


def _shown(name: str, value: Any) -> str:
    if value is None or value == "":
        return UNSET
    if isinstance(value, SecretStr) or _SECRET_NAME.search(name):
        return MASK
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=str)
    return str(value)


def masked_settings(*sources: BaseModel | Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(KEY, shown value)`` of every setting of these models or mappings, sorted by key;
    secrets (``SecretStr`` and secret-like names) show only whether they are set."""
    seen: dict[str, str] = {}
    for source in sources:
        values = (
            {name: getattr(source, name) for name in type(source).model_fields}
            if isinstance(source, BaseModel)
            else dict(source)
        )
        for name, value in values.items():
            seen.setdefault(str(name).upper(), _shown(str(name), value))
    return sorted(seen.items())
