"""What a /forget or a 撤回 takes of distilled memory and of the answer cache.

Facts, preferences and summaries of a scope, and its cached answers, go with the scope's
dialogue turns (``Forgetting.forget``); the memories drawn from deleted turns and the
answers their senders were given since go with those turns (``Forgetting.delete_message``,
``personal.forget_named``), and the audit log's texts of all of them
(``PgAuditLogStore.forget_items``). Each returns a ``Forgotten`` with its dialogue turns left
at 0: the caller counts those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..answer_cache.store import PgAnswerCacheStore
from ..dialogue.forget_store import DeletedTurn
from ..models import ForgetScope, Forgotten
from ..storage.audit_log import PgAuditLogStore
from ..storage.database_handle import Database, Transaction
from .store import PgDistilledStore


async def forget_scope(database: Database, scope: ForgetScope) -> Forgotten:
    """Delete ``scope``'s distilled memories and cached answers; returns what went."""
    by_kind = await database.store(PgDistilledStore).delete_scope(scope)
    return _forgotten(by_kind, await database.store(PgAnswerCacheStore).delete_scope(scope))


async def count_scope(database: Database, scope: ForgetScope) -> Forgotten:
    """What ``forget_scope`` would delete now."""
    by_kind = await database.store(PgDistilledStore).count_scope(scope)
    return _forgotten(by_kind, await database.store(PgAnswerCacheStore).count_scope(scope))


async def forget_turns(stores: Database | Transaction, turns: Sequence[DeletedTurn]) -> Forgotten:
    """Forget what deleted turns fed: distilled memories drawn from them, the cached answers
    of their users since the earliest of them, and the audit log's texts of those turns and
    memories (in ``stores``: a transaction, or the database's pool)."""
    if not turns:
        return Forgotten()
    turn_ids = [t.id for t in turns]
    by_kind = await stores.store(PgDistilledStore).delete_from_sources(turn_ids)
    drawn = [memory_id for ids in by_kind.values() for memory_id in ids]
    await stores.store(PgAuditLogStore).forget_items(turns=turn_ids, memories=drawn)
    cached = 0
    for user_id in {t.user_id for t in turns}:
        since = min(t.created_at for t in turns if t.user_id == user_id)
        cached += await stores.store(PgAnswerCacheStore).delete_user_since(user_id, since)
    return _forgotten({kind: len(ids) for kind, ids in by_kind.items()}, cached)


def _forgotten(by_kind: Mapping[str, int], cached_answers: int) -> Forgotten:
    return Forgotten(
        facts=by_kind.get("facts", 0),
        preferences=by_kind.get("preferences", 0),
        summaries=by_kind.get("summary", 0),
        cached_answers=cached_answers,
    )
