"""The plugin's resources: opened in ``driver.on_startup``, closed in ``on_shutdown``."""

import logging
import os
import signal
import threading
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Annotated

from nonebot import get_driver, get_plugin_config
from nonebot.adapters.onebot.v11.config import Config as OneBotConfig
from nonebot.log import LoguruHandler, logger
from nonebot.params import Depends
from nonebot_plugin_localstore import get_plugin_data_dir
from pydantic import ValidationError

import memory_core
from memory_core import (
    ChatModel,
    ConfigError,
    ConversationEngine,
    MemorySettings,
    PictureReader,
    PicturesOff,
    TemporalMemory,
    open_chat_bot,
    unknown_settings,
)

from .config import Config, bot_name_from, memory_settings_from_config
from .listener import check_listener
from .locate import stored_locator
from .startup_checks import (
    ConfigRefusal,
    check_access_token,
    check_mcp_token,
    end_start_up,
    settings_refusal,
)


class Runtime:
    """Everything a handler needs, built once at start-up.

    A plain class on purpose: NoneBot checks a dependency's value against its annotation with
    pydantic, which would try to build a schema for a dataclass's fields.
    """

    def __init__(
        self,
        *,
        settings: MemorySettings,
        config: Config,
        memory: TemporalMemory,
        engine: ConversationEngine,
        chat_model: ChatModel | None,
        bot_name: str,
        pictures: PictureReader | PicturesOff | None = None,
    ) -> None:
        self.settings = settings
        self.pictures = pictures if pictures is not None else PicturesOff()
        self.config = config
        self.memory = memory
        self.engine = engine
        self.chat_model = chat_model
        self.bot_name = bot_name
        self.started_at = datetime.now(timezone.utc)  # the uptime /memstat shows


class _Holder:
    runtime: Runtime | None = None


driver = get_driver()

# Named in the start-up log: which installed copy runs (a wheel in site-packages, or a checkout).
PLUGIN_DIR = Path(__file__).resolve().parent
CORE_DIR = Path(memory_core.__path__[0]).resolve()


