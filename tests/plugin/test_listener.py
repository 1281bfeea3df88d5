"""Which listen addresses count as this machine only, and the address NapCat is given."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        (ip_address("127.0.0.1"), True),
        (ip_address("127.8.9.10"), True),
        (ip_address("::1"), True),
        ("localhost", True),
        ("::ffff:127.0.0.1", True),
        (ip_address("0.0.0.0"), False),
        (ip_address("::"), False),
        (ip_address("192.168.1.20"), False),
        ("::ffff:10.0.0.1", False),
        ("bot.example.com", False),
    ],
)
def test_only_loopback_addresses_may_listen_without_a_token(plugin: Any, host: Any, loopback: bool):
    from nonebot_plugin_temporal_memory.listener import is_loopback

    assert is_loopback(host) is loopback


def test_the_napcat_address_brackets_ipv6_hosts(plugin: Any):
    from nonebot_plugin_temporal_memory.listener import websocket_url

    assert websocket_url(ip_address("127.0.0.1"), 8080) == "ws://127.0.0.1:8080/onebot/v11/ws"
    assert websocket_url(ip_address("::1"), 8080) == "ws://[::1]:8080/onebot/v11/ws"
