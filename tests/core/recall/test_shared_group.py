"""Group-shared memory on the embedded PostgreSQL: a shared group's members recall each other's
words, labelled with who said them; never in another group or in private; off by default."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core.context.block import OTHERS_NOTE
from memory_core.models import ForgetScope, RecalledMessage, TurnInput
from memory_core.recall.options import RecallOptions
from tests.turns import said as said_at

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=1)
TEAM, OTHER_GROUP = 700, 800
XIAOMING, XIAOHONG, STRANGER = 11, 12, 13
MEETING = "周五的周会改到下午三点"


def said(
    user: int,
    text: str,
    minutes: float,
    group: int | None,
    *,
    role: str = "user",
    name: str = "小明",
    message_id: int | None = None,
) -> TurnInput:
    at = T0 + timedelta(minutes=minutes)
    return said_at(user, text, at, group, role=role, name=name, message_id=message_id)


async def seed_meeting(memory) -> None:
    """小明 tells the bot about the meeting in the team group; the same words elsewhere."""
    await memory.parts.writer.add_dialogues(
        [
            said(XIAOMING, MEETING, 0, TEAM, message_id=5001),
            said(XIAOMING, "收到，周五周会下午三点。", 0.1, TEAM, role="assistant", name="小诗"),
            said(XIAOHONG, "我今天午饭吃了面条", 1, TEAM, name="小红"),
            said(STRANGER, "周会改到下午四点（别的群）", 2, OTHER_GROUP, name="路人"),
            said(XIAOMING, "周会改到下午五点（私聊）", 3, None),
        ]
    )


async def contents(memory, user: int, group: int | None, query: str = "周会几点") -> set[str]:
    result = await memory.parts.retriever.recall(
        user, query, group, RecallOptions(top_n=5, window_size=1, now=NOW)
    )
    return {t.content for t in result.turns}


async def test_memory_is_per_member_until_the_group_is_shared(memory_factory):
    memory = await memory_factory()
    await seed_meeting(memory)
    assert MEETING not in await contents(memory, XIAOHONG, TEAM)
    assert not (await memory.parts.sharing.status(TEAM)).shared


async def test_a_shared_groups_member_recalls_another_members_words_and_only_that_groups(
    memory_factory,
):
    memory = await memory_factory()
    await seed_meeting(memory)
    assert await memory.parts.sharing.switch(TEAM, on=True, by=XIAOMING)
    found = await contents(memory, XIAOHONG, TEAM)
    assert MEETING in found and "收到，周五周会下午三点。" in found
    assert not {"周会改到下午四点（别的群）", "周会改到下午五点（私聊）"} & found
    # The same member elsewhere, and another group's member, see nothing of the team group.
    assert MEETING not in await contents(memory, XIAOHONG, None)
    assert MEETING not in await contents(memory, XIAOHONG, OTHER_GROUP)
    assert MEETING not in await contents(memory, STRANGER, OTHER_GROUP)
    assert MEETING not in await contents(memory, XIAOMING, None)


async def test_the_operators_list_shares_a_group_and_an_admins_choice_wins_over_it(
    memory_factory,
):
    memory = await memory_factory(memory_shared_groups="700, 900")
    await seed_meeting(memory)
    assert (await memory.parts.sharing.status(TEAM)).source == "setting"
    assert MEETING in await contents(memory, XIAOHONG, TEAM)
    assert await memory.parts.sharing.switch(TEAM, on=False, by=XIAOHONG)
    status = await memory.parts.sharing.status(TEAM)
    assert (status.shared, status.source, status.changed_by) == (False, "command", XIAOHONG)
    assert MEETING not in await contents(memory, XIAOHONG, TEAM)
    assert not await memory.parts.sharing.switch(TEAM, on=False, by=XIAOHONG)  # nothing changed


@pytest.mark.parametrize("exact_max_rows", [20_000, 0], ids=["exact-query", "index-query"])
async def test_a_shared_group_gets_min_top_n_anchors_and_only_its_rows_among_100x_more(
    memory_factory, exact_max_rows
):
    memory = await memory_factory(memory_exact_search_max_rows=exact_max_rows)
    # Five members of the shared group said it once each; 500 rows elsewhere say the same.
    mine = [said(100 + i, f"我喜欢吃苹果和香蕉 {i}", i, TEAM) for i in range(5)]
    others = [
        said(200 + i % 50, f"我喜欢吃苹果和香蕉 {i}", i, OTHER_GROUP if i % 2 else None)
        for i in range(500)
    ]
    # A bulk import builds the index of every session above the limit (all, for index-query).
    async with memory.parts.upkeep.vector_index_deferred():
        await memory.parts.writer.add_dialogues(others + mine)
    await memory.parts.sharing.switch(TEAM, on=True, by=None)
    for top_n in (1, 3, 5, 8):
        result = await memory.parts.retriever.recall(
            100, "苹果香蕉", TEAM, RecallOptions(top_n=top_n, window_size=0, now=NOW)
        )
        assert len(result.windows) == min(top_n, 5)
        assert {t.group_id for t in result.turns} == {TEAM}


async def test_windows_stay_in_the_anchors_own_session_when_members_interleave(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said(XIAOMING, "我的工号是A100", 0, TEAM),
            said(XIAOHONG, "今天下雨了", 0.5, TEAM, name="小红"),
            said(XIAOMING, "好的，工号A100记下了", 1, TEAM, role="assistant", name="小诗"),
        ]
    )
    await memory.parts.sharing.switch(TEAM, on=True, by=None)
    result = await memory.parts.retriever.recall(
        XIAOHONG, "工号A100", TEAM, RecallOptions(top_n=1, window_size=1, now=NOW)
    )
    assert [t.content for t in result.windows[0].turns] in (
        ["我的工号是A100", "好的，工号A100记下了"],
        ["好的，工号A100记下了"],
    )
    assert all(t.user_id == XIAOMING for t in result.windows[0].turns)


async def test_other_members_turns_are_labelled_with_who_said_them_in_the_prompt(
    memory_factory,
):
    memory = await memory_factory()
    await seed_meeting(memory)
    await memory.parts.writer.add_turn(
        said(XIAOHONG, "我的周会笔记在共享文档里", 0.5, TEAM, name="小红")
    )
    await memory.parts.sharing.switch(TEAM, on=True, by=None)
    context = await memory.parts.context_builder.build(XIAOHONG, TEAM, "周会几点", now=NOW)
    lines = context.text.splitlines()
    assert OTHERS_NOTE in lines
    assert any(line.endswith(f") 群友(小明): {MEETING}") for line in lines), context.text
    assert any(") 你对群友小明: 收到，周五周会下午三点。" in line for line in lines)
    # The asker's own words keep their usual label.
    assert any(") user(小红): 我的周会笔记在共享文档里" in line for line in lines)
    # Unshared, nothing of another member reaches the prompt, and no note either.
    await memory.parts.sharing.switch(TEAM, on=False, by=None)
    alone = await memory.parts.context_builder.build(XIAOHONG, TEAM, "周会几点", now=NOW)
    assert MEETING not in alone.text and OTHERS_NOTE not in alone.text


async def test_forget_me_and_a_recall_notice_take_a_members_words_out_of_the_shared_pool(
    memory_factory,
):
    memory = await memory_factory()
    await seed_meeting(memory)
    await memory.parts.writer.add_turn(
        said(XIAOHONG, "周会室在三楼", 5, TEAM, name="小红", message_id=6001)
    )
    await memory.parts.sharing.switch(TEAM, on=True, by=None)
    assert {MEETING, "周会室在三楼"} <= await contents(memory, STRANGER, TEAM)
    await memory.parts.forgetting.forget(ForgetScope(user_id=XIAOMING))  # /忘记我
    await memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=None, message_id=6001, group_id=TEAM)
    )
    left = await contents(memory, STRANGER, TEAM)
    assert MEETING not in left and "周会室在三楼" not in left


async def test_cached_answers_are_never_served_to_another_member_even_when_shared(
    memory_factory,
):
    memory = await memory_factory(answer_cache_enabled=True)
    await memory.parts.sharing.switch(TEAM, on=True, by=None)
    question = "光合作用需要什么条件"
    assert await memory.parts.answer_cache.store(question, "光、水和二氧化碳。", XIAOMING, TEAM)
    assert await memory.parts.answer_cache.lookup(question, XIAOMING, TEAM) is not None
    assert await memory.parts.answer_cache.lookup(question, XIAOHONG, TEAM) is None


@pytest.mark.parametrize(
    "value", [700, [700, 900], "700,900", "[700, 900]", "700，900", "700 900"], ids=repr
)
def test_the_operators_group_list_reads_every_way_an_env_file_writes_it(value):
    from memory_core.settings import settings_from_mapping

    groups = settings_from_mapping({"MEMORY_SHARED_GROUPS": value}).memory_shared_groups
    assert TEAM in groups and groups <= {TEAM, 900}
    assert settings_from_mapping({"MEMORY_SHARED_GROUPS": ""}).memory_shared_groups == frozenset()


class StoppedClock:
    """``time.monotonic`` stand-in that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def sharing_pair(memory_factory, fresh_dsn):
    """Two ``GroupSharing`` on one database, as two bot processes have: each its own pool
    (detached while "disconnected") and its own clock."""
    from memory_core.recall.sharing import GroupSharing
    from memory_core.storage.database import create_pool
    from memory_core.storage.database_handle import Database

    await memory_factory()  # migrates the fresh database
    pools = [await create_pool(fresh_dsn, 2), await create_pool(fresh_dsn, 2)]
    databases = [Database(), Database()]
    for database, pool in zip(databases, pools, strict=True):
        database.attach(pool)
    clocks = [StoppedClock(), StoppedClock()]
    pair = [
        GroupSharing(listed=frozenset(), database=databases[i], clock=clocks[i]) for i in range(2)
    ]
    yield pair, clocks, databases
    for pool in pools:
        await pool.close()


