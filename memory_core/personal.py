"""A person's own view of their memories: list them, delete some, take them away, stop them.

These back the self-service commands (/我的记忆, /忘记 3, /忘记 花生, /导出我的记忆); each works
on one person's rows only. A delete of named memories takes what they came from too
(``Named``); ``preview_forget`` says what that is before anything goes. Forgetting a person
everywhere is ``Forgetting.forget(ForgetScope(user_id=…))``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .answer_cache.store import OwnCachedAnswer, PgAnswerCacheStore
from .dialogue.admin_store import PgAdminStore
from .dialogue.forget_store import PgForgetStore, holds_word
from .distill.forgetting import forget_turns
from .distill.memory import DistilledKind, DistilledMemory
from .distill.store import PgDistilledStore
from .lang.keywords import normalize
from .models import Forgotten, MemoryTurn, generate_session_key
from .storage.audit_log import PgAuditLogStore
from .storage.database_handle import Database, Transaction
from .storage.opt_outs import EVERYONE, EVERYWHERE, PgOptOutStore, chat_name

if TYPE_CHECKING:
    from .dialogue.spool import TurnSpool
    from .distill.keeper import MemoryKeeper

LISTED_KINDS: tuple[DistilledKind, ...] = ("facts", "preferences")
LIST_LIMIT = 200


async def known_about(
    keeper: MemoryKeeper,
    user_id: int,
    group_id: int | None,
    *,
    limit: int = LIST_LIMIT,
    now: datetime | None = None,
) -> list[DistilledMemory]:
    """The current facts and preferences about ``user_id`` in this chat, newest first
    (last confirmed, then last stored)."""
    now = now or datetime.now(timezone.utc)
    found: list[DistilledMemory] = []
    for kind in LISTED_KINDS:
        found += await keeper.recall_by_type(user_id, group_id, kind, limit=limit, now=now)
    # recall_by_type may widen to the user's other chats (MEMORY_DISTILLED_SCOPE=user); a
    # listing of this chat shows this chat's rows, the ones a delete from here can reach.
    session_key = generate_session_key(user_id, group_id)
    own = [m for m in found if m.session_key == session_key]
    own.sort(key=lambda m: (m.last_confirmed, m.id), reverse=True)
    return own[:limit]


@dataclass(frozen=True)
class Named:
    """What a person names for deletion in one chat: memories by id (/忘记 2, the console) and
    a word (/忘记 花生). A delete takes the named memories, the turns they were drawn from,
    every turn of the chat holding the word, the bot's replies to those turns and its later
    replies repeating them (``lang.repeats``), and then whatever was drawn from any of those
    turns; the word also takes the chat's summaries and cached answers that hold it."""

    user_id: int
    group_id: int | None
    memory_ids: tuple[int, ...] = ()
    word: str | None = None

    @property
    def session_key(self) -> str:
        return generate_session_key(self.user_id, self.group_id)

    @property
    def folded(self) -> str | None:
        """The word as the stores compare it (NFKC, lower case), ``None`` without one."""
        word = normalize(" ".join((self.word or "").split()))
        return word or None


@dataclass(frozen=True)
class ForgetPreview:
    """What deleting ``Named`` would take now (the question asked before it)."""

    memories: tuple[DistilledMemory, ...]  # named, drawn from the turns, or holding the word
    turns: tuple[MemoryTurn, ...]  # in time order

    def count(self, kind: DistilledKind) -> int:
        return sum(1 for m in self.memories if m.kind == kind)

    @property
    def bot_replies(self) -> int:
        return sum(1 for t in self.turns if t.role == "assistant")


def _sources(rows: Sequence[DistilledMemory]) -> list[int]:
    # A summary speaks of its whole batch: deleting it for a word takes none of the batch.
    return sorted({t for m in rows if m.kind != "summary" for t in m.source_turn_ids})


