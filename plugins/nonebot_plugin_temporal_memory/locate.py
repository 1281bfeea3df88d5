"""Where the QQ client keeps a picture whose segment names no URL: its ``get_image``, asked only
when the core's ``PictureReader`` reads the picture (a fresh message's, or a stored turn's on a
retry, by the bot account that received it)."""

from __future__ import annotations

from nonebot import get_bots
from nonebot.adapters.onebot.v11 import ActionFailed, Bot, NetworkError
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.log import logger

from memory_core import Locate


def locate_with(bot: Bot, file: str) -> Locate:
    """Ask ``bot``'s client where the picture named ``file`` is: a URL or ``base64://``."""

    async def locate() -> str | None:
        try:
            info = await bot.get_image(file=file)
        except (ActionFailed, NetworkError, ApiNotAvailable) as exc:
            logger.debug(f"get_image of {file} failed: {exc!r}")
            return None
        if not isinstance(info, dict):
            return None
        url = str(info.get("url") or "")
        if url.startswith(("http://", "https://")):
            return url
        encoded = str(info.get("base64") or "")
        return f"base64://{encoded}" if encoded else None

    return locate


def stored_locator(self_id: int | None, file: str) -> Locate | None:
    """The same for a stored turn's picture: asked of the account that received it, when it is
    connected (a picture's name means nothing to another account's client)."""
    bot = get_bots().get(str(self_id)) if self_id is not None else None
    return locate_with(bot, file) if isinstance(bot, Bot) else None
