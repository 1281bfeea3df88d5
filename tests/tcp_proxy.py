"""A loopback TCP proxy to the embedded server's unix socket that tests can switch off and on.

Switching it off closes the listener and every open connection, which is what a database
restart or a network cut looks like to the bot.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from urllib.parse import parse_qs, urlsplit


def unix_socket_of(dsn: str) -> str:
    query = parse_qs(urlsplit(dsn).query)
    port = urlsplit(dsn).port or 5432
    return f"{query['host'][0]}/.s.PGSQL.{port}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SwitchableProxy:
    def __init__(self, unix_path: str) -> None:
        self.unix_path = unix_path
        self.port = free_port()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(self.unix_path)
        self._writers.update({writer, up_writer})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers.difference_update({writer, up_writer})

    def dsn(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
