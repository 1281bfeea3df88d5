"""Fetching a picture the QQ client names, within a size cap, a deadline and a few redirects,
from the public internet only.

QQ's picture CDN answers a message's ``url`` directly or after a redirect or two; anything
larger than ``MAX_BYTES`` is refused from its ``Content-Length`` before the body is
read, and a body without one is read only until it passes the cap. ``base64://`` (what a OneBot
client's ``get_image`` may return) is decoded within the same cap; nothing else but ``http(s)``
is fetched (no ``file://``: a sender must not make the bot read its own disk). Only the bytes'
first few are trusted to say what they are: a body that is no PNG, JPEG, GIF, WebP or BMP is
refused.

A message's URL is the sender's to choose, so each hop (the first and every redirect, followed
here, not by httpx) has its host resolved once, every address it resolves to checked
(:func:`refusal`: no loopback, private, shared, link-local, multicast, unspecified or reserved
address, none of this machine's own), and the connection made to that checked address, with the
URL's host kept in the ``Host`` header and as the TLS server name (the certificate is verified
against it). A name that resolves to a public address when checked and to ``127.0.0.1`` a moment
later thus cannot reach the bot's console. Hosts listed in ``MEMORY_IMAGE_ALLOWED_HOSTS`` (a
picture server on the operator's own network) skip the check.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Collection
from urllib.parse import urljoin

import httpx
import psutil

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
_DEFAULT_PORTS = {"http": 80, "https": 443}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolve = Callable[[str, int], Awaitable[list[Address]]]
"""The addresses a host name (ASCII, IDNA-encoded) and port resolve to."""

# Networks whose addresses stand for IPv4 ones (RFC 6052 NAT64; 6to4 and IPv4-mapped are
# unwrapped by ``ipaddress`` itself): checked as the IPv4 address they carry.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)


def looks_like_picture(head: bytes) -> bool:
    """Whether ``head`` starts like a PNG, JPEG, GIF, WebP or BMP file."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return True
    return any(head.startswith(magic) for magic in _MAGIC)


def _carried(address: Address) -> Address:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, NAT64), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def own_addresses() -> set[Address]:
    """This machine's addresses, on every interface (the bot may listen on any of them)."""
    found: set[Address] = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    found.add(ipaddress.ip_address(entry.address.split("%", 1)[0]))
                except ValueError:
                    continue
    return found


def refusal(address: Address, own: Collection[Address] = ()) -> str | None:
    """Why a picture may not be fetched from ``address`` (``None``: it may): only the public
    internet, never this machine (``own``) or the networks around it."""
    carried = _carried(address)
    for candidate in (carried, address):
        if candidate.is_loopback:
            return "loopback"
        if candidate.is_unspecified:
            return "unspecified"
        if candidate.is_link_local:
            return "link-local"
        if candidate.is_multicast:
            return "multicast"
        if isinstance(candidate, ipaddress.IPv4Address) and candidate in _SHARED:
            return "shared (carrier-grade NAT)"
        if candidate.is_reserved:
            return "reserved"
        if candidate.is_private:
            return "private"
        if not candidate.is_global:
            return "reserved"
        if candidate in own:
            return "this machine's own"
    return None


async def resolved(host: str, port: int) -> list[Address]:
    """``host``'s addresses from the system's resolver (a literal address in any spelling
    ``inet_aton`` takes, ``2130706433`` or ``127.1``, is its own answer)."""
    loop = asyncio.get_running_loop()
    try:
        found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise PictureError(f"picture host {host!r} not found: {exc}", lasting=False) from exc
    # An IPv6 link-local answer carries its interface (``fe80::1%eth0``).
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]


# The bot's bounds on one picture, settings until 2026-12-07 that no operator changed: a cap
# well above a chat photo, a deadline a slow CDN meets, and room for QQ's picture CDN, which
# redirects once or twice (bench/RESULTS.md, "Pictures remembered").
MAX_BYTES = 5_000_000
TIMEOUT = 10.0
MAX_REDIRECTS = 3


class PictureFetcher:
    """One HTTP client for every picture, closed with :meth:`aclose`. ``allowed_hosts``: host
    names (or literal addresses) fetched from whatever they resolve to; ``resolve``: how a
    host is resolved (tests name a public-looking host on their loopback server)."""

    def __init__(
        self,
        *,
        max_bytes: int = MAX_BYTES,
        timeout: float = TIMEOUT,
        max_redirects: int = MAX_REDIRECTS,
        allowed_hosts: Collection[str] = (),
        resolve: Resolve = resolved,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.max_redirects = max_redirects
        self._allowed = frozenset(host.strip("[]").lower() for host in allowed_hosts)
        self._resolve = resolve
        # Redirects are followed by hand: to count them, to refuse one to another scheme, and
        # to check where each one leads before connecting.
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
            try:
                target = httpx.URL(url)
            except httpx.InvalidURL as exc:
                raise PictureError(f"not a picture address: {exc}") from exc
            if target.scheme not in _DEFAULT_PORTS or not target.raw_host:
                raise PictureError(f"picture address is not http(s): {target.scheme!r}")
            host = target.raw_host.decode("ascii")
            address = await self._address(host, target.port or _DEFAULT_PORTS[target.scheme])
            # Connect to the address checked, not to whatever the name resolves to next.
            extensions = {"sni_hostname": host} if target.scheme == "https" else {}
            async with self._client.stream(
                "GET",
                target.copy_with(host=str(address)),
                headers={"Host": target.netloc.decode("ascii")},
                extensions=extensions,
            ) as response:
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

    async def _address(self, host: str, port: int) -> Address:
        """The address to connect to for ``host``: its first, once all of them are checked."""
        addresses = await self._resolve(host, port)
        if not addresses:
            raise PictureError(f"picture host {host!r} has no address", lasting=False)
        if host.lower() not in self._allowed:
            own = own_addresses()
            for address in addresses:
                reason = refusal(address, own)
                if reason is not None:
                    raise PictureError(f"picture host {host!r} is {reason} ({address})")
        return addresses[0]

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
