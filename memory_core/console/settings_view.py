"""The effective settings as the console shows them: every value, secrets masked, in the
sections of the commented ``.env.prod`` with the one-line description written there."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    if isinstance(value, (set, frozenset, list, tuple)):
        # As .env.prod writes a list: JSON.
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else list(value)
        return json.dumps(items, ensure_ascii=False, default=str)
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


@dataclass(frozen=True)
class SettingsSection:
    """A titled part of the settings page: its keys with their shown values and descriptions."""

    title: str
    rows: tuple[tuple[str, str, str], ...]  # (KEY, shown value, one-line description)


OTHERS = "其他"
_RULE = re.compile(r"^#\s*={6,}\s*$")
_KEY = re.compile(r"^([A-Z][A-Z0-9_]*)=")
_CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


def _chinese_half(line: str) -> str:
    """The Chinese half of a ``中文 / English`` comment line: before the last ``/ `` whose
    remainder has no Chinese (so ``remember / forget（只能查）/ read-only`` keeps its first
    slash), up to the first full stop."""
    cut = len(line)
    for match in re.finditer(r"/ ", line):
        if not _CJK.search(line[match.end() :]):
            cut = match.start()
            break
    text = line[:cut].strip()
    return text.split("。", 1)[0].strip().rstrip("，；：,;:")


def documented(env_text: str) -> tuple[dict[str, str], dict[str, str]]:
    """What a commented ``.env.prod`` says of its keys: each key's section title and its
    one-line description (the Chinese half of the first comment line above it)."""
    sections: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    section, block = OTHERS, list[str]()
    lines = env_text.splitlines()
    for index, line in enumerate(lines):
        stripped = line.strip()
        if _RULE.match(stripped):
            # A section's title is the comment between two rules (a title may take two lines).
            title = [t.strip() for t in lines[index + 1 : index + 4]]
            closing = next((i for i, t in enumerate(title) if _RULE.match(t)), None)
            if closing and all(t.startswith("#") for t in title[:closing]):
                section = _chinese_half(title[0].lstrip("# ")) or section
            block = []
        elif stripped.startswith("#"):
            block.append(stripped.lstrip("# ").strip())
        elif match := _KEY.match(stripped):
            key = match.group(1)
            sections[key] = section
            said = [b for b in block if _CJK.search(b)]
            if said:
                first = _chinese_half(said[0])
                sentence_ends = "。" in said[0] or len(said) == 1
                descriptions[key] = first if sentence_ends else f"{first}…"
            block = []
        else:
            block = []
    return sections, descriptions


def settings_sections(rows: Sequence[tuple[str, str]], env_text: str) -> list[SettingsSection]:
    """``masked_settings`` rows in the sections and order of the commented ``env_text`` (the
    one place settings are described), with their descriptions; keys it does not name last,
    under 其他."""
    sections, descriptions = documented(env_text)
    order = {key: i for i, key in enumerate(sections)}
    titled: dict[str, list[tuple[str, str, str]]] = {}
    for key, value in sorted(rows, key=lambda r: (order.get(r[0], len(order)), r[0])):
        titled.setdefault(sections.get(key, OTHERS), []).append(
            (key, value, descriptions.get(key, ""))
        )
    return [SettingsSection(title, tuple(items)) for title, items in titled.items()]
