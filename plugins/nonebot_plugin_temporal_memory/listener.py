"""Where the bot listens for its QQ client, and who may connect there.

``check_listener`` runs at start-up, before the database opens: it refuses a listen address
other machines can reach when no ``ONEBOT_ACCESS_TOKEN`` is set, and otherwise logs the
one line an operator needs — the WebSocket address for NapCat, whether it takes a token, and
whether events over HTTP POST are accepted (only with ``ONEBOT_SECRET``, see
``http_event_guard``). Under uvicorn (NoneBot's FastAPI driver) that line comes right after
uvicorn's ``Uvicorn running on …``, so it is the last line of the start-up, where the operator
looks, not some sixty lines above it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any

from nonebot import get_plugin_config
from nonebot.adapters.onebot.v11.config import Config as OneBotConfig
from nonebot.drivers import ASGIMixin, Driver
from nonebot.log import logger

from .startup_checks import ConfigRefusal

WS_PATH = "/onebot/v11/ws"
SERVER_STARTED = "Uvicorn running on"
"""The start of uvicorn's last start-up line (``uvicorn.error``)."""


class UnsafeListenerError(ConfigRefusal):
    """The bot would listen beyond loopback with no access token."""


def _ip(host: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(str(host).strip().strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback(host: Any) -> bool:
    """Whether ``host`` (NoneBot's ``HOST``) is reachable from this machine only."""
    if str(host).strip().lower() == "localhost":
        return True
    address = _ip(host)
    return address is not None and address.is_loopback  # a host name may resolve to anything


def websocket_url(host: Any, port: int) -> str:
    text = str(host)
    if ":" in text and not text.startswith("["):
        text = f"[{text}]"  # an IPv6 address in a URL
    return f"ws://{text}:{port}{WS_PATH}"


def check_listener(driver: Driver) -> None:
    """Refuse to start on a non-loopback ``HOST`` without a token; else log how to connect.

    Raises ``UnsafeListenerError``, whose text is the line to log (``startup_checks``).
    """
    if not isinstance(driver, ASGIMixin):
        logger.info("TemporalMemory OneBot: no server (the driver only dials out)")
        return
    host, port = driver.config.host, driver.config.port
    onebot = get_plugin_config(OneBotConfig)
    if not onebot.onebot_access_token and not is_loopback(host):
        raise UnsafeListenerError(
            f"TemporalMemory 拒绝启动：HOST={host} 允许其他机器连接，但没有设置 "
            "ONEBOT_ACCESS_TOKEN；请设置令牌（NapCat 里填同一个），或 QQ 客户端在本机时用 "
            f"HOST=127.0.0.1 / TemporalMemory refuses to start: HOST={host} lets other "
            f"machines connect, but ONEBOT_ACCESS_TOKEN is empty, so anyone reaching port {port} "
            "could act as the QQ client. Set ONEBOT_ACCESS_TOKEN (the same token in NapCat), or "
            "HOST=127.0.0.1 when the client runs on this machine."
        )
    token = "access token required" if onebot.onebot_access_token else "no access token"
    address = _ip(host)
    where = (
        f" ({host} means every interface: use this machine's address)"
        if address is not None and address.is_unspecified
        else ""
    )
    posts = (
        "accepted only when signed with ONEBOT_SECRET"
        if onebot.onebot_secret
        else "refused (set ONEBOT_SECRET to accept signed ones)"
    )
    line = (
        f"TemporalMemory OneBot: connect NapCat's WebSocket client to {websocket_url(host, port)}"
        f"{where}, {token}; HTTP POST events {posts}"
    )
    if "fastapi" in driver.type.split("+"):  # e.g. "fastapi+websockets"
        logging.getLogger("uvicorn.error").addFilter(LogAfterServerStarted(line))
    else:
        logger.info(line)


class LogAfterServerStarted(logging.Filter):
    """Logs ``line`` once, just after uvicorn's ``Uvicorn running on …`` line.

    A filter sees the record before it is written, so the line is logged on the event loop's
    next turn (uvicorn logs it from its running loop): after it, and before any connection
    the new server accepts is handled."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith(SERVER_STARTED):
            logging.getLogger(record.name).removeFilter(self)
            try:
                asyncio.get_running_loop().call_soon(self.say)
            except RuntimeError:  # not from a running loop: say it now
                self.say()
        return True

    def say(self) -> None:
        logger.info(self.line)  # from here, so the line names this module
