"""A group's daily token budget (CHAT_GROUP_DAILY_TOKENS), counted in this process.

The tokens are those the chat model's answers report (``usage.total_tokens``: prompt and
completion, every call of a reply including its tool rounds), added to the group's count of
the day in MEMORY_TIMEZONE. Three states follow from the count:

* ``OPEN``: below ``TIGHT_SHARE`` of the budget, replies as usual;
* ``TIGHT``: from there to the budget, replies with a smaller memory block and no tools (the
  prompt, most of a reply's cost, shrinks);
* ``SPENT``: the budget is used up; the bot says once that it is resting for the day and then
  stays quiet in that group (messages are still stored) until the local day turns.

Private chats have no budget. The counts live in memory: a restart starts the day again at
zero for every group, which errs on the side of answering.
"""

from __future__ import annotations

import enum
from datetime import date, datetime
from zoneinfo import ZoneInfo

TIGHT_SHARE = 0.8
# The memory block's share of MEMORY_MAX_TOKENS once a group is near its budget.
TIGHT_MEMORY_SHARE = 0.25
RESTING_NOTICE = "今天在这个群里聊得太多了，我先休息，明天再聊。"


class BudgetState(enum.Enum):
    OPEN = "open"
    TIGHT = "tight"
    SPENT = "spent"


class GroupBudget:
    """Tokens spent per group per local day against one daily limit (``None``: no limit)."""

    def __init__(self, daily_tokens: int | None, tz: ZoneInfo) -> None:
        self.daily_tokens = daily_tokens
        self._tz = tz
        self._day: date | None = None
        self._spent: dict[int, int] = {}
        self._announced: set[int] = set()

    def _today(self, now: datetime) -> date:
        day = now.astimezone(self._tz).date()
        if day != self._day:  # a new day: every group starts again
            self._day = day
            self._spent.clear()
            self._announced.clear()
        return day

    def state(self, group_id: int | None, now: datetime) -> BudgetState:
        """Where ``group_id`` stands today (a private chat, or no limit: always ``OPEN``)."""
        if group_id is None or self.daily_tokens is None:
            return BudgetState.OPEN
        self._today(now)
        spent = self._spent.get(group_id, 0)
        if spent >= self.daily_tokens:
            return BudgetState.SPENT
        if spent >= self.daily_tokens * TIGHT_SHARE:
            return BudgetState.TIGHT
        return BudgetState.OPEN

    def spend(self, group_id: int | None, tokens: int, now: datetime) -> None:
        """Add a reply's tokens to the group's count of the day of ``now``."""
        if group_id is None or self.daily_tokens is None or tokens <= 0:
            return
        self._today(now)
        self._spent[group_id] = self._spent.get(group_id, 0) + tokens

    def spent(self, group_id: int, now: datetime) -> int:
        """The group's tokens today."""
        self._today(now)
        return self._spent.get(group_id, 0)

    def announce(self, group_id: int, now: datetime) -> bool:
        """Whether the resting notice is still to be said in ``group_id`` today (once)."""
        self._today(now)
        if group_id in self._announced:
            return False
        self._announced.add(group_id)
        return True