def _exit_normally(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def exit_normally_on_sigterm() -> None:
    """Let SIGTERM end the process normally, so the embedded PostgreSQL stops with it.

    The embedded server is stopped by an exit hook (``atexit``). On SIGTERM uvicorn shuts NoneBot
    down gracefully, then raises the signal again under the handler it found when it started;
    the default one kills the process before exit hooks run and leaves ``postgres`` running,
    orphaned. So this must happen while the plugin loads, before ``nonebot.run()``; a handler
    the project set itself is left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_normally)


def show_core_logs() -> None:
    """Show the core's log (stdlib ``logging``: migrations, purges, index builds, outages) in
    NoneBot's, at INFO, unless the project already configured the ``memory_core`` logger."""
    core_log = logging.getLogger("memory_core")
    if not core_log.handlers:
        core_log.addHandler(LoguruHandler())
        core_log.setLevel(logging.INFO)


exit_normally_on_sigterm()
show_core_logs()


class RuntimeNotReady(RuntimeError):
    """A handler ran before start-up finished (or after shutdown)."""


def get_runtime() -> Runtime:
    """The open runtime; handlers take it as a ``RuntimeDep`` parameter."""
    if _Holder.runtime is None:
        raise RuntimeNotReady("temporal_memory is not started")
    return _Holder.runtime


async def runtime_dependency() -> Runtime:
    """``get_runtime`` for NoneBot's dependency injection, as a coroutine: NoneBot runs a plain
    function dependency in a worker thread, a thread hop on every message handled."""
    return get_runtime()


RuntimeDep = Annotated[Runtime, Depends(runtime_dependency)]
"""Handler parameter type that receives the open runtime."""


def checked_configuration() -> tuple[Config, MemorySettings]:
    """The plugin's and the core's settings, once every start-up check passed; raises
    ``ConfigRefusal`` with the one line to log otherwise (``startup_checks``)."""
    invalid: list[ValidationError | ConfigError] = []
    try:
        config = get_plugin_config(Config)
    except ValidationError as exc:
        invalid.append(exc)
    try:
        # Without MEMORY_DATA_DIR: localstore's folder for this plugin
        # (~/.local/share/nonebot2/...). Run as root that is under /root, and the core then
        # keeps the embedded PostgreSQL cluster out of it (embedded_cluster_dir).
        settings = memory_settings_from_config(
            driver.config.model_dump(), default_data_dir=get_plugin_data_dir
        )
    except ConfigError as exc:
        invalid.append(exc)
    if invalid:
        raise settings_refusal(*invalid)
    # NoneBot hands over only the keys of its .env files; one set in the environment alone is
    # read from there (a removed key left in a service file is as ignored as one in .env.prod).
    keys = [*driver.config.model_dump(), *os.environ]
    if (ignored := unknown_settings(keys, others=Config.model_fields)) is not None:
        logger.warning(f"TemporalMemory: {ignored}")
    for warning in check_access_token(get_plugin_config(OneBotConfig).onebot_access_token):
        logger.warning(warning)
    mcp_token = config.memory_mcp_token
    check_mcp_token(mcp_token.get_secret_value() if mcp_token else None)
    check_listener(driver)  # last: it logs where to connect once nothing refuses the start
    return config, settings


@driver.on_startup
async def open_runtime() -> None:
    # First, before the database server starts: a setting that cannot work ends the start.
    try:
        config, settings = checked_configuration()
    except ConfigRefusal as refusal:
        await end_start_up(refusal)
    bot_name = bot_name_from(config.bot_name, driver.config.nickname)
    # An unreachable database is not fatal: turns are spooled and written once it is back.
    try:
        bot = await open_chat_bot(settings, bot_name=bot_name, locate_stored=stored_locator)
    except ConfigError as exc:  # e.g. EMBEDDING_DIM against the model, LLM_BASE_URL no URL
        await end_start_up(settings_refusal(exc))
    memory, chat_model = bot.memory, bot.chat_model
    _Holder.runtime = Runtime(
        settings=settings,
        config=config,
        memory=memory,
        engine=bot.engine,
        chat_model=chat_model,
        bot_name=bot_name,
        pictures=bot.pictures,
    )
    logger.info(f"TemporalMemory plugin from {PLUGIN_DIR}, core from {CORE_DIR}")
    logger.info(f"TemporalMemory data directory: {settings.memory_data_dir.resolve()}")
    logger.info(f"TemporalMemory database: {memory.database_description}")
    logger.info(
        f"TemporalMemory embeddings: {memory.parts.embedder.model} ({memory.parts.embedder.dim}-d, "
        f"{settings.embedding_provider})"
    )
    logger.info(
        f"TemporalMemory vector index: MEMORY_VECTOR_INDEX={settings.memory_vector_index}, "
        f"{len(memory.parts.vector_index.indexed)} session(s) indexed; sessions up to "
        f"{settings.memory_exact_search_max_rows} turns are searched exactly"
    )
    if chat_model is None:
        logger.warning(
            "TemporalMemory: no chat model configured (LLM_MODEL is empty). The bot records, "
            "recalls and answers its commands, but chat replies only say that chat is not set up."
        )
    else:
        logger.info(f"TemporalMemory chat model: {settings.llm_model} at {settings.llm_base_url}")
    logger.info(
        "TemporalMemory pictures: "
        + (
            f"text read offline, {settings.memory_image_workers} at a time, at most "
            f"{settings.memory_image_per_minute} a minute"
            + (f"; described by {settings.vision_model}" if settings.vision_model else "")
            if settings.memory_image_enabled
            else "not read (MEMORY_IMAGE_ENABLED=false)"
        )
    )
    logger.info(f"TemporalMemory bot name: {bot_name}; timezone: {settings.memory_timezone}")
    if not driver.config.superusers:
        logger.warning(
            "TemporalMemory: SUPERUSERS is empty, so /memstat, /forget for others and every other "
            'admin command are refused; set SUPERUSERS=["your QQ number"] in .env.prod'
        )


@driver.on_shutdown
async def close_runtime() -> None:
    runtime, _Holder.runtime = _Holder.runtime, None
    if runtime is None:
        return
    if runtime.chat_model is not None:
        await runtime.chat_model.aclose()
    await runtime.pictures.aclose()
    await runtime.memory.aclose()
