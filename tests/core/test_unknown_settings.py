"""A key no setting reads is named once at start-up instead of being silently ignored: a removed
one says it was removed, another with this project's prefix says it is no setting."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from memory_core import MemorySettings, unknown_settings
from memory_core.cli import load_settings
from memory_core.unknown_settings import REMOVED_KEYS

ENV_PROD = Path(__file__).resolve().parents[2] / ".env.prod"


def test_a_removed_key_is_named_as_removed_and_a_typo_as_no_setting() -> None:
    line = unknown_settings(
        ["MEMORY_FUSION", "memory_rrf_k", "MEMORY_TOPN", "MEMORY_TOP_N", "PATH", "HOST"],
        others=["BOT_NAME"],
    )
    assert line == (
        "settings ignored, no setting reads them: MEMORY_FUSION (removed), "
        "MEMORY_RRF_K (removed), MEMORY_TOPN (no such setting)"
    )


def test_keys_every_setting_reads_give_no_line() -> None:
    keys = [name.upper() for name in MemorySettings.model_fields]
    assert (
        unknown_settings([*keys, "PATH", "HOME", "DRIVER", "BOT_NAME"], others=["bot_name"]) is None
    )


def test_without_the_front_ends_own_keys_only_removed_ones_are_named() -> None:
    """The CLI shares .env.prod with the plugin and does not know its BOT_* keys."""
    assert unknown_settings(["BOT_NAME", "MEMORY_CONSOLE_TOKEN", "MEMORY_TOPN"]) is None
    assert unknown_settings(["BOT_CONFIRM_TIMEOUT"]) == (
        "settings ignored, no setting reads them: BOT_CONFIRM_TIMEOUT (removed)"
    )


def test_no_removed_key_is_a_setting_or_in_env_prod() -> None:
    """A key brought back leaves REMOVED_KEYS, or its warning would be wrong."""
    settings = {name.upper() for name in MemorySettings.model_fields}
    shipped = {
        line.partition("=")[0].strip()
        for line in ENV_PROD.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#") and "=" in line
    }
    assert sorted(REMOVED_KEYS & (settings | shipped)) == []


def test_the_cli_warns_once_of_a_removed_key_in_env_prod_or_the_environment(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env_file = tmp_path / ".env.prod"
    env_file.write_text("MEMORY_FUSION=rrf\nMEMORY_TOP_N=5\nBOT_NAME=小诗\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="memory_core.cli"):
        settings = load_settings(env_file, {"EXTRACTION_MAX_TURNS": "9", "PATH": "/bin"}, None)
    assert settings.memory_top_n == 5
    assert [r.getMessage() for r in caplog.records] == [
        "settings ignored, no setting reads them: EXTRACTION_MAX_TURNS (removed), "
        "MEMORY_FUSION (removed)"
    ]
