"""``MemoryConsole``: what the operator's web console reads and changes, framework-free.

The plugin serves it as web pages; everything here works on one session at a time (its key is
part of every query), writes each change to the audit log in the change's own transaction, and
deletes into a recycle bin kept ``MEMORY_RECYCLE_DAYS`` days.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, TypeVar

from ..dialogue.admin_store import PgAdminStore, SessionActivity, TurnsShown
from ..dialogue.forget_store import PgForgetStore
from ..dialogue.recall_store import AnchorFilters, PgRecallStore, RecallScope
from ..dialogue.rewrite_store import Rewritten
from ..distill.memory import DistilledMemory, content_hash, embedding_text
from ..distill.store import MemoryEdit, MemorySessionStats, PgDistilledStore
from ..distill.worker import EXTRACTION_FAILED
from ..errors import EmbeddingError, InvalidTurnError
from ..lang.keywords import normalize, substring_terms, tsquery_all
from ..lang.text import clean_content, scrub
from ..models import MemoryTurn
from ..personal import switch_group_memory
from ..providers.openai_api import is_failing
from ..settings import BUNDLED_MODEL_RECALL_FLOOR, LOCAL_EMBEDDING_MODEL
from ..storage.audit_log import Audit, AuditEntry, PgAuditLogStore
from ..storage.counters import PgCounterStore
from ..storage.database_handle import Transaction
from ..storage.opt_outs import EVERYONE, PgOptOutStore
from ..storage.recycle_bin import BinItem, PgRecycleBinStore
from ..storage.row_changes import RowTaker
from .store import FoundTurn, SessionRow, conflicts_refused

if TYPE_CHECKING:
    from ..background import DueFlag
    from ..dialogue.vector_index import VectorIndex
    from ..dialogue.writing import TurnWriter
    from ..evaluation.retention import RetentionPolicy
    from ..parts import MemoryParts
    from ..providers.embedding import Embedder
    from ..recall.sharing import GroupSharing
    from ..settings import MemorySettings
    from ..storage.database_handle import Database

PAGE_SIZE = 50
MEANING_SEARCH_MAX = 200  # nearest turns a meaning search weighs: counted, then paged
EditedT = TypeVar("EditedT", MemoryTurn, DistilledMemory)
MEMORY_LIMIT = 200
SEARCH_MAX_CHARS = 200
DISTILLED_MAX_CHARS = 2000
# The store owning each kind of row the console deletes into its bin and restores.
OWNERS: dict[str, type[RowTaker]] = {"turn": PgAdminStore, "distilled": PgDistilledStore}
KINDS = tuple(OWNERS)


@dataclass(frozen=True)
class TurnSearch:
    """What the memory browser asks of one session's turns."""

    text: str = ""
    by_meaning: bool = False
    start: datetime | None = None
    end: datetime | None = None
    page: int = 0


@dataclass(frozen=True)
class TurnPage:
    """One page of a session's turns as searched, and how many matched in all."""

    items: list[FoundTurn]
    total: int | None  # every match (a keyword search counts only when it fits one page)
    floor: float | None = None  # a meaning search's cut-off (None: not cut)
    capped: bool = False  # every turn a meaning search weighed passed: there may be more


CHART_MIN_DAYS = 7  # a chart fitted to its data still spans a week: one bar is no trend


@dataclass(frozen=True)
class DailyFigures:
    """The charts' data: one value per local day, oldest first."""

    days: tuple[date, ...]
    user_turns: tuple[int, ...]
    bot_turns: tuple[int, ...]
    metrics: dict[str, tuple[int, ...]]  # metric name -> one value per day

    def fitted(self, min_days: int = CHART_MIN_DAYS) -> DailyFigures:
        """The same figures from the first day with anything in them, or the last
        ``min_days`` if that is later: a bot running for three days gets no 27 empty days."""
        columns = (self.user_turns, self.bot_turns, *self.metrics.values())
        used = [i for i in range(len(self.days)) if any(c[i] for c in columns)]
        start = min(used[0] if used else len(self.days), max(len(self.days) - min_days, 0))
        return DailyFigures(
            days=self.days[start:],
            user_turns=self.user_turns[start:],
            bot_turns=self.bot_turns[start:],
            metrics={name: values[start:] for name, values in self.metrics.items()},
        )

    @property
    def today_turns(self) -> int:
        """Turns stored on the last day (today), the user's and the bot's."""
        return self.user_turns[-1] + self.bot_turns[-1] if self.days else 0


