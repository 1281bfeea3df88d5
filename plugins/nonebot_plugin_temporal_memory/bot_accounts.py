"""Each QQ bot account its own memory (``memory_core.accounts``): every event is handled in its
bot's namespace, and the first account ever seen on the database adopts the memory stored before
(the core says so in the log, once).

The first account is learned at the first event of any bot (one query, then never again in this
process), not in ``on_bot_connect``: an event also comes when the database was away at the
connect, and the account is asked again then. The namespace is set in each matcher's handler,
not in a NoneBot hook: NoneBot runs preprocessors and dependencies as tasks of their own, whose
context variables never reach the handler.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nonebot.adapters import Bot
from nonebot.log import logger

from memory_core import MemoryCoreError, serving_account

from .runtime import Runtime


@asynccontextmanager
async def serving_bot(bot: Bot, runtime: Runtime) -> AsyncIterator[None]:
    """Handle the block in ``bot``'s memory. While the first account cannot be learned (the
    database is away), its namespace is not decided: what the block stores or forgets gets it
    from ``bot.self_id`` when it is written (``memory_core.accounts``)."""
    self_id = int(bot.self_id) if bot.self_id.isdigit() else None
    accounts = runtime.memory.parts.accounts
    if accounts.first is None and self_id is not None:
        try:
            await runtime.memory.parts.writer.adopt_account(self_id)
        except MemoryCoreError as exc:
            logger.warning(f"QQ account {self_id}: whose memory is whose is not known yet: {exc}")
    with serving_account(accounts.namespace(self_id), self_id):
        yield
