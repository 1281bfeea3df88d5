"""What the bot's HTTP server allows a client: uvicorn's options, for ``nonebot.run``.

The project's ``bot.py`` passes them (``nonebot.run(**server_options(driver.config))``); a NoneBot
project of your own can do the same. uvicorn's defaults were too generous for a bot on a small
server:

* **WebSocket messages** up to 16 MiB: ten 15 MiB frames from the token holder took the bot
  from 390 to 939 MB. What a OneBot client sends is far smaller: events carry a picture as a
  URL and a forwarded chat as its id (NapCat, go-cqhttp, Lagrange, LLOneBot); the largest are
  a long text (QQ caps one at some tens of KB) and API answers such as ``get_forward_msg``
  (a few hundred bytes a message, so ``WS_MAX_BYTES`` holds thousands). Pictures the bot
  sends as base64 go the other way and are not limited here. An oversized message is refused
  while its frame header is read, before the payload is buffered: the connection closes with
  1009 and the client reconnects.
* **Request headers** with no time limit: a client sending its headers a byte at a time held its
  connection for ever. ``HEADER_SECONDS`` after a connection opens, or after a request begins on
  a kept-alive one, a request whose headers are incomplete is cut off. Between requests a
  connection lives ``IDLE_SECONDS``.
* **Forwarded addresses** trusted from loopback: any local process could claim any address in
  ``X-Forwarded-For`` (the console's login limit counts per address), and behind a proxy that
  did not set it every client was 127.0.0.1. Now the headers are read only from the proxies
  named in ``FORWARDED_ALLOW_IPS`` (the proxy recipe in ``docs/reverse-proxy.md``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

WS_MAX_BYTES = 4 * 1024 * 1024
HEADER_SECONDS = 10.0
IDLE_SECONDS = 5  # uvicorn's keep-alive default, stated


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools, what uvicorn picks when it is installed, as
    ``uvicorn[standard]`` does), closing a connection whose request headers are not complete
    ``HEADER_SECONDS`` after it opened or after the request's first byte."""

    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def _start_header_timer(self) -> None:
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_too_slow)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def server_options(config: Any) -> dict[str, Any]:
    """uvicorn's options for ``nonebot.run``. ``FORWARDED_ALLOW_IPS`` (NoneBot's ``config``, read
    from ``.env.prod``, or the environment, where uvicorn itself looks) names the proxies whose
    ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are believed; unset, none."""
    proxies = getattr(config, "forwarded_allow_ips", None) or os.environ.get("FORWARDED_ALLOW_IPS")
    options: dict[str, Any] = {
        "http": HeaderTimeoutProtocol,
        "timeout_keep_alive": IDLE_SECONDS,
        "ws_max_size": WS_MAX_BYTES,
        "proxy_headers": bool(proxies),
    }
    if proxies:
        options["forwarded_allow_ips"] = proxies
    return options