async def preview_forget(database: Database, named: Named) -> ForgetPreview:
    """What ``forget_named`` would delete now; deletes nothing."""
    distilled = database.store(PgDistilledStore)
    rows = await distilled.own_named(
        user_id=named.user_id,
        session_key=named.session_key,
        ids=named.memory_ids,
        containing=named.folded,
    )
    turns = await database.store(PgForgetStore).turns_to_forget(
        named.session_key, _sources(rows), named.folded
    )
    drawn = await distilled.drawn_from([t.id for t in turns])
    chosen = {m.id: m for m in (*rows, *drawn)}
    return ForgetPreview(memories=tuple(chosen.values()), turns=tuple(turns))


async def forget_named(database: Database, spool: TurnSpool, named: Named) -> Forgotten:
    """Delete what ``named`` names (see ``Named``) in one transaction, and the chat's turns
    holding its word from the ``spool`` (waiting or dead-lettered); returns what went, by kind.
    Other people's rows and other chats' rows are never touched."""
    spooled = 0
    if named.folded is not None:
        # The chat's turns holding the word that wait in the spool or were dead-lettered go
        # first (a flush must not write one back after the delete).
        folded = named.folded
        spooled = await spool.drop(lambda turn: holds_word(named.session_key, folded, turn))
    async with database.transaction() as tx:
        distilled = tx.store(PgDistilledStore)
        rows = await distilled.own_named(
            user_id=named.user_id,
            session_key=named.session_key,
            ids=named.memory_ids,
            containing=named.folded,
        )
        turns = await tx.store(PgForgetStore).forget_turns(
            named.session_key, _sources(rows), named.folded
        )
        by_kind = await distilled.delete_own(
            [m.id for m in rows], user_id=named.user_id, session_key=named.session_key
        )
        own = [memory_id for ids in by_kind.values() for memory_id in ids]
        await tx.store(PgAuditLogStore).forget_items(memories=own)
        fed = await forget_turns(tx, turns)  # the turns' own entries and their memories'
        went = {kind: len(ids) for kind, ids in by_kind.items()}
        cached = fed.cached_answers
        if named.folded is not None:
            cached += await tx.store(PgAnswerCacheStore).delete_user_containing(
                named.user_id, named.group_id, named.folded
            )
    return Forgotten(
        dialogues=len(turns) + spooled,
        bot_replies=sum(1 for t in turns if t.role == "assistant"),
        facts=went.get("facts", 0) + fed.facts,
        preferences=went.get("preferences", 0) + fed.preferences,
        summaries=went.get("summary", 0) + fed.summaries,
        cached_answers=cached,
    )


async def forget_memories(
    database: Database, spool: TurnSpool, user_id: int, group_id: int | None, ids: Sequence[int]
) -> Forgotten:
    """Delete these distilled memories of ``user_id`` in this chat with the turns they were
    drawn from (``forget_named``); others' rows and other chats' rows are never touched."""
    return await forget_named(database, spool, Named(user_id, group_id, tuple(ids)))