@dataclass(frozen=True)
class Headline:
    """The overview's row of figures that the database knows (the plugin adds what only the
    running bot knows: connected accounts, uptime, the database's reachability)."""

    today_turns: int
    sessions: int
    memories: dict[str, int]  # kind (facts, preferences, summary) -> current memories
    pending_embeddings: int  # turns stored without a vector (the embedder failed or lags)
    extraction_failed_today: int
    embedder_failing: bool = False  # the embedding API failed its calls in a row, none since


def session_search_text(text: str) -> str | None:
    """The case-folded substring a keyword search looks for (``None``: no filter)."""
    folded = normalize(text.strip()[:SEARCH_MAX_CHARS])
    return folded or None


@dataclass(frozen=True)
class GroupSwitches:
    """A group's run-time switches: its memory (``/群记忆``) and shared notes (``/群共享``)."""

    group_id: int
    memory_on: bool
    shared: bool


@dataclass(frozen=True)
class ChatNames:
    """What the chat client calls a session's person and group (``None``: it did not say)."""

    person: str | None = None
    group: str | None = None


def chat_of_key(session_key: str) -> tuple[int, int | None] | None:
    """The (user, group) of a stored session key (``models.generate_session_key``: ``[account/]
    [group:]user``); ``None`` for what is not one."""
    chat = session_key.rpartition("/")[2]
    group, colon, user = chat.rpartition(":")
    try:
        return int(user), int(group) if colon else None
    except ValueError:
        return None


# Asks the chat client for the names of (user, group) — the plugin passes one in when the bot
# is connected; the console falls back to the names stored with the turns.
NameLookup = Callable[[int, int | None], Awaitable[ChatNames]]


