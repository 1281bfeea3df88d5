"""Chit-Chat (BYU PCC lab's Chit-Chat Challenge, 2018): a recall task built from it.

Source: the PyPI package ``chitchat-dataset`` 0.9.0 (MIT licence), installed by the ``bench``
extra (``pip install -e '.[bench]'``, which ``make bench`` does): 7,168 English conversations
typed by people (university students) in pairs, every message with its sender and time, each
conversation opened on a suggested topic ("prompt", one of 36, e.g. "What's your favorite
smell?"). The same two people often talked many times, so a pair's conversations read like the
history of one QQ user with a bot: a multi-session dialogue written by people.

The data set has no recall questions, so this module builds one, deterministically:

* conversations: those with a prompt, exactly two senders and at least ``MIN_MESSAGES``
  message groups (a group: one sender's consecutive messages);
* pairs: the ``pairs`` pairs of senders with the most such conversations (ties by sender id);
  of each pair, the sender with the smaller id is the *user*, the other the *assistant*;
* stored: the first ``STORED_GROUPS`` message groups of each of the pair's conversations, one
  turn a group (its messages joined by spaces, at its first message's time; a QQ user's burst
  of short messages), as the user's private turns; a conversation is one *unit*. The cap keeps
  a run to ~5,000 embeddings (the five most frequent pairs' conversations are 100–180 groups
  long) and keeps the part where the prompt, the suggested opener, is talked about;
* cases: every conversation whose prompt was also the prompt of an earlier conversation of the
  same pair. It is recalled at the moment the conversation starts (so only earlier
  conversations are visible), with its opening as the query: when a topic comes back, recall
  should bring up what was said about it before. Relevant: the earlier conversations on the
  same prompt; a case is a hit @k when one of the first k turns recalled belongs to one.

Query forms: the user's last message group within the opening (its first ``OPENING`` groups),
and the whole opening, ``Name: text`` one group a line, cut to its last lines within
``CONTEXT_CHARS`` characters (about 450 e5 tokens of English: the local embedder keeps the
first 512 tokens, so a longer text would lose its end, the part nearest the test point).

Caveats, on purpose left in: people did not always follow the prompt (relevant conversations
may never touch the topic), and an opening often restates the prompt, as the earlier
conversations on it did (which favours the keyword channel).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from importlib import resources
from typing import Any

from bench.public.scoring import Case, Item, Task

PACKAGE = "chitchat_dataset"
DEFAULT_PAIRS = 5
MIN_MESSAGES = 10
OPENING = 6
STORED_GROUPS = 40
CONTEXT_CHARS = 1500
UNITS_PER_PAIR = 10_000
NAMES = {"user": "User", "assistant": "Friend"}
FORMS = {
    "last user line": f"the user's last message group among the first {OPENING}",
    "dialogue context": (
        f"the first {OPENING} message groups, `Name: text` one a line, "
        f"their last lines within {CONTEXT_CHARS} characters"
    ),
}


class NotInstalledError(RuntimeError):
    """The ``chitchat-dataset`` package is not installed."""


@dataclass(frozen=True)
class Message:
    sender: str
    text: str
    at: datetime


@dataclass(frozen=True)
class Conversation:
    id: str
    prompt: str
    start: datetime
    groups: tuple[tuple[Message, ...], ...]

    @property
    def senders(self) -> frozenset[str]:
        return frozenset(m.sender for g in self.groups for m in g)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def read_dataset() -> dict[str, Any]:
    """The package's ``dataset.json`` (conversation id -> conversation)."""
    try:
        path = resources.files(PACKAGE) / "dataset.json"
        with path.open(encoding="utf-8") as handle:
            data: dict[str, Any] = json.load(handle)
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise NotInstalledError(
            "the chitchat-dataset package is not installed (pip install -e '.[bench]')"
        ) from exc
    return data


def conversations(data: dict[str, Any]) -> list[Conversation]:
    """The usable conversations (see the module docstring), in start order."""
    found = []
    for key, raw in data.items():
        prompt = raw.get("prompt")
        groups = tuple(
            tuple(
                Message(m["sender"], m["text"].strip(), _time(m["timestamp"]))
                for m in group
                if m["text"].strip()
            )
            for group in raw["messages"]
        )
        groups = tuple(g for g in groups if g)
        if not prompt or len(groups) < MIN_MESSAGES:
            continue
        conversation = Conversation(key, prompt, _time(raw["start"]), groups)
        if len(conversation.senders) == 2:
            found.append(conversation)
    found.sort(key=lambda c: (c.start, c.id))
    return found


def top_pairs(found: Sequence[Conversation], count: int) -> list[tuple[str, str]]:
    """The ``count`` sender pairs with the most conversations, as (user, assistant)."""
    counts = Counter(tuple(sorted(c.senders)) for c in found)
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(a, b) for (a, b), _ in ordered[:count]]


def _group_text(group: Sequence[Message]) -> str:
    return " ".join(m.text for m in group)


def opening_queries(conversation: Conversation, user: str) -> dict[str, str] | None:
    """The two query forms of a conversation's opening; None if the user says nothing in it."""
    opening = conversation.groups[:OPENING]
    role = {True: "user", False: "assistant"}
    lines = [f"{NAMES[role[g[0].sender == user]]}: {_group_text(g)}" for g in opening]
    own = [_group_text(g) for g in opening if g[0].sender == user]
    if not own:
        return None
    kept: list[str] = []
    for line in reversed(lines):
        if kept and sum(len(x) + 1 for x in kept) + len(line) > CONTEXT_CHARS:
            break
        kept.insert(0, line)
    return {"last user line": own[-1], "dialogue context": "\n".join(kept)}


def task(*, pairs: int = DEFAULT_PAIRS, tz: tzinfo | None = None) -> Task:
    """The Chit-Chat recall task over the ``pairs`` most frequent pairs (``tz`` is unused:
    messages carry their own UTC times)."""
    found = conversations(read_dataset())
    items: list[Item] = []
    cases: list[Case] = []
    for number, (user, partner) in enumerate(top_pairs(found, pairs), 1):
        history = [c for c in found if c.senders == {user, partner}]
        by_prompt: dict[str, list[int]] = defaultdict(list)
        for index, conversation in enumerate(history):
            unit = number * UNITS_PER_PAIR + index
            for group in conversation.groups[:STORED_GROUPS]:
                role = "user" if group[0].sender == user else "assistant"
                items.append(Item(number, role, _group_text(group), group[0].at, unit, NAMES[role]))
            earlier = by_prompt[conversation.prompt]
            queries = opening_queries(conversation, user)
            if earlier and queries:
                cases.append(
                    Case(
                        label=f"pair{number}/{conversation.id}",
                        user=number,
                        now=conversation.start - timedelta(seconds=1),
                        queries=queries,
                        relevant=frozenset(earlier),
                    )
                )
            earlier.append(unit)
    return Task(
        name="Chit-Chat (constructed: a topic comes back)",
        about=(
            f"{len(items)} message groups (at most {STORED_GROUPS} a conversation) of {pairs} "
            f"pairs' {len({i.unit for i in items})} conversations stored as the user's private "
            f"turns (window 0); {len(cases)} "
            "conversations whose prompt an earlier one of the pair had; a case counts when a "
            "turn of such an earlier conversation is recalled "
            f"({sum(len(c.relevant) for c in cases) / max(len(cases), 1):.1f} relevant "
            "conversations a case on average)"
        ),
        items=items,
        cases=cases,
        forms=FORMS,
        published_note="no published figures: the recall task is built here",
    )