@dataclass(frozen=True)
class PersonalExport:
    """Everything stored about one person (/导出我的记忆): turns of every chat, distilled
    memories (superseded ones included) and their cached answers, each oldest first.
    ``tz`` is the clock its times are written in (``MEMORY_TIMEZONE``)."""

    user_id: int
    exported_at: datetime
    turns: tuple[MemoryTurn, ...]
    memories: tuple[DistilledMemory, ...]
    cached_answers: tuple[OwnCachedAnswer, ...]
    tz: tzinfo = timezone.utc

    @property
    def empty(self) -> bool:
        return not (self.turns or self.memories or self.cached_answers)

    def as_json(self) -> dict[str, Any]:
        """The export as plain JSON data (times in ISO 8601, in ``tz`` with its offset: the
        clock the person reads everywhere else)."""

        def local(moment: datetime) -> str:
            return moment.astimezone(self.tz).isoformat()

        return {
            "user_id": self.user_id,
            "exported_at": local(self.exported_at),
            "turns": [
                {
                    "time": local(t.created_at),
                    "chat": _chat(t.group_id),
                    "role": t.role,
                    "content": t.content,
                }
                for t in self.turns
            ],
            "memories": [
                {
                    "kind": m.kind,
                    "chat": _chat(m.group_id),
                    "content": m.content,
                    "category": m.category,
                    "first_seen": local(m.first_seen),
                    "last_confirmed": local(m.last_confirmed),
                    "times_mentioned": m.times_mentioned,
                    "current": m.current,
                }
                for m in self.memories
            ],
            "cached_answers": [
                {
                    "time": local(c.created_at),
                    "chat": _chat(c.group_id),
                    "question": c.question,
                    "answer": c.answer,
                }
                for c in self.cached_answers
            ],
        }

    async def write(self, directory: Path) -> Path:
        """Write the export as ``temporal-memory-<QQ>.json`` (the name the person sees) in a
        folder of its own under ``directory``, readable by a QQ client on this machine: two
        exports of one person at once never share a file, so neither sends or deletes the
        other's. The caller removes it once sent (:func:`discard_export`)."""
        text = json.dumps(self.as_json(), ensure_ascii=False, indent=1)
        return await asyncio.to_thread(_write_own, directory, self.user_id, text)


def _chat(group_id: int | None) -> str:
    return "private" if group_id is None else f"group:{group_id}"


def _write_own(directory: Path, user_id: int, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    while True:
        # Not tempfile.mkdtemp: its mode 0700 would keep out a QQ client running as another
        # user (a container); the name is what keeps requests apart.
        folder = directory / f"{user_id}-{secrets.token_hex(8)}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        path = folder / f"temporal-memory-{user_id}.json"
        path.write_text(text, encoding="utf-8")
        return path


def discard_export(path: Path) -> None:
    """Remove an export :meth:`PersonalExport.write` wrote, with its folder."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # gone, or something else was put there
        path.parent.rmdir()


async def export_person(database: Database, user_id: int, *, tz: tzinfo) -> PersonalExport:
    """Everything stored about ``user_id`` (see ``PersonalExport``), its times in ``tz``."""
    return PersonalExport(
        user_id=user_id,
        exported_at=datetime.now(timezone.utc),
        turns=tuple(await database.store(PgAdminStore).user_turns(user_id)),
        memories=tuple(await database.store(PgDistilledStore).by_user(user_id)),
        cached_answers=tuple(await database.store(PgAnswerCacheStore).by_user(user_id)),
        tz=tz,
    )


async def opt_out(
    database: Database, user_id: int, group_id: int | None, *, everywhere: bool = False
) -> bool:
    """From now on store nothing of ``user_id`` in this chat (or in every chat); whether this
    is new. What is stored already stays until forgotten."""
    return await database.store(PgOptOutStore).opt_out(
        user_id, EVERYWHERE if everywhere else chat_name(group_id)
    )


async def opt_in(
    database: Database, user_id: int, group_id: int | None, *, everywhere: bool = False
) -> bool:
    """Remember ``user_id`` again in this chat (or everywhere: every opt-out dropped);
    whether they are now remembered here (false while an everywhere opt-out remains)."""
    store = database.store(PgOptOutStore)
    await store.opt_in(user_id, None if everywhere else chat_name(group_id))
    return not ({EVERYWHERE, chat_name(group_id)} & await store.chats(user_id))


async def switch_group_memory(database: Database | Transaction, group_id: int, *, on: bool) -> bool:
    """Switch memory of a whole group on or off (nobody's messages there are stored while
    off), in ``database`` or a transaction of the caller's; whether that changed anything."""
    store = database.store(PgOptOutStore)
    if on:
        return await store.opt_in(EVERYONE, chat_name(group_id)) > 0
    return await store.opt_out(EVERYONE, chat_name(group_id))
