"""nonebug set-up for the plugin: NoneBot initialised once, the plugin loaded once, and a fresh
runtime (real memory on the embedded PostgreSQL + a recording chat model) per test.

NoneBot's start-up hooks are not run here (the plugin's would open a memory from `.env.prod`);
each test gets its runtime from the ``runtime`` fixture instead. The wire tests start the real
``bot.py`` in a subprocess and need none of this.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nonebug import NONEBOT_INIT_KWARGS, NONEBOT_START_LIFESPAN

from tests.fakes import RecordingModel
from tests.plugin import wire
from tests.plugin.events import SUPERUSER_ID


def pytest_configure(config: pytest.Config) -> None:
    config.stash[NONEBOT_INIT_KWARGS] = {
        "driver": "~fastapi",
        "superusers": {str(SUPERUSER_ID)},
        "nickname": {"小诗"},
        "command_start": {"/", "／", "、"},  # as .env.prod sets them
        "log_level": "WARNING",
    }
    config.stash[NONEBOT_START_LIFESPAN] = False


@pytest.fixture(scope="session", autouse=True)
def _bots_start_from_one_cluster() -> Iterator[None]:
    """The wire tests' bots start from a copy of one migrated cluster (``wire.ClusterTemplate``),
    made when the first of them starts."""
    wire.CLUSTER_TEMPLATE = wire.ClusterTemplate()
    try:
        yield
    finally:
        wire.CLUSTER_TEMPLATE.remove()
        wire.CLUSTER_TEMPLATE = None


@pytest.fixture(scope="session")
def plugin(nonebug_init: None) -> Any:
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter

    driver = nonebot.get_driver()
    if "OneBot V11" not in driver._adapters:
        driver.register_adapter(Adapter)
    loaded = nonebot.load_plugin("nonebot_plugin_temporal_memory")
    assert loaded is not None
    return loaded


@pytest.fixture
def model() -> RecordingModel:
    return RecordingModel()


@pytest.fixture
async def runtime(plugin: Any, memory_factory: Any, model: RecordingModel) -> AsyncIterator[Any]:
    from memory_core.conversation.engine import ConversationEngine
    from nonebot_plugin_temporal_memory import intake
    from nonebot_plugin_temporal_memory import runtime as runtime_module
    from nonebot_plugin_temporal_memory.commands import forget, self_service
    from nonebot_plugin_temporal_memory.config import Config

    memory = await memory_factory()
    engine = ConversationEngine(parts=memory.parts, chat_model=model, bot_name="小诗")
    built = runtime_module.Runtime(
        settings=memory.parts.settings,
        config=Config(bot_resolve_at_names=False, bot_resolve_group_names=False),
        memory=memory,
        engine=engine,
        chat_model=model,
        bot_name="小诗",
    )
    runtime_module._Holder.runtime = built
    intake.recent_messages.clear()
    forget.confirmations.pending.clear()
    self_service.listings.shown.clear()
    yield built
    runtime_module._Holder.runtime = None


@pytest.fixture(scope="module")
async def console_wire(
    pg_server_dsn: str, migrated_template: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Any]:
    """The real bot with its console on, over a seeded database (``console_bot``), one per
    test module."""
    from tests.plugin.console_bot import console_bot

    async with console_bot(
        pg_server_dsn, migrated_template, tmp_path_factory.mktemp("console")
    ) as bot:
        yield bot
