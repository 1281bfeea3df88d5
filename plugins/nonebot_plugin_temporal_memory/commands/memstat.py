"""/memstat (记忆统计): the operator's dashboard, to a superuser; asked in a group, it is sent
privately (the figures of every chat are not for every member)."""

import dataclasses
from datetime import datetime, timezone

from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent
from nonebot.log import logger

from memory_core import MemoryCoreError
from memory_core.console import (
    Connection,
    chat_calls_zh,
    connection_of,
    dashboard_zh,
    unavailable_dashboard_zh,
)

from ..intake import group_id_of
from ..messaging import send_text
from ..runtime import Runtime
from .common import NOT_SUPERUSER, is_superuser, reply, send_private_text
from .dispatch import plugin_command

MEMSTAT_SENT_PRIVATELY = "记忆统计已私聊发给你。"
MEMSTAT_NOT_SENT = "记忆统计没能私聊发给你（可先加机器人为好友），为保护数据不在群里公布。"


def bot_connection(runtime: Runtime, *, now: datetime) -> Connection:
    connection = connection_of(
        runtime.memory.parts,
        chat_model=runtime.settings.llm_model if runtime.chat_model is not None else None,
        uptime=now - runtime.started_at,
    )
    return dataclasses.replace(connection, chat_calls=chat_calls_zh(runtime.chat_model))


def now_utc() -> datetime:
    """The clock of /memstat's title and uptime (tests stop it)."""
    return datetime.now(timezone.utc)


async def memstat_text(runtime: Runtime) -> str:
    now = now_utc()
    tz = runtime.memory.parts.tz
    connection = bot_connection(runtime, now=now)
    try:
        stats = await runtime.memory.stats(now)
        distilled = await runtime.memory.distilled_stats(now)
    except MemoryCoreError as exc:
        logger.warning(f"/memstat failed: {exc}")
        return unavailable_dashboard_zh(connection, now=now, tz=tz)
    return dashboard_zh(stats, distilled, connection, now=now, tz=tz)


@plugin_command("memstat", "记忆统计")
async def handle_memstat(bot: Bot, event: MessageEvent, _args: Message, runtime: Runtime) -> None:
    if not await is_superuser(bot, event):
        await reply(bot, event, runtime, NOT_SUPERUSER.format(action="查看记忆统计"))
        return
    text = await memstat_text(runtime)
    if group_id_of(event) is None:
        await reply(bot, event, runtime, text)
        return
    # The operator's figures (model, totals of every chat) are not for every group member.
    max_chars = runtime.settings.chat_reply_max_chars
    sent = await send_private_text(bot, event.user_id, text, max_chars=max_chars)
    note = MEMSTAT_SENT_PRIVATELY if sent else MEMSTAT_NOT_SENT
    await send_text(bot, event, note, max_chars=max_chars, quote=True)
