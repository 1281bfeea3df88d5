"""Distilled memory on the embedded PostgreSQL: dedupe, merge, supersession, scope, ranking,
maintenance, forget and re-embedding."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core import open_memory
from memory_core.distill.memory import ExtractedMemory, dedupe_threshold, memory_score
from memory_core.models import ForgetScope
from memory_core.settings import LOCAL_EMBEDDING_MODEL, MemorySettings
from tests.fakes import HashingEmbedder

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
GROUP_A, GROUP_B = 1001, 1002


def fact(content: str, **extra) -> ExtractedMemory:
    return ExtractedMemory(
        kind="facts", content=content, category="personal_info", score=0.8, **extra
    )


def pref(content: str, **extra) -> ExtractedMemory:
    return ExtractedMemory(kind="preferences", content=content, category="content", **extra)


async def rows(memory, sql: str, *args):
    async with memory.parts.database.pool.acquire() as conn:  # test-only read of raw columns
        return await conn.fetch(sql, *args)


async def test_exact_duplicates_raise_times_mentioned_instead_of_adding_rows(memory_factory):
    memory = await memory_factory()
    first = await memory.parts.keeper.save(
        [fact("用户住在北京")], 1, source_turn_ids=[1, 2], stated_at=T0
    )
    again = await memory.parts.keeper.save(
        [fact("用户住在北京。"), fact("  用户住在北京  ")],
        1,
        source_turn_ids=[2, 7],
        stated_at=T0 + timedelta(days=3),
    )
    assert (first.added, again.added, again.confirmed) == (1, 0, 2)
    [row] = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(days=4))
    assert row.times_mentioned == 3
    assert row.first_seen == T0 and row.last_confirmed == T0 + timedelta(days=3)
    assert row.source_turn_ids == (1, 2, 7)
    assert row.importance > 0.8  # repetition raises importance


async def test_near_duplicates_merge_but_a_changed_place_does_not_even_when_the_cosine_passes(
    memory_factory,
):
    # The hashing embedder puts these pairs at cosine ~0.77 and ~0.60; 0.55 lets both through,
    # so what keeps the move apart is the restatement test, as it must be with e5 (see
    # memory_core.distill.memory: e5 puts 住在北京 / 住在上海 at 0.979).
    memory = await memory_factory(memory_dedupe_threshold=0.55)
    await memory.parts.keeper.save([fact("用户喜欢喝咖啡"), fact("用户住在北京")], 1, stated_at=T0)
    outcome = await memory.parts.keeper.save(
        [fact("用户很喜欢喝咖啡"), fact("用户住在上海")], 1, stated_at=T0 + timedelta(hours=1)
    )
    assert (outcome.merged, outcome.added) == (1, 1)
    facts = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(days=1))
    assert sorted((f.content, f.times_mentioned) for f in facts) == [
        ("用户住在上海", 1),
        ("用户住在北京", 1),
        ("用户喜欢喝咖啡", 2),
    ]


async def test_a_contradicting_fact_supersedes_the_old_one_which_stays_as_history(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.keeper.save([fact("用户住在北京")], 1, stated_at=T0)
    [old] = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0)
    moved_at = T0 + timedelta(days=30)
    outcome = await memory.parts.keeper.save(
        [fact("用户搬到上海了", replaces=(old.id,))], 1, stated_at=moved_at
    )
    assert (outcome.added, outcome.superseded) == (1, 1)

    later = moved_at + timedelta(days=1)
    current = await memory.parts.keeper.recall_by_type(1, None, "facts", now=later)
    assert [f.content for f in current] == ["用户搬到上海了"]
    recalled = await memory.parts.keeper.recall(1, None, "用户住在哪里", now=later)
    assert [h.memory.content for h in recalled] == ["用户搬到上海了"]

    history = await memory.parts.keeper.recall_by_type(
        1, None, "facts", now=later, include_history=True
    )
    old_row = next(f for f in history if f.content == "用户住在北京")
    assert old_row.valid_until == moved_at and old_row.superseded_by == current[0].id
    assert not old_row.current

    # Asked as of a moment before the move, Beijing was still true.
    before = await memory.parts.keeper.recall_by_type(
        1, None, "facts", now=moved_at - timedelta(days=1)
    )
    assert [f.content for f in before] == ["用户住在北京"]


async def test_replaces_never_touches_another_users_memory(memory_factory):
    memory = await memory_factory()
    await memory.parts.keeper.save([fact("用户住在北京")], 2, stated_at=T0)
    [theirs] = await memory.parts.keeper.recall_by_type(2, None, "facts", now=T0)
    outcome = await memory.parts.keeper.save(
        [fact("用户住在上海", replaces=(theirs.id,)), fact("用户养猫", same_as=theirs.id)],
        1,
        stated_at=T0,
    )
    assert (outcome.superseded, outcome.added) == (0, 2)
    [still] = await memory.parts.keeper.recall_by_type(2, None, "facts", now=T0)
    assert still.current and still.times_mentioned == 1


async def test_a_fact_told_in_one_group_is_not_recalled_in_another_group_or_in_private(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.keeper.save([fact("用户在杭州上班")], 1, GROUP_A, stated_at=T0)
    now = T0 + timedelta(hours=1)
    found = await memory.parts.keeper.recall(1, GROUP_A, "用户在哪上班", now=now)
    assert [h.memory.content for h in found] == ["用户在杭州上班"]
    assert await memory.parts.keeper.recall(1, GROUP_B, "用户在哪上班", now=now) == []
    assert await memory.parts.keeper.recall(1, None, "用户在哪上班", now=now) == []
    assert await memory.parts.keeper.recall(2, GROUP_A, "用户在哪上班", now=now) == []
    assert await memory.parts.keeper.recall_by_type(1, None, "facts", now=now) == []


async def test_the_user_scope_recalls_a_users_facts_across_chats_once(memory_factory):
    memory = await memory_factory(memory_distilled_scope="user")
    await memory.parts.keeper.save([fact("用户在杭州上班")], 1, GROUP_A, stated_at=T0)
    await memory.parts.keeper.save([fact("用户在杭州上班")], 1, None, stated_at=T0)
    now = T0 + timedelta(hours=1)
    for group in (GROUP_A, GROUP_B, None):
        found = await memory.parts.keeper.recall(1, group, "用户在哪上班", now=now)
        assert [h.memory.content for h in found] == ["用户在杭州上班"], group
        by_type = await memory.parts.keeper.recall_by_type(1, group, "facts", now=now)
        assert [f.content for f in by_type] == ["用户在杭州上班"], group
    assert await memory.parts.keeper.recall(2, GROUP_A, "用户在哪上班", now=now) == []


def test_ranking_combines_similarity_decay_importance_and_use():
    base = memory_score(0.9, age_days=0, importance=0.5, access_count=0)
    assert memory_score(0.9, age_days=100, importance=0.5, access_count=0) < base
    assert memory_score(0.9, age_days=0, importance=1.0, access_count=0) > base
    assert memory_score(0.9, age_days=0, importance=0.5, access_count=5) > base
    assert memory_score(0.8, age_days=0, importance=0.5, access_count=0) < base
    # access frequency is capped: a thousand uses are worth ten
    assert memory_score(0.9, age_days=0, importance=0.5, access_count=1000) == memory_score(
        0.9, age_days=0, importance=0.5, access_count=10
    )


async def test_recall_counts_use_and_use_raises_importance(memory_factory):
    memory = await memory_factory()
    await memory.parts.keeper.save([fact("用户养了一只猫")], 1, stated_at=T0)
    for _ in range(3):
        await memory.parts.keeper.recall(1, None, "用户的宠物", now=T0 + timedelta(hours=1))
    [row] = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(hours=2))
    assert row.access_count == 3 and row.last_accessed_at == T0 + timedelta(hours=1)
    assert row.importance == pytest.approx(0.8 + 3 * 0.02)


async def test_of_two_equally_similar_memories_the_more_important_ranks_first(memory_factory):
    memory = await memory_factory()
    await memory.parts.keeper.save(
        [
            ExtractedMemory(kind="facts", content="用户喜欢红色", score=0.2),
            ExtractedMemory(kind="facts", content="用户喜欢绿色", score=1.0),
        ],
        1,
        stated_at=T0,
    )
    found = await memory.parts.keeper.recall(1, None, "用户喜欢什么颜色", top_k=2, now=T0)
    assert found[0].similarity == pytest.approx(found[1].similarity)
    assert [h.memory.content for h in found] == ["用户喜欢绿色", "用户喜欢红色"]


async def test_maintenance_merges_duplicates_stored_without_embeddings_and_keeps_the_older(
    memory_factory, hashing_embedder
):
    memory = await memory_factory(memory_dedupe_threshold=0.6)
    hashing_embedder.fail = True  # no embedding: no near-duplicate check at save time
    await memory.parts.keeper.save([fact("用户喜欢喝咖啡")], 1, stated_at=T0)
    await memory.parts.keeper.save(
        [fact("用户很喜欢喝咖啡"), fact("用户住在北京")], 1, stated_at=T0 + timedelta(days=1)
    )
    await memory.parts.keeper.save([fact("用户住在上海")], 1, stated_at=T0 + timedelta(days=2))
    hashing_embedder.fail = False
    report = await memory.maintain_distilled()
    assert (report.embedded, report.merged) == (4, 1)
    facts = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(days=3))
    assert sorted((f.content, f.times_mentioned) for f in facts) == [
        ("用户住在上海", 1),
        ("用户住在北京", 1),
        ("用户喜欢喝咖啡", 2),
    ]
    kept = next(f for f in facts if f.content == "用户喜欢喝咖啡")
    assert kept.first_seen == T0 and kept.last_confirmed == T0 + timedelta(days=1)
    assert (await memory.maintain_distilled()).merged == 0


async def test_maintenance_refreshes_importance_from_use(memory_factory):
    memory = await memory_factory()
    await memory.parts.keeper.save([fact("用户养了一只猫")], 1, stated_at=T0)
    async with memory.parts.database.pool.acquire() as conn:  # a row left stale by an older formula
        await conn.execute("UPDATE distilled_memories SET access_count = 5, importance = 0.1")
    report = await memory.maintain_distilled()
    assert report.importance_refreshed == 1
    [row] = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0)
    assert row.importance == pytest.approx(0.8 + 5 * 0.02)


async def test_forget_deletes_the_scopes_distilled_memories(memory_factory):
    memory = await memory_factory()
    for user, group in ((1, GROUP_A), (1, GROUP_B), (1, None), (2, GROUP_A)):
        await memory.parts.keeper.save(
            [fact(f"用户{user}在{group}说的事")], user, group, stated_at=T0
        )

    async def contents():
        return sorted(
            r["content"] for r in await rows(memory, "SELECT content FROM distilled_memories")
        )

    await memory.parts.forgetting.forget(ForgetScope(user_id=1, group_id=GROUP_A))
    assert await contents() == ["用户1在1002说的事", "用户1在None说的事", "用户2在1001说的事"]
    await memory.parts.forgetting.forget(ForgetScope(user_id=1, private_only=True))
    assert await contents() == ["用户1在1002说的事", "用户2在1001说的事"]
    await memory.parts.forgetting.forget(ForgetScope(group_id=GROUP_A))
    assert await contents() == ["用户1在1002说的事"]
    await memory.parts.forgetting.forget(ForgetScope(everything=True))
    assert await contents() == []


async def test_reembed_covers_distilled_rows(memory_factory, fresh_dsn, tmp_data_dir):
    memory = await memory_factory()
    await memory.parts.keeper.save([fact("用户在杭州上班")], 1, stated_at=T0)
    await memory.aclose()

    other = HashingEmbedder(model="test/other-model")
    settings = MemorySettings(memory_dsn=fresh_dsn, memory_data_dir=tmp_data_dir)
    switched = await open_memory(
        settings, embedder=other, allow_model_change=True, maintenance_interval=None
    )
    try:
        assert await switched.parts.keeper.recall(1, None, "用户在哪上班", now=T0) == []
        assert await switched.reembed() == 1
        found = await switched.parts.keeper.recall(1, None, "用户在哪上班", now=T0)
        assert [h.memory.embedding_model for h in found] == ["test/other-model"]
    finally:
        await switched.aclose()


async def test_an_embedding_outage_stores_rows_that_are_embedded_later(
    memory_factory, hashing_embedder
):
    memory = await memory_factory()
    hashing_embedder.fail = True
    outcome = await memory.parts.keeper.save([fact("用户养了一只猫")], 1, stated_at=T0)
    again = await memory.parts.keeper.save([fact("用户养了一只猫")], 1, stated_at=T0)
    assert (outcome.added, again.confirmed) == (1, 1)
    assert await memory.parts.keeper.recall(1, None, "宠物", now=T0) == []
    hashing_embedder.fail = False
    assert (await memory.maintain_distilled()).embedded == 1
    assert len(await memory.parts.keeper.recall(1, None, "用户的猫", now=T0)) == 1


def test_dedupe_thresholds_are_per_model_with_the_setting_winning():
    assert dedupe_threshold(LOCAL_EMBEDDING_MODEL) == 0.95
    assert dedupe_threshold("Qwen/Qwen3-Embedding-0.6B") == 0.85
    assert dedupe_threshold("someone/unknown") == 0.9
    assert dedupe_threshold(LOCAL_EMBEDDING_MODEL, 0.5) == 0.5
