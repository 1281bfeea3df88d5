"""Each QQ bot account's memory its own, on the embedded PostgreSQL (memory_core.accounts):
turns, recall (a session's and a shared group's), facts, cached answers, exports and forget of
one account never reach another's; the first account adopts what was stored before;
MEMORY_SHARE_ACCOUNTS joins them."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from memory_core import serving_account
from memory_core.accounts import account_of_key
from memory_core.dialogue.index_store import parse_session_index_name, session_index_name
from memory_core.distill.memory import ExtractedMemory
from memory_core.models import ForgetScope
from memory_core.personal import export_person
from memory_core.recall.options import RecallOptions
from tests.turns import said

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=1)
BOT_A, BOT_B = 10001, 20002
XIAOMING, XIAOHONG = 11, 12
TEAM = 700
SECRET_A = "我的银行卡密码是八八六六"
SECRET_B = "我的车停在三号停车场"


async def contents(memory, user: int, group: int | None, query: str) -> set[str]:
    options = RecallOptions(top_n=5, window_size=1, now=NOW)
    return {t.content for t in (await memory.recall(user, query, group, options)).turns}


async def two_bots(memory) -> tuple[str, str]:
    """A connects first, then B; each is told a secret by 小明 in private and in the group."""
    a = await memory.adopt_account(BOT_A)
    b = await memory.adopt_account(BOT_B)
    for namespace, secret in ((a, SECRET_A), (b, SECRET_B)):
        with serving_account(namespace):
            await memory.add_dialogues(
                [said(XIAOMING, secret, T0), said(XIAOMING, f"群里说：{secret}", T0, TEAM)]
            )
    return a, b


async def test_account_a_never_recalls_what_account_b_was_told(memory_factory):
    memory = await memory_factory()
    a, b = await two_bots(memory)
    assert (a, b) == ("", f"{BOT_B}/")
    with serving_account(a):
        private = await contents(memory, XIAOMING, None, "密码 停车场")
        group = await contents(memory, XIAOMING, TEAM, "密码 停车场")
    assert private == {SECRET_A} and group == {f"群里说：{SECRET_A}"}
    with serving_account(b):
        private = await contents(memory, XIAOMING, None, "密码 停车场")
        group = await contents(memory, XIAOMING, TEAM, "密码 停车场")
    assert private == {SECRET_B} and group == {f"群里说：{SECRET_B}"}


async def test_a_shared_group_is_shared_within_one_accounts_memory_only(memory_factory):
    memory = await memory_factory(memory_shared_groups=str(TEAM))
    a, b = await two_bots(memory)
    with serving_account(a):
        seen = await contents(memory, XIAOHONG, TEAM, "密码 停车场")
    assert seen == {f"群里说：{SECRET_A}"}
    with serving_account(b):
        seen = await contents(memory, XIAOHONG, TEAM, "密码 停车场")
    assert seen == {f"群里说：{SECRET_B}"}


async def test_share_accounts_joins_every_accounts_memory(memory_factory):
    memory = await memory_factory(memory_share_accounts=True)
    a, b = await two_bots(memory)
    assert a == b == ""
    with serving_account(b):
        assert await contents(memory, XIAOMING, None, "密码 停车场") == {SECRET_A, SECRET_B}


async def test_rows_stored_before_belong_to_the_first_account_said_once(memory_factory, caplog):
    memory = await memory_factory()
    await memory.add_dialogues([said(XIAOMING, SECRET_A, T0)])  # before any account connected
    with caplog.at_level(logging.INFO, logger="memory_core.accounts"):
        assert await memory.adopt_account(BOT_A) == ""
        assert await memory.adopt_account(BOT_B) == f"{BOT_B}/"
        assert await memory.adopt_account(BOT_A) == ""  # a reconnect changes nothing
    adopted = [r.getMessage() for r in caplog.records if "first on this database" in r.message]
    assert adopted == [
        f"QQ account {BOT_A} is the first on this database: the memory stored before "
        "per-account memory is its own (MEMORY_SHARE_ACCOUNTS=false)"
    ]
    with serving_account(""):
        assert await contents(memory, XIAOMING, None, "密码") == {SECRET_A}
    with serving_account(f"{BOT_B}/"):
        assert await contents(memory, XIAOMING, None, "密码") == set()


async def test_another_process_learns_the_first_account_from_the_database(memory_factory):
    first = await memory_factory()
    await first.adopt_account(BOT_A)
    second = await memory_factory()  # bot B's own process on the same database
    assert await second.adopt_account(BOT_B) == f"{BOT_B}/"
    assert second.accounts.first == BOT_A


async def test_forget_in_account_a_leaves_account_b(memory_factory):
    memory = await memory_factory()
    a, b = await two_bots(memory)
    with serving_account(a):
        assert (await memory.count_forget(ForgetScope(user_id=XIAOMING))).dialogues == 2
        assert (await memory.forget(ForgetScope(user_id=XIAOMING))).dialogues == 2
        assert (await memory.forget(ForgetScope(everything=True))).dialogues == 0
        assert await contents(memory, XIAOMING, None, "密码 停车场") == set()
    with serving_account(b):
        assert (await memory.count_forget(ForgetScope(user_id=XIAOMING))).dialogues == 2
        assert await contents(memory, XIAOMING, None, "密码 停车场") == {SECRET_B}
        assert (await memory.forget(ForgetScope(group_id=TEAM))).dialogues == 1
        assert await contents(memory, XIAOMING, TEAM, "密码 停车场") == set()
        assert await contents(memory, XIAOMING, None, "密码 停车场") == {SECRET_B}


async def test_facts_cached_answers_and_exports_stay_with_their_account(memory_factory):
    memory = await memory_factory(answer_cache_enabled=True, answer_cache_threshold=0.8)
    a, b = await two_bots(memory)
    fact = ExtractedMemory(kind="facts", content="用户住在北京", category="personal_info")
    cache = memory.parts.answer_cache
    with serving_account(b):
        # A private fact of B's: its key "B/11" is still a private one (migration 015).
        await memory.parts.keeper.save([fact], XIAOMING, stated_at=T0)
        await memory.parts.keeper.save([fact], XIAOMING, TEAM, stated_at=T0)
        assert await cache.store("怎么安装Docker", "B 的答案", XIAOMING, now=T0)
        facts = await memory.parts.keeper.recall_by_type(XIAOMING, None, "facts", now=NOW)
        assert [f.content for f in facts] == ["用户住在北京"]
        assert (await cache.lookup("怎么安装Docker", XIAOMING, now=T0)).answer == "B 的答案"
        mine = await export_person(memory, XIAOMING)
        assert {t.content for t in mine.turns} == {SECRET_B, f"群里说：{SECRET_B}"}
        assert len(mine.memories) == 2 and len(mine.cached_answers) == 1
    with serving_account(a):
        assert await memory.parts.keeper.recall_by_type(XIAOMING, None, "facts", now=NOW) == []
        assert await memory.parts.keeper.recall_by_type(XIAOMING, TEAM, "facts", now=NOW) == []
        assert await cache.lookup("怎么安装Docker", XIAOMING, now=T0) is None
        mine = await export_person(memory, XIAOMING)
        assert {t.content for t in mine.turns} == {SECRET_A, f"群里说：{SECRET_A}"}
        assert mine.memories == () and mine.cached_answers == ()
        forgotten = await memory.forget(ForgetScope(user_id=XIAOMING))
        assert (forgotten.facts, forgotten.cached_answers) == (0, 0)
    with serving_account(b):
        forgotten = await memory.forget(ForgetScope(user_id=XIAOMING))
        assert (forgotten.dialogues, forgotten.facts, forgotten.cached_answers) == (2, 2, 1)


async def test_memstat_counts_the_askers_accounts_memory(memory_factory):
    memory = await memory_factory()
    a, b = await two_bots(memory)
    fact = ExtractedMemory(kind="facts", content="用户住在北京", category="personal_info")
    with serving_account(b):
        await memory.add_dialogues([said(XIAOHONG, "再说一句", T0)])
        await memory.parts.keeper.save([fact], XIAOHONG, stated_at=T0)
        seen_by_b = (await memory.stats(NOW)).store
        facts_b = (await memory.distilled_stats(NOW)).counts
    with serving_account(a):
        seen_by_a = (await memory.stats(NOW)).store
        facts_a = (await memory.distilled_stats(NOW)).counts
    assert (sum(seen_by_a.by_type_role.values()), seen_by_a.sessions) == (2, 2)
    assert (sum(seen_by_b.by_type_role.values()), seen_by_b.sessions) == (3, 3)
    assert facts_b.get("facts") == (1, 0) and "facts" not in facts_a


def test_an_accounts_session_keys_and_index_names_say_the_account():
    with serving_account(f"{BOT_B}/"):
        turn = said(XIAOMING, "你好", T0, TEAM)
    assert turn.session_key == f"{BOT_B}/{TEAM}:{XIAOMING}"
    assert account_of_key(turn.session_key) == f"{BOT_B}/" and account_of_key("700:11") == ""
    name = session_index_name(384, turn.session_key)
    assert name == f"dialogues_hnsw_384_a{BOT_B}_s{TEAM}_{XIAOMING}"
    assert parse_session_index_name(name) == (384, turn.session_key)
    assert parse_session_index_name("dialogues_hnsw_384_s11") == (384, "11")
