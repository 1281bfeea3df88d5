"""The plugin's own settings (``BOT_*`` keys in ``.env.prod``); the core has ``MemorySettings``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, field_validator

from memory_core import MemorySettings, settings_from_mapping

DEFAULT_BOT_NAME = "小诗"


class Config(BaseModel):
    """Intake and reply options of the QQ bot."""

    bot_record_unaddressed: bool = False
    bot_group_allowlist: set[int] = Field(default_factory=set)
    bot_group_denylist: set[int] = Field(default_factory=set)
    bot_group_reply_quote: bool = True
    bot_resolve_at_names: bool = True
    bot_resolve_group_names: bool = True
    bot_name: str = ""
    # the web console (console/): off while empty
    memory_console_token: SecretStr | None = None
    # the memory over MCP at /mcp (mcp_http): off while empty
    memory_mcp_token: SecretStr | None = None

    @field_validator("memory_console_token", "memory_mcp_token", mode="before")
    @classmethod
    def _token_text(cls, value: Any) -> Any:
        # NoneBot decodes .env values as JSON: a token of digits arrives as a number.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str) and not value.strip():
            return None
        return value

    def group_allowed(self, group_id: int) -> bool:
        if group_id in self.bot_group_denylist:
            return False
        return not self.bot_group_allowlist or group_id in self.bot_group_allowlist


def _accepts_text_only(annotation: Any) -> bool:
    return annotation in (str, SecretStr, str | None, SecretStr | None)


def memory_settings_from_config(
    values: dict[str, Any], *, default_data_dir: Callable[[], Path]
) -> MemorySettings:
    """Build the core settings from NoneBot's global config (``driver.config.model_dump()``).

    ``MEMORY_DATA_DIR`` is used as given (this repository's ``.env.prod`` sets ``data``); when it
    is missing or blank, as in a NoneBot project that only installed the plugin, the data
    directory is ``default_data_dir()`` (the plugin passes localstore's plugin data dir).

    NoneBot decodes every value of ``.env.prod`` as JSON when it can, so ``LLM_API_KEY=123``
    arrives as an int; text-only fields get their text back before validation.
    """
    fields = MemorySettings.model_fields
    prepared: dict[str, Any] = {}
    for key, value in values.items():
        name = str(key).lower()
        field = fields.get(name)
        if field is None:
            continue
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and _accepts_text_only(field.annotation)
        ):
            value = str(value)
        prepared[name] = value
    configured_dir = prepared.get("memory_data_dir")
    if configured_dir is None or str(configured_dir).strip() == "":
        prepared["memory_data_dir"] = default_data_dir()
    return settings_from_mapping(prepared)


def bot_name_from(configured: str, nicknames: set[str] | list[str] | tuple[str, ...]) -> str:
    """The bot's name in memory lines: ``BOT_NAME``, else a nickname (NoneBot keeps them in a
    set, so with several the alphabetically first), else ``小诗``."""
    if configured.strip():
        return configured.strip()
    names = sorted(n.strip() for n in nicknames if n and n.strip())
    return names[0] if names else DEFAULT_BOT_NAME
