"""The memory as another agent reaches it (``agents.mcp_server``): recall, remember, forget,
and finding a person by name.

Each is the operation of a chat command, on the same core functions and the same scope: a
person (``user_id``) in one chat (``group_id``, or the private chat without one).

* ``recall`` is ``/recall``: ``recall.listing.list_recall``, what a person is shown (relevant
  turns and facts only), after the session's earlier messages are stored and embedded;
* ``remember`` is ``/remember``: the text stored as the person's own turn in that chat, in
  order with the chat (``ConversationEngine.record``), under the name given or else the one
  the person was last seen under there; a text the person already said there is not stored
  again (the existing turn's id is the answer);
* ``forget`` is ``/forget`` alone (that chat, everything of the person there) or, with ``ids``,
  ``/忘记 <编号>`` (``personal.forget_memories``: those facts or preferences and the turns
  they were drawn from);
* ``find_people`` names the ids: the chats whose person's newest stored name contains a text
  (``dialogue.people_store``), never a chat where that person opted out.

A person who opted out of a chat (``/不记我``, or a group switched off) is neither remembered
nor recalled there through an agent; forgetting is always allowed. Every call, read or change,
writes an entry to the console's audit log naming ``actor``, so the operator sees what agents
did (a forget's entry is written after the delete: ``Forgetting.forget`` owns its
transactions). With the database away a note is spooled and a forget deferred, as from the chat;
their entries are then lost (logged), and a recall is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..conversation.engine import ConversationEngine
from ..dialogue.people_store import PgPeopleStore
from ..dialogue.turn_rows import SENDER_NAME_MAX
from ..errors import MemoryCoreError, StorageError
from ..lang.text import scrub
from ..models import ForgetScope, Forgotten, MemoryTurn, TurnInput, generate_session_key
from ..parts import MemoryParts
from ..personal import forget_memories
from ..recall.listing import FACTS, list_recall
from ..storage.audit_log import Audit, PgAuditLogStore
from ..storage.opt_outs import EVERYONE, EVERYWHERE, PgOptOutStore, chat_name

log = logging.getLogger(__name__)

RECALL_ITEMS = FACTS
"""Facts a recall lists (``/recall``'s five); its turns are the prompt's lines unless the caller
gives ``top_n``."""
MAX_RECALL_ITEMS = 50
MAX_TEXT_CHARS = 500
"""The longest query or note, as a chat command's argument (the plugin's
``COMMAND_ARG_MAX_CHARS``): a note is a line to remember, not a document."""
MAX_FORGET_IDS = 200
FOUND_CHATS = 20
"""The most chats ``find_people`` lists: a name is for picking one, not for listing everyone."""


# How a forget's audit entry names what went (the operator reads it in Chinese).
FORGOTTEN_ZH = {
    "dialogues": "对话",
    "bot_replies": "机器人的回复",
    "facts": "事实",
    "preferences": "偏好",
    "summaries": "摘要",
    "cached_answers": "缓存的回答",
}


class AgentRefusal(MemoryCoreError):
    """A call the memory will not carry out (bad arguments, an opted-out person); the text is
    what the calling agent is told."""


@dataclass(frozen=True)
class AgentMemory:
    """The three operations over the parts of one open memory. ``engine`` keeps each call in
    order with the chat's own messages (the bot's engine; the stdio server makes one without a
    model); ``actor`` names the caller in the audit log."""

    parts: MemoryParts
    engine: ConversationEngine
    actor: str

    async def recall(
        self, user_id: int, query: str, group_id: int | None = None, top_n: int | None = None
    ) -> dict[str, Any]:
        """What ``/recall <query>`` lists for ``user_id`` in that chat, each with its id: the
        dialogue lines the bot's prompt would carry for ``query`` (``recall.listing``), or
        with ``top_n`` at most that many relevant turns, best first; and the relevant facts."""
        _check_ids(user_id, group_id)
        items = top_n
        if items is not None and not 1 <= items <= MAX_RECALL_ITEMS:
            raise AgentRefusal(f"top_n must be between 1 and {MAX_RECALL_ITEMS}")
        query = _bounded(" ".join(query.split()), "query")
        await self._refuse_opted_out(user_id, group_id)
        parts = self.parts
        async with self.engine.session(user_id, group_id):
            await parts.writer.settle_embeddings(parts.settings.embedding_store_deadline)
            now = datetime.now(timezone.utc)
            listing = await list_recall(
                parts, user_id, query, group_id, now=now, items=items,
                max_tokens=self.engine.preparer.memory_tokens(group_id, now),
            )  # fmt: skip
        turns = [self._turn(t) for t in listing.turns]
        facts = [
            {
                "id": hit.memory.id,
                "kind": hit.memory.kind,
                "content": hit.memory.content,
                "last_confirmed": self._time(hit.memory.last_confirmed),
            }
            for hit in listing.facts
        ]
        await self._audit(
            "recall", "query", None, user_id, group_id,
            before=query, after=f"对话 {len(turns)} 条，事实 {len(facts)} 条",
        )  # fmt: skip
        return {
            "user_id": user_id,
            "group_id": group_id,
            "query": query,
            "turns": turns,
            "facts": facts,
        }

    async def remember(
        self, user_id: int, text: str, group_id: int | None = None, name: str | None = None
    ) -> dict[str, Any]:
        """Store ``text`` as a note of ``user_id`` in that chat (``/remember``) under ``name``
        (by default the name they were last seen under there); its turn id. A text they
        already said there is not stored twice: the answer names that turn (``duplicate``)."""
        _check_ids(user_id, group_id)
        text = _bounded(text.strip(), "text")
        name = _name(name)
        people = self.parts.database.store(PgPeopleStore)
        key = generate_session_key(user_id, group_id)
        try:
            await self._refuse_opted_out(user_id, group_id)
            # After the chat's earlier messages are stored: the same text of the same person
            # in the same chat is one memory, and an agent that retries, or notes what was
            # just said, gets the turn that holds it.
            async with self.engine.session(user_id, group_id):
                same = await people.same_turn(key, scrub(text))
                name = name or await people.newest_name(key)
            if same is not None:
                await self._audit("remember", "turn", same, user_id, group_id, after=text)
                return {"stored": True, "id": same, "spooled": False, "duplicate": True,
                        "name": name}  # fmt: skip
        except StorageError:
            # The database is away: the note goes to the spool like a chat message, and the
            # spool's flush honours an opt-out all the same (storage.opt_outs).
            log.info("opt-outs unreadable, the note of %s is kept for the spool", user_id)
        turn = TurnInput(
            user_id=user_id, group_id=group_id, role="user", content=text, sender_name=name
        )
        self.parts.writer.check_turn(turn)  # InvalidTurnError (too long, …) says why
        outcome = await self.engine.record(turn)
        if outcome is None or outcome.failed or outcome.dead_lettered:
            raise AgentRefusal("the note could not be stored (see the bot's log)")
        if outcome.opted_out:  # opted out between the check and the write
            raise AgentRefusal(_OPTED_OUT)
        stored = outcome.turn
        await self._audit(
            "remember", "turn", stored.id if stored else None, user_id, group_id, after=text
        )
        return {
            "stored": stored is not None,
            "id": stored.id if stored else None,
            # The database is away: the note waits in the local spool and is written later.
            "spooled": outcome.spooled,
            "duplicate": outcome.duplicate,
            "name": name,
        }

    async def find_people(self, text: str) -> dict[str, Any]:
        """The chats (at most ``FOUND_CHATS``) whose person's newest name contains ``text``,
        last seen first: their ``user_id`` and ``group_id`` for the other operations. A person
        is not found in a chat they opted out of, nor anyone in a group switched off."""
        text = _bounded(" ".join(text.split()), "text", SENDER_NAME_MAX)
        found = await self.parts.database.store(PgPeopleStore).chats_named(text, FOUND_CHATS)
        chats = [
            {
                "user_id": chat.user_id,
                "group_id": chat.group_id,
                "name": chat.name,
                "last_seen": self._time(chat.last_seen),
            }
            for chat in found
        ]
        # One entry per chat found, in that chat's session: the name searched is forgotten with
        # the person (``PgAuditLogStore.forget_scope``). A search that found no one keeps no
        # text: the name may be someone's remembered later.
        for chat in found:
            await self._audit("find", "people", None, chat.user_id, chat.group_id, before=text)
        if not found:
            await self._audit("find", "people", None, None, None, after="0")
        return {"text": text, "chats": chats}

    async def forget(
        self, user_id: int, group_id: int | None = None, ids: Sequence[int] | None = None
    ) -> dict[str, Any]:
        """Without ``ids``: everything of ``user_id`` in that chat (``/forget``). With them:
        those distilled memories (the ids ``recall`` lists under facts) and the turns they
        were drawn from (``/忘记 <编号>``). What went, by kind; others' rows never."""
        _check_ids(user_id, group_id)
        chosen = tuple(dict.fromkeys(ids or ()))
        if len(chosen) > MAX_FORGET_IDS:
            raise AgentRefusal(f"at most {MAX_FORGET_IDS} ids at a time")
        async with self.engine.session(user_id, group_id):
            if ids is not None and not chosen:
                forgotten = Forgotten()  # an empty list names nothing: nothing goes
            elif chosen:
                forgotten = await forget_memories(
                    self.parts.database, self.parts.spool, user_id, group_id, chosen
                )
            elif group_id is None:
                scope = ForgetScope(user_id=user_id, private_only=True)
                forgotten = await self.parts.forgetting.forget(scope)
            else:
                scope = ForgetScope(user_id=user_id, group_id=group_id)
                forgotten = await self.parts.forgetting.forget(scope)
        went = {
            "dialogues": forgotten.dialogues,
            "bot_replies": forgotten.bot_replies,
            "facts": forgotten.facts,
            "preferences": forgotten.preferences,
            "summaries": forgotten.summaries,
            "cached_answers": forgotten.cached_answers,
        }
        what = "、".join(f"{FORGOTTEN_ZH[kind]} {n} 条" for kind, n in went.items() if n)
        named = "、".join(f"#{i}" for i in chosen) if ids is not None else "整个会话"
        await self._audit(
            "forget", "distilled" if ids is not None else "session", None, user_id, group_id,
            before=named, after=what or "没有可删的",
        )  # fmt: skip
        return {**went, "deferred": forgotten.deferred}

    async def _refuse_opted_out(self, user_id: int, group_id: int | None) -> None:
        """``AgentRefusal`` when ``user_id`` opted out of this chat (or of every chat), or the
        group's memory is switched off."""
        store = self.parts.database.store(PgOptOutStore)
        chat = chat_name(group_id)
        off = bool({EVERYWHERE, chat} & await store.chats(user_id))
        if not off and group_id is not None:
            off = chat in await store.chats(EVERYONE)
        if off:
            raise AgentRefusal(_OPTED_OUT)

    async def _audit(
        self,
        action: str,
        kind: str,
        item_id: int | None,
        user_id: int | None,
        group_id: int | None,
        *,
        before: str | None = None,
        after: str | None = None,
    ) -> None:
        session_key = None if user_id is None else generate_session_key(user_id, group_id)
        entry = Audit(self.actor, action, kind, item_id, session_key, before, after)
        try:
            await self.parts.database.store(PgAuditLogStore).write_audit(entry)
        except StorageError as exc:
            # Only after a note was spooled or a forget deferred (anything else needed the
            # database first): the call is done, its entry cannot be written.
            log.warning("audit entry of %s %s %s lost: %s", self.actor, action, session_key, exc)

    def _time(self, moment: datetime) -> str:
        return moment.astimezone(self.parts.tz).isoformat()

    def _turn(self, turn: MemoryTurn) -> dict[str, Any]:
        return {
            "id": turn.id,
            "role": turn.role,
            "content": turn.content,
            "created_at": self._time(turn.created_at),
            "user_id": turn.user_id,
            "group_id": turn.group_id,
            "sender_name": turn.sender_name,
        }


_OPTED_OUT = (
    "this person asked not to be remembered in this chat (/不记我), or the group's memory is "
    "switched off: nothing is stored or recalled here"
)


def _bounded(text: str, name: str, most: int = MAX_TEXT_CHARS) -> str:
    if not text:
        raise AgentRefusal(f"{name} is empty")
    if len(text) > most:
        raise AgentRefusal(f"{name} has {len(text)} characters; at most {most}")
    return text


def _name(name: str | None) -> str | None:
    """A sender name as given (blank: none), as long as a QQ name may be."""
    name = " ".join((name or "").split())
    return _bounded(name, "name", SENDER_NAME_MAX) if name else None


def _check_ids(user_id: int, group_id: int | None) -> None:
    if user_id <= 0 or (group_id is not None and group_id <= 0):
        raise AgentRefusal("user_id and group_id are positive QQ numbers")
