"""@-mention names: a message with thousands of mentions costs a few lookups, a few at a time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest


class CountingBot:
    """Answers ``get_group_member_info`` slowly, counting calls and how many run at once."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def get_group_member_info(self, *, group_id: int, user_id: int) -> dict[str, Any]:
        self.asked.append(user_id)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            return {"card": f"成员{user_id}", "nickname": ""}
        finally:
            self.in_flight -= 1


@pytest.fixture
def intake(plugin: Any) -> Any:
    """The plugin's intake module (importing the plugin needs NoneBot initialised)."""
    from nonebot_plugin_temporal_memory import intake

    return intake


async def test_two_thousand_mentions_look_up_only_the_first_few_a_few_at_a_time(intake):
    names, bot = intake.MemberNames(), CountingBot()
    mentioned = [str(10_000 + n) for n in range(2000)]
    found = await names.resolve(bot, 500, mentioned)

    assert bot.asked == [int(qq) for qq in mentioned[:10]]
    assert bot.max_in_flight <= 4
    assert found == {qq: f"成员{qq}" for qq in mentioned[:10]}  # the rest keep their number
    # Known names cost nothing, and free the lookups for the next unknown members.
    again = await names.resolve(bot, 500, mentioned)
    assert bot.asked[10:] == [int(qq) for qq in mentioned[10:20]] and len(again) == 20


async def test_the_same_member_mentioned_many_times_is_looked_up_once(intake):
    names, bot = intake.MemberNames(), CountingBot()
    found = await names.resolve(bot, 500, ["123"] * 2000)
    assert bot.asked == [123] and found == {"123": "成员123"}


class UnreachableBot:
    """A client that cannot look members up, counting how often it is asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def get_group_member_info(self, *, group_id: int, user_id: int) -> dict[str, Any]:
        from nonebot.adapters.onebot.v11 import NetworkError

        self.asked.append(user_id)
        raise NetworkError("client offline")


async def test_a_member_the_client_cannot_name_is_not_asked_about_again_within_the_hour(intake):
    names, bot = intake.MemberNames(), UnreachableBot()
    assert await names.resolve(bot, 500, ["123"]) == {}
    assert await names.resolve(bot, 500, ["123"]) == {}  # keeps the number, no second lookup
    assert bot.asked == [123]
    # The remembered failure does not use up the per-message lookups of other members.
    assert await names.resolve(CountingBot(), 500, ["123", "456"]) == {"456": "成员456"}
