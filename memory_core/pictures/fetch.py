"""Fetching a picture the QQ client names, within a size cap, a deadline and a few redirects.

QQ's picture CDN answers a message's ``url`` directly or after a redirect or two; anything
larger than ``MEMORY_IMAGE_MAX_BYTES`` is refused from its ``Content-Length`` before the body is
read, and a body without one is read only until it passes the cap. ``base64://`` (what a OneBot
client's ``get_image`` may return) is decoded within the same cap. Only the bytes' first few
are trusted to say what they are: a body that is no PNG, JPEG, GIF, WebP or BMP is refused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from urllib.parse import urljoin, urlsplit

import httpx

from ..errors import PictureError

REDIRECTS = frozenset({301, 302, 303, 307, 308})
GONE = frozenset({400, 403, 404, 410})
_MAGIC = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",
    b"GIF87a",
    b"GIF89a",
    b"BM",
)


def looks_like_picture(head: bytes) -> bool:
    """Whether ``head`` starts like a PNG, JPEG, GIF, WebP or BMP file."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return True
    return any(head.startswith(magic) for magic in _MAGIC)


class PictureFetcher:
    """One HTTP client for every picture, closed with :meth:`aclose`."""

    def __init__(
        self,
        *,
        max_bytes: int,
        timeout: float,
        max_redirects: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.max_redirects = max_redirects
        # Redirects are followed by hand, to count them and to refuse one to another scheme.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            transport=transport,
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
            headers={"User-Agent": "TemporalMemory pictures"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def fetch(self, url: str) -> bytes:
        """The picture's bytes; ``PictureError`` saying why not (``lasting`` unless trying
        again later could help: a timeout, a server error, a dropped connection)."""
        if url.startswith("base64://"):
            return self._decoded(url[len("base64://") :])
        try:
            return await asyncio.wait_for(self._download(url), self.timeout)
        except asyncio.TimeoutError as exc:
            raise PictureError(f"no picture within {self.timeout:g}s", lasting=False) from exc
        except httpx.HTTPError as exc:
            raise PictureError(f"picture fetch failed: {exc!r}", lasting=False) from exc

    def _decoded(self, text: str) -> bytes:
        if len(text) * 3 // 4 > self.max_bytes:
            raise PictureError(f"picture larger than {self.max_bytes} bytes")
        try:
            data = base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError) as exc:
            raise PictureError("picture is not valid base64") from exc
        return self._checked(data)

    async def _download(self, url: str) -> bytes:
        for _ in range(self.max_redirects + 1):
            if urlsplit(url).scheme not in ("http", "https"):
                raise PictureError(f"picture address is not http(s): {urlsplit(url).scheme!r}")
            async with self._client.stream("GET", url) as response:
                if response.status_code in REDIRECTS and "location" in response.headers:
                    url = urljoin(url, response.headers["location"])
                    continue
                if response.status_code != 200:
                    raise PictureError(
                        f"picture answered HTTP {response.status_code}",
                        lasting=response.status_code in GONE,
                    )
                return self._checked(await self._body(response))
        raise PictureError(f"picture redirected more than {self.max_redirects} times")

    async def _body(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise PictureError(f"picture of {declared} bytes, more than {self.max_bytes}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                raise PictureError(f"picture larger than {self.max_bytes} bytes")
        return bytes(body)

    def _checked(self, data: bytes) -> bytes:
        if len(data) > self.max_bytes:
            raise PictureError(f"picture larger than {self.max_bytes} bytes")
        if not looks_like_picture(data[:16]):
            raise PictureError("the answer is not a picture")
        return data
