"""``Forgetting``: what /forget and a 撤回 (recalled QQ message) delete, across every owner.

A scope's or a recalled message's turns go from the dialogue (``dialogue.forget_store``), with
the distilled memories and cached answers drawn from them (``distill.forgetting``) and, for a
scope, the recycle bin's copies (``storage.recycle_bin``) and the audit log's texts
(``storage.audit_log``). While the database cannot be reached
or refuses writes, the request waits in the spool (``TurnWriter.keep_forget`` /
``keep_recall``) and is done when the spool is flushed (``spooled_scope`` /
``spooled_recall``).
"""

from __future__ import annotations

import dataclasses
import logging

from .accounts import AccountBook, serving
from .conversation.citation import Citations
from .dialogue.forget_store import PgForgetStore, recalled_by
from .dialogue.spool import failure_text, is_bad_item
from .dialogue.upkeep_store import PgUpkeepStore
from .dialogue.writing import TurnWriter
from .distill.forgetting import count_scope, forget_scope, forget_turns
from .errors import StorageError
from .models import ForgetScope, Forgotten, RecalledMessage
from .storage.audit_log import PgAuditLogStore
from .storage.database_handle import Database
from .storage.recycle_bin import PgRecycleBinStore

log = logging.getLogger(__name__)


class Forgetting:
    """Deletes a /forget scope or a recalled message everywhere it is kept (see the module
    docstring), and does what waited in the spool (``flush_spool``)."""

    def __init__(
        self, database: Database, writer: TurnWriter, accounts: AccountBook, citations: Citations
    ) -> None:
        self._database = database
        self._writer = writer
        self._accounts = accounts
        self._citations = citations  # what no reply may quote while a forget deletes it

    async def delete_message(self, message: RecalledMessage) -> Forgotten | None:
        """Forget a recalled (撤回) QQ message: its turn, the bot's reply to it and its later
        replies repeating it (``lang.repeats``), the distilled memories drawn from any of them
        and the sender's answers cached since. Returns what went,
        or ``None`` when the database is unreachable or refuses writes: the recall is then
        spooled and done once it takes them again."""
        # The spool and the dead-letter file first: a turn refused or not yet written is
        # deleted there, and a flush must not write a spooled one back after the delete.
        await self._writer.forget_spooled(lambda turn: recalled_by(message, turn))
        try:
            return await self._forget_recalled(message)
        except StorageError as exc:
            if is_bad_item(exc):
                raise
            await self._writer.keep_recall(message, exc)
            return None

    async def _forget_recalled(self, message: RecalledMessage) -> Forgotten:
        turns = await self._database.store(PgForgetStore).delete_recalled(message)
        # The cached answers go in the recalling account's memory, also when a spooled recall
        # is done later, outside the event that brought it.
        store = self._database.store(PgUpkeepStore)
        with serving(await self._accounts.decide(store, message.self_id), message.self_id):
            distilled = await forget_turns(self._database, turns)
        replies = sum(1 for t in turns if t.role == "assistant")
        return dataclasses.replace(distilled, dialogues=len(turns), bot_replies=replies)

    async def forget(self, scope: ForgetScope) -> Forgotten:
        """Delete the memories of ``scope``: a group session (user+group), a user's private
        chat (user+private_only), all of a user's rows (user), a whole group (group) or
        everything.

        The scope's turns — stored, and still waiting in the spool — distilled memories and
        cached answers all go; returns how many of each. When the database cannot be reached
        or refuses writes, the spooled turns go now and the request waits in the spool for the
        rest (``Forgotten.deferred``)."""
        # No reply quotes what it takes from the moment it is asked (``Citations``).
        async with self._citations.forgetting_scope(scope):
            # The spool first: a flush between the two steps could write its turns back.
            spooled = await self._writer.forget_spooled(scope)
            try:
                forgotten = await self._forget_stored(await self._decided(scope))
            except StorageError as exc:
                if is_bad_item(exc):
                    raise
                await self._writer.keep_forget(scope, exc)
                self._citations.hold_back(scope)
                log.warning("forget deferred until the database is back: %s", failure_text(exc))
                return Forgotten(dialogues=spooled, deferred=True)
        forgotten = dataclasses.replace(forgotten, dialogues=forgotten.dialogues + spooled)
        log.info(
            "forgot %d turn(s), %d fact(s), %d preference(s), %d summar(ies), %d cached answer(s)",
            forgotten.dialogues,
            forgotten.facts,
            forgotten.preferences,
            forgotten.summaries,
            forgotten.cached_answers,
        )
        return forgotten

    async def count_forget(self, scope: ForgetScope) -> Forgotten:
        """What ``forget`` of ``scope`` would delete from the database now, by kind: the
        figures a /forget question names before it asks. Turns still in the spool are not
        counted (``forget`` takes them too). ``StorageError`` when the database cannot say."""
        scope = await self._decided(scope)
        dialogues = await self._database.store(PgForgetStore).count_scope(scope)
        distilled = await count_scope(self._database, scope)
        return dataclasses.replace(distilled, dialogues=dialogues)

    async def _decided(self, scope: ForgetScope) -> ForgetScope:
        """``scope`` in its QQ account's memory: one asked while the first account was not
        known gets it from the bot it was asked through (``AccountBook.decide``)."""
        if scope.account is not None:
            return scope
        store = self._database.store(PgUpkeepStore)
        return dataclasses.replace(scope, account=await self._accounts.decide(store, scope.self_id))

    async def _forget_stored(self, scope: ForgetScope) -> Forgotten:
        deleted = await self._database.store(PgForgetStore).delete_scope(scope)
        distilled = await forget_scope(self._database, scope)
        # What the console deleted of that scope goes too: the recycle bin keeps copies; and
        # the audit log keeps the texts the console and the agents wrote or read.
        await self._database.store(PgRecycleBinStore).delete_scope(scope)
        await self._database.store(PgAuditLogStore).forget_scope(scope)
        return dataclasses.replace(distilled, dialogues=deleted)

    async def spooled_recall(self, recalled: RecalledMessage) -> int:
        """Do a 撤回 that waited in the spool (``TurnWriter.flush_spool``); turns deleted."""
        return (await self._forget_recalled(recalled)).dialogues

    async def spooled_scope(self, scope: ForgetScope) -> int:
        """Do a /forget that waited in the spool (``TurnWriter.flush_spool``); turns deleted."""
        forgotten = await self._forget_stored(await self._decided(scope))
        self._citations.let_go(scope)
        log.info("a /forget made while the database was unreachable is done: %s", forgotten)
        return forgotten.dialogues

    async def flush_spool(self) -> int:
        """Write spooled turns to the database, then do the 撤回 and /forget requests that
        waited in the spool meanwhile (``spooled_recall``, ``spooled_scope``); returns how
        many turns were new.

        Each item on its own terms (``memory_core.dialogue.spool``): a bad one goes to the
        dead-letter file, the others are written. When the database is lost or refuses writes,
        what was done is kept and the failure (``StorageError``) is raised; the rest waits.
        """
        return await self._writer.flush_spool(self.spooled_recall, self.spooled_scope)
