"""A setting the bot cannot work with ends the start in one line and exit code 1, before the
database starts and without a traceback; a weak token is warned about and the bot starts."""

from __future__ import annotations

import pytest

from tests.plugin.wire import ExitedBot, run_bot_until_exit


@pytest.fixture(autouse=True)
def _plugin_loaded_first(plugin: object) -> None:
    """The plugin's modules import only once NoneBot has loaded the plugin."""


def refusal_line(exited: ExitedBot, *, before_the_database: bool = True) -> str:
    """The one refusal line of a start that must have failed cleanly."""
    assert exited.returncode == 1, exited.log
    assert "Traceback" not in exited.log, exited.log
    assert not exited.database_left_running, exited.log
    if before_the_database:
        assert not exited.database_started, exited.log
    [line] = [line for line in exited.log.splitlines() if "refuses to start" in line]
    assert "[ERROR]" in line and "拒绝启动" in line
    return line


# ----------------------------------------------------------------------------- the access token


@pytest.mark.parametrize(
    "token",
    ["自己想一个令牌", "上面生成的令牌", "令牌abcdefghijklmn", "wire-test-token-é",
     " padded-token-123", "tab\ttoken-12345"],
)  # fmt: skip
def test_a_token_no_http_header_can_carry_is_refused(token: str) -> None:
    from nonebot_plugin_temporal_memory.startup_checks import ConfigRefusal, check_access_token

    with pytest.raises(ConfigRefusal, match="ONEBOT_ACCESS_TOKEN contains non-ASCII"):
        check_access_token(token)


@pytest.mark.parametrize(
    "token",
    ["changeme", "CHANGE_ME", "your_token", "your-secret-token", "xxx", "xxxxxxxxxxxxxxxx",
     "choose-a-token", "the-same-token", "the-token-printed-above", "<token>", "123456"],
)  # fmt: skip
def test_a_placeholder_token_is_refused(token: str) -> None:
    from nonebot_plugin_temporal_memory.startup_checks import ConfigRefusal, check_access_token

    with pytest.raises(ConfigRefusal, match="still an example placeholder") as refused:
        check_access_token(token)
    assert token not in str(refused.value)  # a token is never logged, even a poor one


def test_a_short_token_is_warned_about_and_a_good_one_passes() -> None:
    from nonebot_plugin_temporal_memory.startup_checks import check_access_token

    [warning] = check_access_token("k7Qz9")
    assert "shorter than 12 characters" in warning and "k7Qz9" not in warning
    assert check_access_token("3f9c2a71be04d5e8") == []
    assert check_access_token(None) == [] and check_access_token("") == []


async def test_the_quick_starts_placeholder_token_ends_the_start_in_one_line() -> None:
    # Copied as is, it used to start fine and then refuse every client.
    exited = await run_bot_until_exit(extra_env={"ONEBOT_ACCESS_TOKEN": "自己想一个令牌"})
    line = refusal_line(exited)
    assert "ONEBOT_ACCESS_TOKEN" in line and "non-ASCII" in line and "secrets.token_hex" in line


async def test_an_ascii_placeholder_token_ends_the_start_in_one_line() -> None:
    exited = await run_bot_until_exit(extra_env={"ONEBOT_ACCESS_TOKEN": "changeme"})
    assert "ONEBOT_ACCESS_TOKEN is still an example placeholder" in refusal_line(exited)


async def test_a_removed_key_and_a_misspelt_one_are_named_once_before_the_start_goes_on() -> None:
    # Set in the environment alone, which NoneBot does not hand over; the placeholder token
    # ends the start right after, so no database is started for this.
    exited = await run_bot_until_exit(
        extra_env={
            "ONEBOT_ACCESS_TOKEN": "changeme",
            "MEMORY_FUSION": "rrf",
            "MEMORY_TOPN": "3",
            "BOT_NAME": "小诗",
        }
    )
    refusal_line(exited)
    [line] = [line for line in exited.log.splitlines() if "settings ignored" in line]
    assert "[WARNING]" in line
    assert line.endswith(
        "TemporalMemory: settings ignored, no setting reads them: MEMORY_FUSION (removed), "
        "MEMORY_TOPN (no such setting)"
    )


# ----------------------------------------------------------------------------- other settings


async def test_invalid_settings_of_the_plugin_and_the_core_are_named_in_one_line() -> None:
    exited = await run_bot_until_exit(
        extra_env={
            "ONEBOT_ACCESS_TOKEN": "3f9c2a71be04d5e8",
            "MEMORY_TOP_N": "abc",
            "BOT_RECORD_UNADDRESSED": "maybe",
        }
    )
    line = refusal_line(exited)
    assert "MEMORY_TOP_N: Input should be a valid integer" in line
    assert "BOT_RECORD_UNADDRESSED: Input should be a valid boolean" in line
    assert "Failed to import" not in exited.log  # the console did not fail on it first


async def test_an_invalid_nonebot_setting_is_named_in_one_line() -> None:
    exited = await run_bot_until_exit(extra_env={"PORT": "abc"})
    assert "PORT: Input should be a valid integer" in refusal_line(exited)


async def test_an_unknown_time_zone_is_named_in_one_line() -> None:
    exited = await run_bot_until_exit(extra_env={"MEMORY_TIMEZONE": "Mars/Olympus"})
    assert "MEMORY_TIMEZONE: 'Mars/Olympus' is not a time zone" in refusal_line(exited)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"EMBEDDING_DIM": "1024"}, "EMBEDDING_DIM=1024 does not fit EMBEDDING_PROVIDER=local"),
        ({"LLM_MODEL": "some-model", "LLM_BASE_URL": "notaurl"}, "LLM_BASE_URL must be http(s)"),
    ],
    ids=["embedding-dim", "llm-base-url"],
)
async def test_a_setting_refused_while_the_memory_opens_ends_the_start_in_one_line(
    env: dict[str, str], named: str
) -> None:
    exited = await run_bot_until_exit(extra_env={"ONEBOT_ACCESS_TOKEN": "3f9c2a71be04d5e8", **env})
    # Found once the database server was up: it is stopped again before the process ends.
    assert named in refusal_line(exited, before_the_database=False)


# ----------------------------------------------------------------------------- the MCP token


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("3f9c2a71be04d5e", "is shorter than 16 characters"),
        ("your-mcp-token-goes-here", "is still an example placeholder"),
        ("x" * 20, "is still an example placeholder"),
        ("令牌令牌令牌令牌令牌令牌令牌令牌", "non-ASCII"),
        ("3f9c2a71be04d5e8a1\t", "non-ASCII, blank or control"),
    ],
)
def test_an_mcp_token_that_is_short_or_never_chosen_is_refused(token: str, why: str) -> None:
    from nonebot_plugin_temporal_memory.startup_checks import ConfigRefusal, check_mcp_token

    with pytest.raises(ConfigRefusal) as refused:
        check_mcp_token(token)
    assert why in str(refusal := refused.value) and "MEMORY_MCP_TOKEN" in str(refusal)
    assert token not in str(refusal)


def test_no_mcp_token_or_a_chosen_one_passes() -> None:
    from nonebot_plugin_temporal_memory.startup_checks import check_mcp_token

    for token in (None, "", "3f9c2a71be04d5e8"):
        check_mcp_token(token)