class MemoryConsole:
    """The console's operations over the parts of an open memory it uses: the database and
    its stores, the embedder (a search by meaning, an edited memory's vector) with the vector
    index and the backfill flag, the writer (a turn's edit), the group sharing and the
    retention policy (an unpinned turn's expiry)."""

    def __init__(
        self,
        *,
        settings: MemorySettings,
        database: Database,
        embedder: Embedder,
        vector_index: VectorIndex,
        backfill_due: DueFlag,
        writer: TurnWriter,
        sharing: GroupSharing,
        retention: RetentionPolicy | None,
        names: NameLookup | None = None,
    ) -> None:
        self._settings = settings
        self._database = database
        self._embedder = embedder
        self._vector_index = vector_index
        self._backfill_due = backfill_due
        self._writer = writer
        self._sharing = sharing
        self._retention = retention
        self.names = names

    @classmethod
    def from_parts(cls, parts: MemoryParts, names: NameLookup | None = None) -> MemoryConsole:
        """The console over the parts of an open memory (``open_memory``'s bundle)."""
        return cls(
            settings=parts.settings,
            database=parts.database,
            embedder=parts.embedder,
            vector_index=parts.vector_index,
            backfill_due=parts.backfill_due,
            writer=parts.writer,
            sharing=parts.sharing,
            retention=parts.retention,
            names=names,
        )

    def _store(self) -> PgAuditLogStore:
        return self._database.store(PgAuditLogStore)

    def _bin(self) -> PgRecycleBinStore:
        return self._database.store(PgRecycleBinStore)

    # ------------------------------------------------------------------ reading

    def _dialogues(self) -> PgAdminStore:
        return self._database.store(PgAdminStore)

    def _distilled(self) -> PgDistilledStore:
        return self._database.store(PgDistilledStore)

    async def sessions(
        self,
        *,
        chat_type: str | None = None,
        group_id: int | None = None,
        user_id: int | None = None,
        page: int = 0,
    ) -> list[SessionRow]:
        """Sessions with turns or distilled memories, most recently active first,
        ``PAGE_SIZE`` a page."""
        memory_sessions = await self._distilled().memory_sessions()
        listed = await self._dialogues().session_list(
            chat_type=chat_type,
            group_id=group_id,
            user_id=user_id,
            limit=PAGE_SIZE,
            offset=max(page, 0) * PAGE_SIZE,
            without_turns={k: v.last_at for k, v in memory_sessions.items()},
        )
        return await self._named(listed, memory_sessions)

    async def _named(
        self, listed: Sequence[SessionActivity], memory_sessions: dict[str, MemorySessionStats]
    ) -> list[SessionRow]:
        names = await self._dialogues().session_names([a.session_key for a in listed])
        asked = await self._chat_names(listed)
        return [
            SessionRow(
                session_key=a.session_key,
                user_id=a.user_id,
                group_id=a.group_id,
                chat_type=a.chat_type,
                turns=a.turns,
                last_at=a.last_at,
                name=told.person or names.get(a.session_key),
                memories=m.current if (m := memory_sessions.get(a.session_key)) else 0,
                group_name=told.group,
            )
            for a, told in zip(listed, asked, strict=True)
        ]

    async def _chat_names(self, listed: Sequence[SessionActivity]) -> list[ChatNames]:
        if self.names is None:
            return [ChatNames() for _ in listed]
        lookup = self.names
        return list(await asyncio.gather(*(lookup(a.user_id, a.group_id) for a in listed)))

    async def chat_names(self, session_keys: Sequence[str]) -> dict[str, ChatNames]:
        """What each session's person and group are called, for pages that list sessions by
        key (the audit log): the chat client's names, else the person's newest stored name."""
        chats = {k: c for k in dict.fromkeys(session_keys) if (c := chat_of_key(k)) is not None}
        stored = await self._dialogues().session_names(list(chats))
        told: dict[str, ChatNames] = {}
        if self.names is not None:
            asked = await asyncio.gather(*(self.names(*chat) for chat in chats.values()))
            told = dict(zip(chats, asked, strict=True))
        return {
            key: ChatNames(
                person=told.get(key, ChatNames()).person or stored.get(key),
                group=told.get(key, ChatNames()).group,
            )
            for key in chats
        }

    async def session(self, session_key: str) -> SessionRow | None:
        """The session, if it holds turns or distilled memories."""
        memory_sessions = await self._distilled().memory_sessions()
        activity = await self._dialogues().session_activity(session_key)
        if activity is None:
            if session_key not in memory_sessions:
                return None
            listed = await self._dialogues().session_list(
                chat_type=None, group_id=None, user_id=None, limit=1, offset=0,
                without_turns={session_key: memory_sessions[session_key].last_at},
                session_key=session_key,
            )  # fmt: skip
            if not listed:
                return None
            activity = listed[0]
        return (await self._named([activity], memory_sessions))[0]

    async def turns(self, session_key: str, search: TurnSearch) -> list[FoundTurn]:
        """One page of the session's turns (``search_turns`` without the count)."""
        return (await self.search_turns(session_key, search)).items

    @property
    def meaning_floor(self) -> float | None:
        """The cut-off of a meaning search: the one ``/recall`` lists by
        (``MEMORY_RECALL_FLOOR``, else the bundled model's measured floor when the memory runs
        it, else none), so both show the same memories for a question."""
        configured = self._settings.memory_recall_floor
        if configured is not None:
            return configured
        if self._embedder.model == LOCAL_EMBEDDING_MODEL:
            return BUNDLED_MODEL_RECALL_FLOOR
        return None

    async def search_turns(self, session_key: str, search: TurnSearch) -> TurnPage:
        """One page of the session's turns: newest first, or by meaning nearest first (only
        those at or above ``meaning_floor``), with how many matched.

        A search by meaning needs the embedder; when it fails this raises ``EmbeddingError``."""
        query = search.text.strip()[:SEARCH_MAX_CHARS]
        page = max(search.page, 0)
        if search.by_meaning and query:
            return await self._turns_by_meaning(session_key, query, search, page)
        containing = session_search_text(query)
        shown = TurnsShown(
            start=search.start,
            end=search.end,
            containing=containing,
            terms_query=tsquery_all(substring_terms(containing)) if containing else None,
            limit=PAGE_SIZE,
            offset=page * PAGE_SIZE,
        )
        rows = await self._dialogues().session_turns(session_key, shown)
        items = [FoundTurn(r.turn, None, r.pinned) for r in rows]
        counted = page == 0 and len(items) < PAGE_SIZE
        return TurnPage(items, len(items) if counted else None)

    async def _turns_by_meaning(
        self, session_key: str, query: str, search: TurnSearch, page: int
    ) -> TurnPage:
        """The nearest live turns at or above the floor, found the way recall finds them:
        exactly, or through the session's own vector index when it has one (a large
        session)."""
        vector = await self._embedder.embed_query(query)
        dialogue = self._database.store(PgRecallStore)
        scope = RecallScope(session_key)  # one session, as the console shows it
        size = await dialogue.session_size(scope)
        weighed = max(MEANING_SEARCH_MAX, (page + 1) * PAGE_SIZE)  # a later page: more
        nearest = await dialogue.anchor_candidates(
            scope=scope,
            model=self._embedder.model,
            query_vector=vector,
            now=datetime.now(timezone.utc),
            limit=weighed,
            index_dim=self._embedder.dim if self._vector_index.serves(session_key, size) else None,
            filters=AnchorFilters(start=search.start, end=search.end),
        )
        floor = self.meaning_floor
        relevant = [c for c in nearest if floor is None or c.similarity >= floor]
        chosen = relevant[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]
        turns = {
            r.turn.id: r
            for r in await self._dialogues().session_turns_by_ids(
                session_key, [c.id for c in chosen]
            )
        }
        items = [
            FoundTurn(turns[c.id].turn, c.similarity, turns[c.id].pinned)
            for c in chosen
            if c.id in turns
        ]
        # Nearest first: only a floor below every turn weighed can leave more beyond them.
        return TurnPage(items, len(relevant), floor, capped=len(relevant) >= weighed)

    async def memories(self, session_key: str, text: str = "") -> list[DistilledMemory]:
        """The session's distilled memories: current ones first, superseded ones as history."""
        return [m for m, _ in await self.shown_memories(session_key, text)]

    async def shown_memories(
        self, session_key: str, text: str = ""
    ) -> list[tuple[DistilledMemory, bool]]:
        """The session's distilled memories with whether each is pinned."""
        return await self._distilled().session_memories(
            session_key, containing=session_search_text(text), limit=MEMORY_LIMIT
        )

    async def sources(self, session_key: str, memory: DistilledMemory) -> list[MemoryTurn]:
        """The turns a distilled memory was drawn from (those still stored)."""
        if not memory.source_turn_ids:
            return []
        rows = await self._dialogues().session_turns_by_ids(session_key, memory.source_turn_ids)
        return [r.turn for r in rows]

    # ------------------------------------------------------------------ fixing

    async def _passage_vector(self, text: str) -> tuple[object | None, str | None]:
        """The text's embedding now, or none (the backfill embeds it later) if the embedder
        fails: an edit is never lost for want of a vector."""
        try:
            vectors = await self._embedder.embed_passages([text])
        except EmbeddingError:
            self._backfill_due.set()
            return None, None
        return vectors[0], self._embedder.model

    async def edit_turn(
        self, session_key: str, turn_id: int, text: str, *, actor: str
    ) -> MemoryTurn | None:
        """Replace a turn's text and everything derived from it, as a stored turn gets them
        (``TurnWriter.rewrite``); ``None`` if the session has no such turn. Raises
        ``InvalidTurnError`` for empty text."""

        async def audited(tx: Transaction, rewritten: Rewritten) -> None:
            edited = (rewritten.before, rewritten.turn)
            await self._audited_edit(tx, "turn", session_key, turn_id, edited, actor)

        rewritten = await self._writer.rewrite(turn_id, text, session_key=session_key, then=audited)
        return None if rewritten is None else rewritten.turn

    async def edit_memory(
        self, session_key: str, memory_id: int, text: str, *, actor: str
    ) -> DistilledMemory | None:
        """Replace a distilled memory's text (re-embedded); ``None`` if the session has none
        such. Raises ``InvalidTurnError`` for empty text, ``ConsoleConflictError`` when the
        session already holds the same current memory."""
        content = " ".join(clean_content(scrub(text), DISTILLED_MAX_CHARS).split())
        current = [m for m in await self.memories(session_key) if m.id == memory_id]
        if not current:
            return None
        vector, model = await self._passage_vector(
            embedding_text(current[0].kind, content, current[0].key_topics)
        )
        edit = MemoryEdit(
            content=content,
            content_hash=content_hash(content),
            embedding=vector,  # type: ignore[arg-type]
            embedding_model=model,
        )
        with conflicts_refused("这个会话已有一条内容相同的记忆"):
            async with self._database.transaction() as tx:
                edited = await tx.store(PgDistilledStore).edit_memory(session_key, memory_id, edit)
                return await self._audited_edit(
                    tx, "distilled", session_key, memory_id, edited, actor
                )

    async def _audited_edit(
        self,
        tx: Transaction,
        kind: str,
        session_key: str,
        item_id: int,
        edited: tuple[str, EditedT] | None,
        actor: str,
    ) -> EditedT | None:
        """Log an edit in its transaction (text before and after); the row after, if any."""
        if edited is None:
            return None
        before_text, after = edited
        audit = Audit(actor, "edit", kind, item_id, session_key, before_text, after.content)
        await tx.store(PgAuditLogStore).write_audit(audit)
        return after

    async def delete(
        self, kind: str, session_key: str, item_id: int, *, actor: str, now: datetime | None = None
    ) -> int | None:
        """Move a turn or distilled memory of this session into the recycle bin; the bin
        item's id, or ``None`` if there is no such row.

        A fact or preference takes the turns it was drawn from along, with the bot's replies to
        them and its later replies repeating them (``PgForgetStore.turns_to_forget``, the
        rule of a person's own delete); a turn takes the memories drawn from it (the 撤回
        rule). Each goes in as a bin item of its own, restored on its own."""
        if kind not in KINDS:
            raise InvalidTurnError(f"unknown kind {kind!r}")
        now = now or datetime.now(timezone.utc)
        async with self._database.transaction() as tx:
            along: list[tuple[str, int]] = []
            if kind == "distilled":
                along = [("turn", t) for t in await self._sources_to_bin(tx, session_key, item_id)]
            else:
                drawn = await tx.store(PgDistilledStore).drawn_from([item_id])
                along = [("distilled", m.id) for m in drawn if m.session_key == session_key]
            bin_id = await self._to_bin(tx, kind, session_key, item_id, actor=actor, now=now)
            if bin_id is None:
                return None
            for other_kind, other_id in along:
                await self._to_bin(tx, other_kind, session_key, other_id, actor=actor, now=now)
        return bin_id

    async def _sources_to_bin(self, tx: Transaction, session_key: str, memory_id: int) -> list[int]:
        """The turns a fact or preference of this session takes along into the bin."""
        found = await tx.store(PgDistilledStore).by_ids([memory_id])
        if not found or found[0].session_key != session_key or found[0].kind == "summary":
            return []  # a summary speaks of its whole batch: it takes none of it
        turns = await tx.store(PgForgetStore).turns_to_forget(
            session_key, found[0].source_turn_ids, None
        )
        return [t.id for t in turns]

    async def _to_bin(
        self, tx: Transaction, kind: str, session_key: str, item_id: int, *, actor: str,
        now: datetime,
    ) -> int | None:  # fmt: skip
        taken = await tx.store(OWNERS[kind]).take_row(session_key, item_id)
        if taken is None:
            return None
        keep = timedelta(days=self._settings.memory_recycle_days)
        bin_id = await tx.store(PgRecycleBinStore).to_bin(
            kind, taken, deleted_by=actor, purge_after=now + keep
        )
        # The text lives on in the bin alone (restorable there, purged with it): the log's
        # entries about the item lose theirs, and the delete's own entry holds none.
        audit = tx.store(PgAuditLogStore)
        await audit.forget_items(**{"turns" if kind == "turn" else "memories": [item_id]})
        await audit.write_audit(Audit(actor, "delete", kind, item_id, session_key))
        return bin_id

    async def delete_many(
        self,
        session_key: str,
        items: Sequence[tuple[str, int]],
        *,
        actor: str,
        now: datetime | None = None,
    ) -> int:
        """Move a selection of (kind, id) of this session into the bin, each item on its own
        (so each is restored on its own); how many were moved."""
        moved = 0
        for kind, item_id in items[:MEMORY_LIMIT]:
            if await self.delete(kind, session_key, item_id, actor=actor, now=now) is not None:
                moved += 1
        return moved

    async def pin(
        self, kind: str, session_key: str, item_id: int, *, pinned: bool, actor: str
    ) -> bool:
        """Pin a turn or distilled memory of this session (never expires, never merged away)
        or unpin it, audited; False if the session has no such row.

        An unpinned turn with a score gets the expiry its band gives from now, as if it had
        just been evaluated; one without keeps none until it is evaluated."""
        if kind not in KINDS:
            raise InvalidTurnError(f"unknown kind {kind!r}")
        async with self._database.transaction() as tx:
            text = await self._pin_row(tx, kind, session_key, item_id, pinned=pinned)
            if text is None:
                return False
            action = "pin" if pinned else "unpin"
            await tx.store(PgAuditLogStore).write_audit(
                Audit(actor, action, kind, item_id, session_key, before_text=text, after_text=text)
            )
        return True

    async def _pin_row(
        self, tx: Transaction, kind: str, session_key: str, item_id: int, *, pinned: bool
    ) -> str | None:
        """Pin or unpin the row in ``tx``; its text, or ``None`` if the session has no such row."""
        if kind != "turn":
            return await tx.store(PgDistilledStore).pin_memory(session_key, item_id, pinned=pinned)
        dialogues = tx.store(PgAdminStore)
        expires_at = None
        if not pinned:
            rows = await dialogues.session_turns_by_ids(session_key, [item_id])
            policy = self._retention
            score = rows[0].turn.score if rows else None
            if policy is not None and score is not None:
                expires_at = policy.expires_at(score, datetime.now(timezone.utc))
        return await dialogues.pin_turn(session_key, item_id, pinned=pinned, expires_at=expires_at)

    async def recycle_bin(self, session_key: str | None = None) -> list[BinItem]:
        return await self._bin().bin(session_key, MEMORY_LIMIT)

    async def recycle_bin_size(self) -> int:
        return await self._bin().bin_size()

    async def restore(self, bin_id: int, *, actor: str) -> BinItem | None:
        """Put a deleted row back as it was; ``None`` if the bin has no such item. Raises
        ``ConsoleConflictError`` when the same row was stored again meanwhile."""
        refused = "无法恢复：同一会话里已有一条内容相同的当前记忆（或同一条消息）"
        with conflicts_refused(refused):
            async with self._database.transaction() as tx:
                taken = await tx.store(PgRecycleBinStore).take_from_bin(bin_id)
                if taken is None:
                    return None
                item, row_data = taken
                await tx.store(OWNERS[item.kind]).put_back_row(row_data)
                await tx.store(PgAuditLogStore).write_audit(
                    Audit(actor, "restore", item.kind, item.item_id, item.session_key,
                          after_text=item.summary)
                )  # fmt: skip
        return item

    async def purge_recycle_bin(self, now: datetime | None = None) -> int:
        """Empty the bin of what was deleted more than ``MEMORY_RECYCLE_DAYS`` ago."""
        return await self._bin().purge_bin(now or datetime.now(timezone.utc))

    async def audit_log(self, page: int = 0) -> list[AuditEntry]:
        return await self._store().audit_log(PAGE_SIZE, max(page, 0) * PAGE_SIZE)

    async def group_switches(self) -> list[GroupSwitches]:
        """Every group with turns, switched off or shared, and its two switches."""
        chats = await self._database.store(PgOptOutStore).chats(EVERYONE)
        off = {int(chat) for chat in chats if chat.isdigit()}
        shared = await self._sharing.shared_groups()
        groups = set(await self._dialogues().groups_with_turns(MEMORY_LIMIT)) | off | shared
        return [GroupSwitches(g, g not in off, g in shared) for g in sorted(groups)]

    async def switch_group_sharing(self, group_id: int, *, on: bool, actor: str) -> bool:
        """Share a group's memory among its members or stop (like ``/群共享``), audited;
        whether it changed."""
        try:
            async with self._database.transaction() as tx:
                changed = await self._sharing.switch(group_id, on=on, by=None, within=tx)
                if changed:
                    await _audit_switch(tx, actor, "group_sharing", group_id, on=on)
        except BaseException:
            self._sharing.forget_kept(group_id)  # rolled back: recall must not see it
            raise
        return changed

    async def switch_group(self, group_id: int, *, on: bool, actor: str) -> bool:
        """Switch a group's memory on or off (like ``/群记忆``), audited; whether it changed."""
        async with self._database.transaction() as tx:
            changed = await switch_group_memory(tx, group_id, on=on)
            if changed:
                await _audit_switch(tx, actor, "group_switch", group_id, on=on)
        return changed

    # ------------------------------------------------------------------ figures

    async def headline(self, figures: DailyFigures) -> Headline:
        """The overview's headline figures; today's from ``figures`` (read at the same time)."""
        distilled = self._distilled()
        memory_sessions = await distilled.memory_sessions()
        counts = await distilled.counts(every_account=True)
        dialogues = self._dialogues()
        failed = figures.metrics.get(EXTRACTION_FAILED, ())
        return Headline(
            today_turns=figures.today_turns,
            sessions=await dialogues.session_count(list(memory_sessions)),
            memories={kind: current for kind, (current, _) in counts.items()},
            pending_embeddings=await dialogues.count_pending_embeddings(),
            extraction_failed_today=failed[-1] if failed else 0,
            embedder_failing=is_failing(self._embedder),
        )

    async def daily_figures(self, days: int = 30, now: datetime | None = None) -> DailyFigures:
        """Turns stored per day and the daily counters, for the last ``days`` local days."""
        now = now or datetime.now(timezone.utc)
        tz = self._settings.tz
        today = now.astimezone(tz).date()
        first = today - timedelta(days=days - 1)
        since = datetime.combine(first, datetime.min.time(), tz)
        per_day = {d: (u, b) for d, u, b in await self._dialogues().turns_per_day(since, tz.key)}
        metrics: dict[str, dict[date, int]] = {}
        counters = self._database.store(PgCounterStore)
        for day, metric, value in await counters.metrics_since(first):
            metrics.setdefault(metric, {})[day] = value
        span = tuple(first + timedelta(days=i) for i in range(days))
        return DailyFigures(
            days=span,
            user_turns=tuple(per_day.get(d, (0, 0))[0] for d in span),
            bot_turns=tuple(per_day.get(d, (0, 0))[1] for d in span),
            metrics={m: tuple(v.get(d, 0) for d in span) for m, v in metrics.items()},
        )


async def _audit_switch(
    tx: Transaction, actor: str, action: str, group_id: int, *, on: bool
) -> None:
    """A group switch's audit entry, written in the switch's own transaction."""
    audit = Audit(actor, action, "group", group_id, None, after_text="开" if on else "关")
    await tx.store(PgAuditLogStore).write_audit(audit)
