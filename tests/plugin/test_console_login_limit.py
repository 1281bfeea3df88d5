"""The console's login limit: bounded whatever addresses come, and counted per client as the
server decided it — the connection's peer, or what a proxy named in ``FORWARDED_ALLOW_IPS``
forwarded. (That an ``X-Forwarded-For`` from anyone else is not believed:
``test_console_access.py``, its last test.) The wire test starts the real ``bot.py`` with its
console on (``console_bot``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.plugin.console_bot import CONSOLE_TOKEN, ConsoleBot, console_bot, same_origin

LOGIN_FAILURES_PER_CLIENT = 5  # access.LOGIN_FAILURES_PER_CLIENT, as docs/console.md states it


@pytest.fixture
def access(plugin: Any) -> Any:
    """The console's access module (the plugin loads once NoneBot is initialised)."""
    from nonebot_plugin_temporal_memory.console import access

    assert access.LOGIN_FAILURES_PER_CLIENT == LOGIN_FAILURES_PER_CLIENT
    return access


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_failures_make_a_client_wait_out_the_window_and_others_go_on(access: Any):
    clock = Clock()
    limiter = access.LoginLimiter(clock)
    for _ in range(LOGIN_FAILURES_PER_CLIENT - 1):
        limiter.failed("203.0.113.5")
    assert not limiter.blocked("203.0.113.5")
    limiter.failed("203.0.113.5")
    assert limiter.blocked("203.0.113.5")
    assert not limiter.blocked("198.51.100.7")
    clock.now += access.LOGIN_WINDOW + 1
    assert not limiter.blocked("203.0.113.5")


def test_the_limiter_remembers_a_bounded_number_of_clients_the_least_recent_forgotten_first(
    access: Any,
):
    limiter, most = access.LoginLimiter(Clock()), access.MAX_CLIENTS
    for _ in range(LOGIN_FAILURES_PER_CLIENT):
        limiter.failed("203.0.113.5")
    for n in range(most - 1):
        limiter.failed(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
    assert limiter.blocked("203.0.113.5")  # MAX_CLIENTS remembered: still there
    for n in range(3 * most):  # a process rotating addresses
        limiter.failed(f"172.{16 + (n >> 16 & 15)}.{n >> 8 & 255}.{n & 255}")
        assert len(limiter._failures) <= most
    assert not limiter.blocked("203.0.113.5")  # the least recent went first


def test_the_addresses_of_one_ipv6_64_count_as_one_client(access: Any):
    limiter = access.LoginLimiter(Clock())
    for n in range(LOGIN_FAILURES_PER_CLIENT):
        limiter.failed(f"2001:db8:1:2::{n + 1:x}")
    assert limiter.blocked("2001:db8:1:2:ffff::9")
    assert not limiter.blocked("2001:db8:1:3::1")
    for _ in range(LOGIN_FAILURES_PER_CLIENT):
        limiter.failed("::ffff:192.0.2.1")
    assert limiter.blocked("192.0.2.1")


@pytest.fixture
async def behind_proxy(
    pg_server_dsn: str, migrated_template: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ConsoleBot]:
    """The bot as docs/reverse-proxy.md runs it: the proxy on loopback is believed."""
    async with console_bot(
        pg_server_dsn,
        migrated_template,
        tmp_path_factory.mktemp("proxied"),
        extra_env={"FORWARDED_ALLOW_IPS": "127.0.0.1"},
    ) as bot:
        yield bot


async def login(client: httpx.AsyncClient, token: str, forwarded_for: str) -> int:
    answer = await client.post(
        "/memory/login", data={"token": token}, headers={"X-Forwarded-For": forwarded_for}
    )
    return answer.status_code


async def test_behind_the_proxy_a_stranger_locks_out_only_their_own_address(
    behind_proxy: ConsoleBot,
):
    async with behind_proxy.client() as client:
        client.headers.update(same_origin(behind_proxy))
        codes = [
            await login(client, f"guess-{n}", "203.0.113.5")
            for n in range(LOGIN_FAILURES_PER_CLIENT)
        ]
        assert set(codes) == {401}
        assert await login(client, CONSOLE_TOKEN, "203.0.113.5") == 429
        assert await login(client, CONSOLE_TOKEN, "198.51.100.7") == 303  # the operator
    assert "console login refused from 203.0.113.5" in behind_proxy.bot.log_text()
