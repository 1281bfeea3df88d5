"""Session names from the QQ client for the console: a group member's card or nickname, a
private contact's nickname, a group's name — asked of the connected bot, kept an hour.

A page never waits long for them: what the client has not answered within ``PAGE_BUDGET``
seconds is shown by the name stored with the turns, and the lookup finishes in the
background, so the next page has it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from nonebot import get_bots
from nonebot.adapters.onebot.v11 import ActionFailed, Bot, NetworkError
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.log import logger

from memory_core.console import ChatNames

from ..intake import NameCache, group_names, member_names

PAGE_BUDGET = 0.5
LOOKUP_TIMEOUT = 3.0


def connected_bot() -> Bot | None:
    """The first connected OneBot v11 bot, if any."""
    return next((b for b in get_bots().values() if isinstance(b, Bot)), None)


def connected_accounts() -> list[str]:
    """The QQ accounts (OneBot ``self_id``) connected now, for the overview."""
    return sorted(b.self_id for b in get_bots().values() if isinstance(b, Bot))


class QQNames:
    """``NameLookup`` for ``MemoryConsole``: asks the connected QQ client."""

    def __init__(self) -> None:
        self._contacts = NameCache()
        self._pending: set[asyncio.Task[ChatNames]] = set()

    async def __call__(self, user_id: int, group_id: int | None) -> ChatNames:
        bot = connected_bot()
        if bot is None:
            return ChatNames()
        task = asyncio.ensure_future(self._ask(bot, user_id, group_id))
        self._pending.add(task)  # kept referenced until it ends, answered in time or not
        task.add_done_callback(self._pending.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(task), PAGE_BUDGET)
        except asyncio.TimeoutError:
            return ChatNames()

    async def _ask(self, bot: Bot, user_id: int, group_id: int | None) -> ChatNames:
        if group_id is None:
            return ChatNames(person=await self._contact(bot, user_id))
        person, group = await asyncio.gather(
            member_names.resolve(bot, group_id, [str(user_id)]), group_names.name(bot, group_id)
        )
        return ChatNames(person=person.get(str(user_id)), group=group)

    async def _contact(self, bot: Bot, user_id: int) -> str | None:
        cached = self._contacts.get(user_id)
        if cached is None:
            try:
                info = await asyncio.wait_for(
                    bot.get_stranger_info(user_id=user_id), LOOKUP_TIMEOUT
                )
            except (ActionFailed, NetworkError, ApiNotAvailable, asyncio.TimeoutError) as exc:
                logger.debug(f"nickname of {user_id} unavailable: {exc!r}")
                info = {}
            cached = str(info.get("nickname") or "").strip() if isinstance(info, dict) else ""
            self._contacts.put(user_id, cached)
        return cached or None


qq_names = QQNames()


async def group_titles(group_ids: Iterable[int]) -> dict[int, str]:
    """The names of these groups that the QQ client gives within ``PAGE_BUDGET`` (the rest
    finish in the background, cached for the next page, like ``QQNames``)."""
    bot = connected_bot()
    wanted = list(dict.fromkeys(group_ids))
    if bot is None or not wanted:
        return {}
    asked = asyncio.ensure_future(asyncio.gather(*(group_names.name(bot, g) for g in wanted)))
    try:
        names = await asyncio.wait_for(asyncio.shield(asked), PAGE_BUDGET)
    except asyncio.TimeoutError:
        return {}
    return {g: name for g, name in zip(wanted, names, strict=True) if name}
