"""``open_chat_bot`` is a chat front end's one call: the memory, the chat model, the engine over
the memory's parts and the picture reader, or a ``ConfigError`` with nothing left open."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import asyncpg
import pytest

from memory_core import (
    ChatBot,
    ConfigError,
    ConversationEngine,
    MemorySettings,
    PictureReader,
    PicturesOff,
    open_chat_bot,
)
from tests.turns import said


def settings_for(dsn: str, data_dir: Path, **values: object) -> MemorySettings:
    return MemorySettings(
        memory_dsn=dsn,
        memory_data_dir=data_dir,
        memory_image_enabled=False,
        **values,  # type: ignore[arg-type]
    )


async def test_the_bot_records_through_its_engine_and_closes_everything(
    fresh_dsn: str, tmp_data_dir: Path
) -> None:
    bot = await open_chat_bot(settings_for(fresh_dsn, tmp_data_dir), bot_name="小诗")
    try:
        assert isinstance(bot, ChatBot)
        assert bot.chat_model is None  # LLM_MODEL is empty: chat is not set up
        assert isinstance(bot.pictures, PicturesOff)
        assert isinstance(bot.engine, ConversationEngine)
        await bot.memory.parts.writer.add_turn(
            said(10001, "记住我喜欢吃花生", datetime.now(timezone.utc))
        )
    finally:
        await bot.aclose()
    connection = await asyncpg.connect(fresh_dsn)
    try:
        count = await connection.fetchval("SELECT count(*) FROM dialogues")
    finally:
        await connection.close()
    assert count == 1


async def test_a_chat_model_setting_that_cannot_work_refuses_and_leaves_nothing_open(
    fresh_dsn: str, tmp_data_dir: Path
) -> None:
    settings = settings_for(
        fresh_dsn, tmp_data_dir, llm_model="qwen-plus", llm_base_url="not a url"
    )
    with pytest.raises(ConfigError):
        await open_chat_bot(settings, bot_name="小诗")
    # The memory it opened first was closed: its connections are gone from the server.
    connection = await asyncpg.connect(fresh_dsn)
    try:
        others = await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
    finally:
        await connection.close()
    assert others == 0


async def test_the_picture_readers_retries_are_a_step_of_the_memorys_maintenance(
    fresh_dsn: str, tmp_data_dir: Path
) -> None:
    """Started by whatever opens the bot, not by the plugin: the step is in the memory's
    schedule, due at its first round, with the front end's locator for stored pictures."""

    def locate(self_id: int | None, file: str) -> None:
        return None

    settings = settings_for(fresh_dsn, tmp_data_dir).model_copy(
        update={"memory_image_enabled": True}
    )
    bot = await open_chat_bot(settings, bot_name="小诗", locate_stored=locate)
    try:
        assert isinstance(bot.pictures, PictureReader)
        assert bot.pictures.locator is locate
        assert bot.memory.daily.next_run("picture retries") <= datetime.now(timezone.utc)
    finally:
        await bot.aclose()
