"""Chit-Chat (BYU PCC lab's Chit-Chat Challenge, 2018): a recall task built from it.

Source: the PyPI package ``chitchat-dataset`` 0.9.0 (MIT licence), installed by the ``bench``
extra (``pip install -e '.[bench]'``, which ``make bench`` does): 7,168 English conversations
typed by people (university students) in pairs, every message with its sender and time, each
conversation opened on a suggested topic ("prompt", one of 36, e.g. "What's your favorite
smell?"). Many people chatted dozens of times, so one person's conversations read like the
history of one QQ user with a bot: a multi-session dialogue written by people.

The data set has no recall questions, so this module builds one, deterministically:

* conversations: those with a prompt, exactly two senders and at least ``MIN_MESSAGES``
  message groups (a group: one sender's consecutive messages);
* people: the ``people`` senders with the most such conversations, leaving out anyone with more
  than ``MAX_CONVERSATIONS`` (three lab insiders with 214–395 conversations and 80–111
  partners, whose chats mostly ignore the prompt) — ties by sender id. The person is the
  *user*; each partner's lines are the *assistant*'s;
* stored: the first ``STORED_GROUPS`` message groups of each of the person's conversations, one
  turn a group (its messages joined by spaces, at its first message's time: a QQ user's burst
  of short messages), as the user's private turns; a conversation is one *unit*. The cap keeps
  a run near 7,000 embeddings and keeps the part where the prompt, the suggested opener, is
  talked about, if anywhere;
* cases: every conversation whose prompt was also the prompt of an earlier conversation of the
  same person. It is recalled one second before the conversation's first message, so only
  earlier conversations are visible (the file's ``start`` field is ~6 hours after the first
  message in every conversation, a time-zone slip, so it is not used), with its opening as
  the query: when a topic comes back, recall should bring up what was said about it before.
  Relevant: the earlier conversations on the same prompt; a case is a hit @k when one of the
  first k turns recalled belongs to one.

Query forms: the user's last message group within the opening (its first ``OPENING`` groups),
and the whole opening, ``Name: text`` one group a line, cut to its last lines within
``CONTEXT_CHARS`` characters (about 450 e5 tokens of English: the local embedder keeps the
first 512 tokens, so a longer text would lose its end, the part nearest the test point).

Caveats, on purpose left in: people did not always follow the prompt (about half of these
openings use a word of it; a relevant conversation may never touch the topic), so the ceiling
is well below 1; and an opening that restates the prompt meets earlier conversations that
restated it too (which favours the keyword channel). The ``chance`` row of the table is the
floor.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from bench.public.scoring import Case, Item, Role, Task

PACKAGE = "chitchat_dataset"
DEFAULT_PEOPLE = 4
MAX_CONVERSATIONS = 150
MIN_MESSAGES = 10
OPENING = 6
STORED_GROUPS = 20
CONTEXT_CHARS = 1500
UNITS_PER_PERSON = 10_000
NAMES = {"user": "User", "assistant": "Friend"}
FORMS = {
    "last user line": f"the user's last message group among the first {OPENING}",
    "dialogue context": (
        f"the first {OPENING} message groups, `Name: text` one a line, "
        f"their last lines within {CONTEXT_CHARS} characters"
    ),
    "conversation": (
        "the last user line with the groups before it as the conversation "
        "(MEMORY_QUERY_CONTEXT_TURNS of them join the query)"
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
    start: datetime  # its first message's time (the file's `start` is 6 h off the messages')
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
        conversation = Conversation(key, prompt, groups[0][0].at, groups)
        if len(conversation.senders) == 2:
            found.append(conversation)
    found.sort(key=lambda c: (c.start, c.id))
    return found


def top_people(found: Sequence[Conversation], count: int) -> list[str]:
    """The ``count`` senders with the most conversations, at most ``MAX_CONVERSATIONS`` each."""
    counts = Counter(sender for c in found for sender in c.senders)
    ordered = sorted(
        ((n, sender) for sender, n in counts.items() if n <= MAX_CONVERSATIONS),
        key=lambda pair: (-pair[0], pair[1]),
    )
    return [sender for _, sender in ordered[:count]]


def _group_text(group: Sequence[Message]) -> str:
    return " ".join(m.text for m in group)


def opening_queries(
    conversation: Conversation, user: str
) -> tuple[dict[str, str], list[str]] | None:
    """The query forms of a conversation's opening and the groups before the user's last one
    (the conversational form's earlier lines); None if the user says nothing in it."""
    opening = conversation.groups[:OPENING]
    lines = [
        f"{NAMES['user' if g[0].sender == user else 'assistant']}: {_group_text(g)}"
        for g in opening
    ]
    own = [i for i, g in enumerate(opening) if g[0].sender == user]
    if not own:
        return None
    last = _group_text(opening[own[-1]])
    earlier = [_group_text(g) for g in opening[: own[-1]]]
    kept: list[str] = []
    for line in reversed(lines):
        if kept and sum(len(x) + 1 for x in kept) + len(line) > CONTEXT_CHARS:
            break
        kept.insert(0, line)
    forms = {"last user line": last, "dialogue context": "\n".join(kept), "conversation": last}
    return forms, earlier


def task(*, people: int = DEFAULT_PEOPLE) -> Task:
    """The Chit-Chat recall task over ``people`` people's histories (times are the messages'
    own, in UTC)."""
    found = conversations(read_dataset())
    items: list[Item] = []
    cases: list[Case] = []
    for number, user in enumerate(top_people(found, people), 1):
        history = [c for c in found if user in c.senders]
        by_prompt: dict[str, list[int]] = defaultdict(list)
        for index, conversation in enumerate(history):
            unit = number * UNITS_PER_PERSON + index
            for group in conversation.groups[:STORED_GROUPS]:
                role: Role = "user" if group[0].sender == user else "assistant"
                items.append(Item(number, role, _group_text(group), group[0].at, unit, NAMES[role]))
            earlier = by_prompt[conversation.prompt]
            opening = opening_queries(conversation, user)
            if earlier and opening:
                cases.append(
                    Case(
                        label=f"person{number}/{conversation.id}",
                        user=number,
                        now=conversation.start - timedelta(seconds=1),
                        queries=opening[0],
                        relevant=frozenset(earlier),
                        earlier={"conversation": opening[1]},
                    )
                )
            earlier.append(unit)
    relevant = sum(len(c.relevant) for c in cases) / max(len(cases), 1)
    return Task(
        name="Chit-Chat (constructed: a topic comes back)",
        about=(
            f"{len(items)} message groups (at most {STORED_GROUPS} a conversation) of "
            f"{people} people's {len({i.unit for i in items})} conversations stored as each "
            f"person's private turns (window 0); {len(cases)} conversations whose prompt an "
            "earlier one of the same person had; a case counts when a turn of such an earlier "
            f"conversation is recalled ({relevant:.1f} relevant conversations a case on average)"
        ),
        items=items,
        cases=cases,
        forms=FORMS,
        published_note="no published figures: the recall task is built here",
    )