async def test_recall_reuses_a_groups_shared_state_for_the_ttl_without_the_database(
    sharing_pair,
):
    from memory_core.errors import DatabaseUnavailableError
    from memory_core.recall.sharing import SHARED_STATE_TTL

    (sharing, _), (clock, _), (database, _) = sharing_pair
    assert await sharing.switch(TEAM, on=True, by=XIAOMING)
    pool = database.detach()  # from here on, any read of the database would fail
    assert await sharing.shared(TEAM)
    clock.now += SHARED_STATE_TTL - 0.1
    assert await sharing.shared(TEAM)
    assert not await sharing.shared(None)  # a private chat is never shared, and needs no read
    clock.now += 0.2
    with pytest.raises(DatabaseUnavailableError):
        await sharing.shared(TEAM)
    assert pool is not None
    database.attach(pool)
    assert await sharing.shared(TEAM)


async def test_a_switch_here_applies_at_once_and_another_processs_within_the_ttl(sharing_pair):
    from memory_core.recall.sharing import SHARED_STATE_TTL

    (here, elsewhere), (_, elsewhere_clock), _ = sharing_pair
    assert not await here.shared(TEAM)
    assert not await elsewhere.shared(TEAM)  # read once: kept for the TTL
    assert await here.switch(TEAM, on=True, by=XIAOMING)
    assert await here.shared(TEAM)  # the switching process: at once
    assert not await elsewhere.shared(TEAM)  # the other: its kept answer, still in the TTL
    elsewhere_clock.now += SHARED_STATE_TTL
    assert await elsewhere.shared(TEAM)  # the bound documented in recall.sharing
    # /群共享 (status) always reads the database, whatever is kept.
    assert await here.switch(TEAM, on=False, by=XIAOMING)
    assert not (await elsewhere.status(TEAM)).shared
    assert not await elsewhere.shared(TEAM)
