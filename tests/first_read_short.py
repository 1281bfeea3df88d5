"""An httpx transport that times out only the first attempt, however loaded the machine.

A test of "the first attempt times out, the retry's answer is used" cannot give both attempts
one short read timeout: the retry's answer then has to beat that timer, which a busy CI machine
does not promise. This transport gives the first request a short read timeout (the stand-in
server never answers it, so it is surely hit) and every later request the client's own long
one. The timeout is httpx's real one, raised by the real transport.
"""

from __future__ import annotations

import httpx


class FirstReadShort(httpx.AsyncBaseTransport):
    """Sends every request through a real transport; the first with a ``read`` s read timeout."""

    def __init__(self, read: float = 0.2) -> None:
        self._real = httpx.AsyncHTTPTransport()
        self._read = read
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        if self.sent == 1:
            timeouts = dict(request.extensions.get("timeout", {}))
            timeouts["read"] = self._read
            request.extensions = {**request.extensions, "timeout": timeouts}
        return await self._real.handle_async_request(request)

    async def aclose(self) -> None:
        await self._real.aclose()
