"""A picture's URL is the sender's to choose: only the public internet is fetched. Every spelling
of this machine, the networks around it and a redirect to them are refused before a connection
is made; a public host is fetched, from the very address its name was checked at."""

from __future__ import annotations

import ipaddress

import pytest

from memory_core.errors import PictureError
from memory_core.pictures.fetch import PictureFetcher, own_addresses, refusal
from tests.picture_addresses import (
    PUBLIC_HOST,
    PublicPictureServer,
    RedirectServer,
    public_fetcher,
)
from tests.picture_server import note_picture

LOOPBACK_SPELLINGS = [
    "localhost",
    "127.0.0.1",
    "2130706433",
    "0x7f000001",
    "0177.0.0.1",
    "127.1",
    "127.0.0.2",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::1]",
    "0.0.0.0",
    "0",
    "[::]",
]


@pytest.fixture
def server():  # type: ignore[no-untyped-def]
    served = PublicPictureServer({"/note.png": note_picture()})
    yield served
    served.close()


async def test_a_public_looking_host_is_fetched_from_the_address_it_was_checked_at(server):
    # No resolver knows PUBLIC_HOST: the picture comes only if the connection goes to the
    # address the fetcher's own resolution gave, not to a second lookup of the name.
    fetcher = public_fetcher()
    try:
        assert await fetcher.fetch(server.url("/note.png")) == note_picture()
    finally:
        await fetcher.aclose()
    assert server.hits["/note.png"] == 1


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
async def test_no_spelling_of_this_machine_is_fetched(server, host):
    fetcher = public_fetcher()  # allows PUBLIC_HOST only: the real checks for every other name
    try:
        with pytest.raises(
            PictureError, match=r"is (loopback|unspecified)|not a picture address"
        ) as caught:
            await fetcher.fetch(server.loopback_url("/note.png", host))
    finally:
        await fetcher.aclose()
    assert caught.value.lasting
    assert server.hits["/note.png"] == 0


@pytest.mark.parametrize(
    "to", ["http://127.0.0.1:{port}/note.png", "http://localhost:{port}/note.png"]
)
async def test_a_redirect_to_this_machine_is_not_followed(server, to):
    redirect = RedirectServer(to.format(port=server.port))
    fetcher = public_fetcher()
    try:
        with pytest.raises(PictureError, match="is loopback"):
            await fetcher.fetch(redirect.url("/picture.png"))
    finally:
        await fetcher.aclose()
        redirect.close()
    assert redirect.hits == 1  # the public hop was fetched, the loopback one never
    assert server.hits["/note.png"] == 0


async def test_the_operators_allowed_host_is_fetched_and_nothing_else(server):
    fetcher = PictureFetcher(
        max_bytes=100_000, timeout=30.0, max_redirects=3, allowed_hosts=["127.0.0.1"]
    )
    try:
        assert await fetcher.fetch(server.loopback_url("/note.png")) == note_picture()
        with pytest.raises(PictureError, match="is loopback"):
            await fetcher.fetch(server.loopback_url("/note.png", "localhost"))
    finally:
        await fetcher.aclose()
    assert server.hits["/note.png"] == 1


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("10.1.2.3", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "shared"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "link-local"),  # a cloud's metadata service
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 carrying 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 carrying 10.0.0.1
        ("::", "unspecified"),
    ],
)
def test_every_address_off_the_public_internet_is_refused(address, why):
    reason = refusal(ipaddress.ip_address(address))
    assert reason is not None and why in reason


def test_a_public_address_is_allowed_unless_it_is_this_machines_own():
    public = ipaddress.ip_address("93.184.216.34")
    assert refusal(public) is None
    assert refusal(ipaddress.ip_address("2606:4700::1111")) is None
    assert refusal(public, own={public}) == "this machine's own"
    assert ipaddress.ip_address("127.0.0.1") in own_addresses()


async def test_only_http_and_base64_addresses_are_taken():
    fetcher = public_fetcher()
    try:
        for url in ("file:///etc/passwd", "ftp://pictures.example/a.png", "gopher://x/"):
            with pytest.raises(PictureError, match="not http"):
                await fetcher.fetch(url)
    finally:
        await fetcher.aclose()
    assert PUBLIC_HOST.endswith(".example")
