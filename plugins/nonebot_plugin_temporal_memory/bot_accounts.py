"""Each QQ bot account its own memory (``memory_core.accounts``): the account connecting is
recorded (the first ever adopts the memory stored before), and every event is handled in its
bot's namespace.

The namespace is set in each matcher's handler, not in a NoneBot hook: NoneBot runs
preprocessors and dependencies as tasks of their own, whose context variables never reach the
handler.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nonebot import get_driver
from nonebot.adapters import Bot as AnyBot
from nonebot.log import logger

from memory_core import serving_account
from memory_core.errors import MemoryCoreError

from .runtime import Runtime, get_runtime

driver = get_driver()


async def adopt(self_id: int, runtime: Runtime) -> bool:
    """Record the account with the database; False (logged) when it cannot be reached."""
    try:
        namespace = await runtime.memory.adopt_account(self_id)
    except MemoryCoreError as exc:
        logger.warning(f"QQ account {self_id}: its memory's owner is not known yet: {exc}")
        return False
    first = runtime.memory.accounts.first
    if runtime.memory.accounts.shared:
        logger.info(f"QQ account {self_id}: one memory with every account (MEMORY_SHARE_ACCOUNTS)")
    elif namespace:
        logger.info(f"QQ account {self_id}: its own memory (the first account is {first})")
    else:
        logger.info(f"QQ account {self_id}: its own memory, with what was stored before it")
    return True


@driver.on_bot_connect
async def record_account(bot: AnyBot) -> None:
    if bot.self_id.isdigit():
        await adopt(int(bot.self_id), get_runtime())


@asynccontextmanager
async def serving_bot(bot: AnyBot, runtime: Runtime) -> AsyncIterator[None]:
    """Handle the block in ``bot``'s memory. When the first account could not be learned at
    the connect (the database was away), it is asked now; still unknown, the unprefixed
    namespace is used: right for a single bot, the usual case."""
    self_id = int(bot.self_id) if bot.self_id.isdigit() else None
    accounts = runtime.memory.accounts
    if accounts.first is None and not accounts.shared and self_id is not None:
        await adopt(self_id, runtime)
    with serving_account(accounts.namespace(self_id)):
        yield
