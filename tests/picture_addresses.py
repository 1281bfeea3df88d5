"""A public-looking name for the tests' loopback picture servers, and a server that redirects.

The fetcher refuses every loopback address, so the tests reach their loopback servers as
``pictures.example`` (a name no resolver knows, RFC 2606): their fetcher resolves it to
``127.0.0.1`` and allows it by name, as an operator's ``MEMORY_IMAGE_ALLOWED_HOSTS`` would. Every
other name and address goes through the real resolver and the real checks."""

from __future__ import annotations

import ipaddress
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memory_core.pictures.fetch import Address, PictureFetcher, resolved
from tests.picture_server import PictureServer

PUBLIC_HOST = "pictures.example"
LOOPBACK = ipaddress.IPv4Address("127.0.0.1")


async def resolve_public_host(host: str, port: int) -> list[Address]:
    """``PUBLIC_HOST`` on loopback; any other host as the system resolves it."""
    if host == PUBLIC_HOST:
        return [LOOPBACK]
    return await resolved(host, port)


def public_fetcher(**options: Any) -> PictureFetcher:
    """A fetcher that reaches ``PUBLIC_HOST`` (and nothing else on this machine)."""
    options.setdefault("max_bytes", 100_000)
    options.setdefault("timeout", 30.0)
    options.setdefault("max_redirects", 3)
    return PictureFetcher(allowed_hosts={PUBLIC_HOST}, resolve=resolve_public_host, **options)


class PublicPictureServer(PictureServer):
    """A ``PictureServer`` whose ``url`` names it as ``PUBLIC_HOST``."""

    def url(self, path: str) -> str:
        return f"http://{PUBLIC_HOST}:{self.port}{path}"

    def loopback_url(self, path: str, host: str = "127.0.0.1") -> str:
        """The same path through a loopback spelling ``host`` (IPv6 in brackets)."""
        return f"http://{host}:{self.port}{path}"

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


class RedirectServer:
    """Answers every request with a 302 to ``to``; ``hits`` counts them."""

    def __init__(self, to: str) -> None:
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                outer.hits += 1
                self.send_response(302)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def url(self, path: str = "/") -> str:
        return f"http://{PUBLIC_HOST}:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
