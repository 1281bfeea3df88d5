"""LoCoMo (ACL 2024), development half: long two-person conversations and questions about them.

The file is described in ``README.md`` of its folder (``../shared/data/locomo-dev`` beside the
repository; CC BY-NC 4.0, ``LICENSE.txt`` there: read it from there, never copy it into the
repository). Five conversations of 19–32 sessions each; every question names the evidence
turns (``dia_id``, ``"D<session>:<turn>"``) that answer it.

The measuring protocol is the README's, so that these figures compare with the issue's:

* each conversation is one private chat, one session: the first speaker (``speaker_a``) is
  the user, the other's turns are the bot's replies, each turn with its speaker's name as
  its sender name. Turn times: the session's start (``session_<n>_date_time``, read in the
  bot's time zone) + 30 s per turn of that session;
* questions of categories 1–4 that have evidence are asked 30 s after the conversation's last
  turn (category 5, adversarial, has no answer in the chat);
* a question is a hit @k when any evidence turn is among its first k anchors or their ±2
  neighbouring turns (``WINDOW``).

Only the chat text is stored: a turn's ``img_url`` / ``blip_caption`` (a shared picture and a
model's caption of it) is left out, as the bot would only see the picture. Evidence ids are
normalised (``D:11:26`` -> ``D11:26``, ``D30:05`` -> ``D30:5``, ``D8:6; D9:17`` -> both) and
an id naming no turn of the conversation is dropped.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from bench.public.scoring import Case, Item, Role, Task

DIR_ENV = "TM_LOCOMO_DIR"
DEFAULT_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo-dev"
FILE = "locomo-dev5.json"
TURN_STEP = timedelta(seconds=30)
WINDOW = 2
TOP_N = 5
UNITS_PER_CONVERSATION = 10_000  # a turn's unit: conversation number * this + its position
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023", the only form in the file
FORMS = {"question": "the question as written (third person, naming the speakers)"}

_SESSION = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    at: datetime


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]  # normalised dia_ids, each naming a turn of the conversation


@dataclass(frozen=True)
class Conversation:
    id: str
    speaker_a: str
    speaker_b: str
    turns: tuple[Turn, ...]  # session order, then turn order
    questions: tuple[Question, ...]  # every question of the file, category 5 included


def data_dir(flag: str | None = None) -> Path:
    """``--locomo-dir``, else ``$TM_LOCOMO_DIR``, else ``../shared/data/locomo-dev``."""
    return Path(flag or os.environ.get(DIR_ENV) or DEFAULT_DIR)


def normalised_evidence(raw: Sequence[str], known: set[str]) -> tuple[str, ...]:
    """The evidence ids in ``D<n>:<k>`` form, in order, without repeats or unknown ids."""
    found: list[str] = []
    for entry in raw:
        for session, turn in _EVIDENCE.findall(entry):
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id in known and dia_id not in found:
                found.append(dia_id)
    return tuple(found)


def conversation(raw: dict[str, Any], tz: tzinfo) -> Conversation:
    """One conversation of the file, its turns timed by the protocol."""
    chat = raw["conversation"]
    sessions = sorted(int(m.group(1)) for key in chat if (m := _SESSION.match(key)))
    turns: list[Turn] = []
    for number in sessions:
        start = datetime.strptime(chat[f"session_{number}_date_time"], DATE_FORMAT)
        start = start.replace(tzinfo=tz)
        for position, turn in enumerate(chat[f"session_{number}"]):
            turns.append(
                Turn(turn["dia_id"], turn["speaker"], turn["text"], start + position * TURN_STEP)
            )
    known = {t.dia_id for t in turns}
    questions = tuple(
        Question(
            q["question"], int(q["category"]), normalised_evidence(q.get("evidence", []), known)
        )
        for q in raw["qa"]
    )
    return Conversation(
        raw["sample_id"], chat["speaker_a"], chat["speaker_b"], tuple(turns), questions
    )


def load(root: Path, tz: tzinfo) -> list[Conversation]:
    """Every conversation of ``root/locomo-dev5.json`` (FileNotFoundError when absent)."""
    with (root / FILE).open(encoding="utf-8") as handle:
        raw: list[dict[str, Any]] = json.load(handle)
    return [conversation(c, tz) for c in raw]


def asked(question: Question) -> bool:
    """Whether the protocol asks it: categories 1–4, with evidence."""
    return question.category in CATEGORIES and bool(question.evidence)


def task(conversations: Sequence[Conversation]) -> Task:
    """The recall task: each conversation a user's private chat, each asked question a case."""
    items: list[Item] = []
    cases: list[Case] = []
    groups: dict[str, str] = {}
    for number, chat in enumerate(conversations, 1):
        base = number * UNITS_PER_CONVERSATION
        units = {t.dia_id: base + position for position, t in enumerate(chat.turns)}
        for position, turn in enumerate(chat.turns):
            role: Role = "user" if turn.speaker == chat.speaker_a else "assistant"
            items.append(Item(number, role, turn.text, turn.at, base + position, turn.speaker))
        now = chat.turns[-1].at + TURN_STEP
        for index, question in enumerate(chat.questions):
            if not asked(question):
                continue
            label = f"{chat.id}/q{index}"
            groups[label] = f"{question.category} {CATEGORIES[question.category]}"
            cases.append(
                Case(
                    label=label,
                    user=number,
                    now=now,
                    queries={"question": question.text},
                    relevant=frozenset(units[e] for e in question.evidence),
                )
            )
    return Task(
        name="LoCoMo-dev (5 conversations)",
        about=(
            f"{len(items)} turns of {len(conversations)} two-person conversations, each one "
            f"private chat (first speaker = the user, speaker names as sender names); "
            f"{len(cases)} questions of categories 1–4 with evidence, asked 30 s after the "
            f"last turn; a hit @k: an evidence turn among the first k anchors ±{WINDOW} turns"
        ),
        items=items,
        cases=cases,
        forms=FORMS,
        published_note="no published recall figures at this window; plain BM25 is the reference",
        window=WINDOW,
        groups=groups,
    )
