"""`.env.prod` documents every key the bot and the core read, and parses as NoneBot reads it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from dotenv import dotenv_values

from memory_core.settings import MemorySettings
from memory_core.storage import embedded_server

ENV_PROD = Path(__file__).resolve().parents[2] / ".env.prod"
NONEBOT_KEYS = {
    "DRIVER", "HOST", "PORT", "LOG_LEVEL", "ONEBOT_ACCESS_TOKEN", "ONEBOT_SECRET",
    "ONEBOT_WS_URLS", "SUPERUSERS", "NICKNAME", "COMMAND_START",
}  # fmt: skip


@pytest.fixture(autouse=True)
def _plugin_loaded_first(plugin: object) -> None:
    """Importing the plugin's config module before NoneBot loads the plugin makes the later
    `load_plugin` refuse it; loading it first keeps these tests independent of file order."""


def env_values() -> dict[str, str | None]:
    return dotenv_values(ENV_PROD)


def nonebot_decoded(values: dict[str, str | None]) -> dict[str, object]:
    """What NoneBot makes of each value: JSON when it parses, else the text."""
    decoded: dict[str, object] = {}
    for key, value in values.items():
        try:
            decoded[key.lower()] = json.loads(value) if value else value
        except ValueError:
            decoded[key.lower()] = value
    return decoded


def test_every_setting_is_in_env_prod_with_a_comment_above_it_and_every_key_is_read() -> None:
    from nonebot_plugin_temporal_memory.config import Config

    values = env_values()
    expected = (
        {name.upper() for name in MemorySettings.model_fields}
        | {name.upper() for name in Config.model_fields}
        | NONEBOT_KEYS
    )
    assert expected - set(values) == set()
    # A key nothing reads (a removed setting left behind) misleads the operator.
    assert set(values) - expected == set()
    lines = ENV_PROD.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        if re.match(r"^[A-Z_]+=", line):
            assert lines[index - 1].startswith("#"), f"no comment above {line}"


def test_env_prod_has_no_secrets_and_safe_defaults() -> None:
    values = env_values()
    for key in (
        "LLM_API_KEY",
        "EMBEDDING_API_KEY",
        "EVALUATOR_API_KEY",
        "ONEBOT_ACCESS_TOKEN",
        "ONEBOT_SECRET",
        "MEMORY_DSN",
    ):
        assert not values[key], key
    assert values["HOST"] == "127.0.0.1" and values["PORT"] == "8080"
    assert values["DRIVER"] == "~fastapi+~websockets"


def no_default_dir() -> Path:
    raise AssertionError("MEMORY_DATA_DIR was set; no default data dir should be asked for")


def test_env_prod_validates_into_the_settings() -> None:
    from nonebot_plugin_temporal_memory.config import Config, memory_settings_from_config

    decoded = nonebot_decoded(env_values())
    settings = memory_settings_from_config(decoded, default_data_dir=no_default_dir)
    assert settings == MemorySettings()
    assert Config.model_validate(decoded) == Config()


def test_numeric_looking_secrets_stay_text() -> None:
    from nonebot_plugin_temporal_memory.config import memory_settings_from_config

    settings = memory_settings_from_config(
        {"llm_api_key": 12345, "llm_model": 7, "port": 80, "memory_data_dir": "data"},
        default_data_dir=no_default_dir,
    )
    assert settings.llm_api_key is not None
    assert settings.llm_api_key.get_secret_value() == "12345"
    assert settings.llm_model == "7"


def test_the_recall_floor_is_the_bundled_models_unless_set() -> None:
    from memory_core.settings import BUNDLED_MODEL_RECALL_FLOOR
    from nonebot_plugin_temporal_memory.config import memory_settings_from_config

    def floor(values: dict[str, object]) -> float | None:
        values = {"memory_data_dir": "data", **values}
        settings = memory_settings_from_config(values, default_data_dir=no_default_dir)
        return settings.recall_floor

    assert floor({"memory_recall_floor": ""}) == BUNDLED_MODEL_RECALL_FLOOR == 0.88
    assert floor({"memory_recall_floor": 0.9}) == 0.9  # NoneBot hands a number over as one
    assert floor({"embedding_provider": "api"}) is None  # no floor known for that model
    assert floor({"embedding_provider": "api", "memory_recall_floor": 0.6}) == 0.6


@pytest.mark.parametrize(
    "values",
    [{}, {"memory_data_dir": ""}, {"MEMORY_DATA_DIR": "  "}, {"memory_data_dir": None}],
    ids=["missing", "blank", "spaces", "key-only"],
)
def test_without_memory_data_dir_the_data_lives_in_the_default_dir(
    values: dict[str, object], tmp_path: Path
) -> None:
    from nonebot_plugin_temporal_memory.config import memory_settings_from_config

    asked: list[Path] = []

    def localstore_dir() -> Path:
        asked.append(tmp_path / "nonebot2" / "nonebot_plugin_temporal_memory")
        return asked[-1]

    settings = memory_settings_from_config(values, default_data_dir=localstore_dir)
    assert settings.memory_data_dir == tmp_path / "nonebot2" / "nonebot_plugin_temporal_memory"
    assert len(asked) == 1


def test_a_set_memory_data_dir_is_used_as_given() -> None:
    from nonebot_plugin_temporal_memory.config import memory_settings_from_config

    settings = memory_settings_from_config(
        {"MEMORY_DATA_DIR": "/srv/bot/data"}, default_data_dir=no_default_dir
    )
    assert settings.memory_data_dir == Path("/srv/bot/data")


def test_localstores_default_dir_as_root_keeps_the_database_cluster_out_of_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Run as root, localstore's data dir is /root/.local/share/nonebot2/<plugin>; the embedded
    # server would open every parent of its cluster to other users, so the cluster moves.
    monkeypatch.setattr(embedded_server.os, "geteuid", lambda: 0)
    root_default = Path("/root/.local/share/nonebot2/nonebot_plugin_temporal_memory")
    cluster = embedded_server.embedded_cluster_dir(root_default)
    assert not cluster.is_relative_to("/root")
    assert cluster.parent == Path("/var/lib/temporal-memory")
    assert embedded_server.embedded_cluster_dir(Path("/srv/bot/data")) == Path("/srv/bot/data/pg")
