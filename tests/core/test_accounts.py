"""Each QQ bot account's memory its own, on the embedded PostgreSQL (memory_core.accounts):
turns, recall (a session's and a shared group's), facts, cached answers, exports and forget of
one account never reach another's; the first account adopts what was stored before;
MEMORY_SHARE_ACCOUNTS joins them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import asyncpg
import pytest

from memory_core import TemporalMemory, open_memory, serving_account
from memory_core.accounts import account_of_key
from memory_core.dialogue.index_store import parse_session_index_name, session_index_name
from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import DatabaseUnavailableError, StorageError
from memory_core.models import ForgetScope, TurnInput
from memory_core.personal import export_person
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings
from tests.tcp_proxy import SwitchableProxy, unix_socket_of
from tests.turns import said

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=1)
BOT_A, BOT_B = 10001, 20002
XIAOMING, XIAOHONG = 11, 12
TEAM = 700
SECRET_A = "我的银行卡密码是八八六六"
SECRET_B = "我的车停在三号停车场"


async def contents(
    memory, user: int, group: int | None, query: str, now: datetime = NOW
) -> set[str]:
    options = RecallOptions(top_n=5, window_size=1, now=now)
    return {
        t.content for t in (await memory.parts.retriever.recall(user, query, group, options)).turns
    }


async def two_bots(memory) -> tuple[str, str]:
    """A connects first, then B; each is told a secret by 小明 in private and in the group."""
    a = await memory.parts.writer.adopt_account(BOT_A)
    b = await memory.parts.writer.adopt_account(BOT_B)
    for namespace, secret in ((a, SECRET_A), (b, SECRET_B)):
        with serving_account(namespace):
            await memory.parts.writer.add_dialogues(
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
    await memory.parts.writer.add_dialogues(
        [said(XIAOMING, SECRET_A, T0)]
    )  # before any account connected
    with caplog.at_level(logging.INFO, logger="memory_core.accounts"):
        assert await memory.parts.writer.adopt_account(BOT_A) == ""
        assert await memory.parts.writer.adopt_account(BOT_B) == f"{BOT_B}/"
        assert await memory.parts.writer.adopt_account(BOT_A) == ""  # a reconnect changes nothing
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
    await first.parts.writer.adopt_account(BOT_A)
    second = await memory_factory()  # bot B's own process on the same database
    assert await second.parts.writer.adopt_account(BOT_B) == f"{BOT_B}/"
    assert second.parts.accounts.first == BOT_A


async def test_forget_in_account_a_leaves_account_b(memory_factory):
    memory = await memory_factory()
    a, b = await two_bots(memory)
    with serving_account(a):
        assert (
            await memory.parts.forgetting.count_forget(ForgetScope(user_id=XIAOMING))
        ).dialogues == 2
        assert (await memory.parts.forgetting.forget(ForgetScope(user_id=XIAOMING))).dialogues == 2
        assert (await memory.parts.forgetting.forget(ForgetScope(everything=True))).dialogues == 0
        assert await contents(memory, XIAOMING, None, "密码 停车场") == set()
    with serving_account(b):
        assert (
            await memory.parts.forgetting.count_forget(ForgetScope(user_id=XIAOMING))
        ).dialogues == 2
        assert await contents(memory, XIAOMING, None, "密码 停车场") == {SECRET_B}
        assert (await memory.parts.forgetting.forget(ForgetScope(group_id=TEAM))).dialogues == 1
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
        mine = await export_person(memory.parts.database, XIAOMING, tz=memory.parts.tz)
        assert {t.content for t in mine.turns} == {SECRET_B, f"群里说：{SECRET_B}"}
        assert len(mine.memories) == 2 and len(mine.cached_answers) == 1
    with serving_account(a):
        assert await memory.parts.keeper.recall_by_type(XIAOMING, None, "facts", now=NOW) == []
        assert await memory.parts.keeper.recall_by_type(XIAOMING, TEAM, "facts", now=NOW) == []
        assert await cache.lookup("怎么安装Docker", XIAOMING, now=T0) is None
        mine = await export_person(memory.parts.database, XIAOMING, tz=memory.parts.tz)
        assert {t.content for t in mine.turns} == {SECRET_A, f"群里说：{SECRET_A}"}
        assert mine.memories == () and mine.cached_answers == ()
        forgotten = await memory.parts.forgetting.forget(ForgetScope(user_id=XIAOMING))
        assert (forgotten.facts, forgotten.cached_answers) == (0, 0)
    with serving_account(b):
        forgotten = await memory.parts.forgetting.forget(ForgetScope(user_id=XIAOMING))
        assert (forgotten.dialogues, forgotten.facts, forgotten.cached_answers) == (2, 2, 1)


async def test_memstat_counts_the_askers_accounts_memory(memory_factory):
    memory = await memory_factory()
    a, b = await two_bots(memory)
    fact = ExtractedMemory(kind="facts", content="用户住在北京", category="personal_info")
    with serving_account(b):
        await memory.parts.writer.add_dialogues([said(XIAOHONG, "再说一句", T0)])
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


# ----------------------------------------------------------------- an outage at start-up

PATIENT = 61500
RECORD = "我的病历号是 MR-9911"


@pytest.fixture
async def proxy(fresh_dsn) -> AsyncIterator[SwitchableProxy]:
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))
    await proxy.start()
    yield proxy
    await proxy.stop()


@pytest.fixture
async def started_in_an_outage(
    memory_factory, proxy: SwitchableProxy, fresh_dsn: str, tmp_data_dir, hashing_embedder
) -> AsyncIterator[TemporalMemory]:
    """A bot that knew A as the first account, started again while the database is away."""
    before = await memory_factory()
    assert await before.parts.writer.adopt_account(BOT_A) == ""
    # A was told the same person's secret before.
    await before.parts.writer.add_turn(TurnInput(user_id=PATIENT, role="user", content=SECRET_A))
    await before.aclose()
    await proxy.stop()
    settings = MemorySettings(
        memory_dsn=proxy.dsn(urlsplit(fresh_dsn).path.lstrip("/")), memory_data_dir=tmp_data_dir
    )
    memory = await open_memory(
        settings, embedder=hashing_embedder, maintenance_interval=None, require_database=False
    )
    assert not memory.parts.database.connected
    yield memory
    await memory.aclose()


async def back(memory: TemporalMemory, proxy: SwitchableProxy) -> None:
    """The database is reachable again, and the bot connected (its maintenance round)."""
    await proxy.start()
    await memory.connect()


async def told_b_in_the_outage(memory: TemporalMemory) -> None:
    """Account B is told the record while the first account cannot be learned: spooled."""
    with pytest.raises(StorageError):
        await memory.parts.writer.adopt_account(BOT_B)  # what the plugin tries first, in vain
    assert memory.parts.accounts.namespace(BOT_B) is None
    with serving_account(memory.parts.accounts.namespace(BOT_B), BOT_B):
        turn = TurnInput(user_id=PATIENT, role="user", content=RECORD, self_id=BOT_B)
        # Made in B's call without naming the bot (a model's memory tool does so): B's too.
        reply = TurnInput(user_id=PATIENT, role="assistant", content="记住了。")
    assert (await memory.parts.writer.add_turn(turn)).spooled
    assert (await memory.parts.writer.add_turn(reply)).spooled


async def stored_keys(dsn: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT content, session_key FROM dialogues")
    finally:
        await conn.close()
    return {r["content"]: r["session_key"] for r in rows}


async def test_what_b_was_told_while_the_first_account_was_unknown_is_bs_after_the_outage(
    started_in_an_outage, proxy, fresh_dsn
):
    memory = started_in_an_outage
    await told_b_in_the_outage(memory)
    await back(memory, proxy)
    assert await memory.parts.forgetting.flush_spool() == 2
    keys = await stored_keys(fresh_dsn)
    assert keys == {
        SECRET_A: str(PATIENT),
        RECORD: f"{BOT_B}/{PATIENT}",
        "记住了。": f"{BOT_B}/{PATIENT}",
    }
    with serving_account(await memory.parts.writer.adopt_account(BOT_A)):
        assert await contents(
            memory, PATIENT, None, "病历号 MR-9911 密码", datetime.now(timezone.utc)
        ) == {SECRET_A}
    b = await memory.parts.writer.adopt_account(BOT_B)
    with serving_account(b):
        assert RECORD in await contents(
            memory, PATIENT, None, "病历号 MR-9911 密码", datetime.now(timezone.utc)
        )
        assert (await memory.parts.forgetting.forget(ForgetScope(user_id=PATIENT))).dialogues == 2
    assert await stored_keys(fresh_dsn) == {SECRET_A: str(PATIENT)}


async def test_a_forget_through_b_in_the_outage_takes_bs_turns_and_leaves_as(
    started_in_an_outage, proxy, fresh_dsn, memory_factory
):
    memory = started_in_an_outage
    await told_b_in_the_outage(memory)
    with serving_account(memory.parts.accounts.namespace(BOT_B), BOT_B):
        forgotten = await memory.parts.forgetting.forget(ForgetScope(user_id=PATIENT))
    assert forgotten.deferred and forgotten.dialogues == 2  # B's spooled turns, at once
    with serving_account(memory.parts.accounts.namespace(BOT_B), BOT_B):
        told_again = TurnInput(user_id=PATIENT, role="user", content="又说一遍", self_id=BOT_B)
    assert (await memory.parts.writer.add_turn(told_again)).spooled
    await back(memory, proxy)
    await memory.parts.forgetting.flush_spool()
    # The /forget was B's: A's memory of the person stays; what B was told after it is kept.
    assert await stored_keys(fresh_dsn) == {
        SECRET_A: str(PATIENT),
        "又说一遍": f"{BOT_B}/{PATIENT}",
    }


async def test_a_call_before_the_first_account_is_known_never_reads_anothers_memory(
    memory_factory,
):
    await two_bots(await memory_factory())
    memory = await memory_factory()  # a new process: which account is first, not read yet
    assert memory.parts.accounts.first is None
    with serving_account(memory.parts.accounts.namespace(BOT_B), BOT_B):
        # A session's key is B's own until decided: B's memory or nothing, never A's.
        assert await contents(memory, XIAOMING, None, "密码 停车场") == {SECRET_B}
        with pytest.raises(DatabaseUnavailableError):
            await memory.stats(NOW)  # an account-wide read waits for the database
    with serving_account(memory.parts.accounts.namespace(BOT_A), BOT_A):
        assert await contents(memory, XIAOMING, None, "密码 停车场") == set()
