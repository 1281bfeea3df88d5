"""The database going away, or refusing writes, and coming back: turns are spooled, then
written; a bad item is dead-lettered and never blocks the others; nothing is lost."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from memory_core import open_memory
from memory_core.conversation.engine import ConversationEngine, Delivery, Outcome
from memory_core.dialogue.spool import TurnSpool
from memory_core.errors import DatabaseUnavailableError, StorageError
from memory_core.models import ForgetScope, RecalledMessage, TurnInput
from memory_core.settings import MemorySettings
from tests.core.test_bad_input import ODD_TEXTS
from tests.fakes import RecordingModel
from tests.tcp_proxy import SwitchableProxy, unix_socket_of


def recorded_in(sent: list[str]):
    """A ``send`` for the engine that records each reply in ``sent``."""

    async def send(text: str) -> Delivery:
        sent.append(text)
        return Delivery(text=text)

    return send


def said(text: str, message_id: int) -> TurnInput:
    return TurnInput(user_id=7, role="user", content=text, message_id=message_id, self_id=1)


@pytest.fixture
async def proxy(fresh_dsn):
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))
    await proxy.start()
    yield proxy
    await proxy.stop()


def database_name(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


async def open_via_proxy(proxy, fresh_dsn, tmp_data_dir, embedder):
    settings = MemorySettings(
        memory_dsn=proxy.dsn(database_name(fresh_dsn)), memory_data_dir=tmp_data_dir
    )
    return await open_memory(settings, embedder=embedder, maintenance_interval=None)


async def refuse_inserts(dsn: str, sqlstate: str, when: str = "true") -> None:
    """A trigger that makes PostgreSQL refuse inserts of dialogue rows matching ``when`` with
    the error ``sqlstate`` (as a full disk, a data error... would)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            f"""
            CREATE OR REPLACE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF {when} THEN
                    RAISE EXCEPTION 'refused by the test' USING ERRCODE = '{sqlstate}';
                END IF;
                RETURN NEW;
            END $$;
            CREATE OR REPLACE TRIGGER refuse_insert BEFORE INSERT ON dialogues
                FOR EACH ROW EXECUTE FUNCTION refuse_insert();
            """
        )
    finally:
        await conn.close()


async def stored_contents(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [r["content"] for r in await conn.fetch("SELECT content FROM dialogues ORDER BY id")]
    finally:
        await conn.close()


def dead_letters(memory) -> list[dict]:
    path = memory.parts.spool.dead_path
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


async def test_turns_arriving_during_an_outage_are_spooled_then_written(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    settings = MemorySettings(
        memory_dsn=proxy.dsn(database_name(fresh_dsn)), memory_data_dir=tmp_data_dir
    )
    memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
    try:
        assert (await memory.parts.writer.add_turn(said("停电之前说的话", 1))).turn is not None
        await proxy.stop()
        outcome = await memory.parts.writer.add_turn(said("停电期间说的话", 2))
        assert outcome.spooled and outcome.turn is None
        with pytest.raises(DatabaseUnavailableError):
            await memory.parts.retriever.recall(7, "说的话")
        await proxy.start()
        assert await memory.parts.forgetting.flush_spool() == 1
        assert await memory.parts.forgetting.flush_spool() == 0
        turns = await memory.parts.retriever.get_contextual_memory(
            7, "说的话", top_n=5, now=datetime.now(timezone.utc)
        )
        assert sorted(t.content for t in turns) == ["停电之前说的话", "停电期间说的话"]
        spooled = next(t for t in turns if t.content == "停电期间说的话")
        assert spooled.message_id == 2 and spooled.self_id == 1
    finally:
        await memory.aclose()


async def test_a_message_recalled_during_an_outage_is_forgotten_on_reconnection(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    settings = MemorySettings(
        memory_dsn=proxy.dsn(database_name(fresh_dsn)), memory_data_dir=tmp_data_dir
    )
    memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
    try:
        await memory.parts.writer.add_turn(said("停电之前发错的消息", 1))
        await memory.parts.writer.add_turn(said("停电之前留下的消息", 2))
        await proxy.stop()
        await memory.parts.writer.add_turn(said("停电期间发错又撤回的消息", 3))
        # Both recalls arrive while the database is down: one stored before, one spooled.
        assert (
            await memory.parts.forgetting.delete_message(RecalledMessage(1, 1, user_id=7)) is None
        )
        assert (
            await memory.parts.forgetting.delete_message(RecalledMessage(1, 3, user_id=7)) is None
        )
        await proxy.start()
        # The spooled turn went from the spool with its recall: it is never written.
        assert await memory.parts.forgetting.flush_spool() == 0
        assert memory.parts.spool.pending() == 0
        turns = await memory.parts.retriever.get_contextual_memory(
            7, "消息", top_n=5, now=datetime.now(timezone.utc)
        )
        assert [t.content for t in turns] == ["停电之前留下的消息"]
        forgotten = await memory.parts.forgetting.delete_message(RecalledMessage(1, 2, user_id=7))
        assert forgotten is not None and forgotten.dialogues == 1  # connected: deleted at once
        assert await memory.parts.forgetting.flush_spool() == 0
    finally:
        await memory.aclose()


async def test_memory_started_without_a_database_connects_by_itself_later(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    await proxy.stop()
    settings = MemorySettings(
        memory_dsn=proxy.dsn(database_name(fresh_dsn)), memory_data_dir=tmp_data_dir
    )
    memory = await open_memory(
        settings, embedder=hashing_embedder, require_database=False, maintenance_interval=0.1
    )
    try:
        assert not memory.parts.database.connected
        assert (await memory.parts.writer.add_turn(said("数据库还没起来", 10))).spooled
        await proxy.start()
        for _ in range(1200):  # bounded wait (60 s) for the maintenance loop, not a timing check
            if memory.parts.database.connected and (await memory.stats()).total_rows == 1:
                break
            await asyncio.sleep(0.05)
        assert memory.parts.database.connected
        turns = await memory.parts.retriever.get_contextual_memory(
            7, "数据库", now=datetime.now(timezone.utc)
        )
        assert [t.content for t in turns] == ["数据库还没起来"]
    finally:
        await memory.aclose()


async def test_a_vector_index_build_cut_by_an_outage_is_redone_once_the_database_is_back(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    settings = MemorySettings(
        memory_dsn=proxy.dsn(database_name(fresh_dsn)),
        memory_data_dir=tmp_data_dir,
        memory_exact_search_max_rows=10,
    )
    memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
    writer = await asyncpg.connect(fresh_dsn)  # directly, not through the proxy
    try:
        await memory.parts.writer.add_dialogues(
            [said(f"第{i}句：今天吃了火锅", 100 + i) for i in range(20)]
        )
        # An open writing transaction keeps the concurrent build waiting ...
        transaction = writer.transaction()
        await transaction.start()
        await writer.execute("LOCK TABLE dialogues IN ROW EXCLUSIVE MODE")
        assert (await memory.parts.retriever.recall(7, "火锅")).windows  # exact; starts the build
        # Bounded wait (60 s) for the build to register, not a timing check. The writer is inside
        # a transaction, where PostgreSQL answers the progress view from a snapshot taken at the
        # first read: without clearing it, a first read before the build began read 0 for all
        # 60 s (and the test then went on without having seen the build).
        building = 0
        for _ in range(1200):
            await writer.execute("SELECT pg_stat_clear_snapshot()")
            building = await writer.fetchval("SELECT count(*) FROM pg_stat_progress_create_index")
            if building:
                break
            await asyncio.sleep(0.05)
        assert building == 1
        await proxy.stop()  # ... until the connection is cut under it
        await memory.parts.vector_index.wait_built()
        assert memory.parts.vector_index.indexed == set()  # failed, retried later
        await transaction.commit()
        await proxy.start()
        assert (await memory.parts.retriever.recall(7, "火锅")).windows  # still answered, exactly
        await memory.parts.upkeep.index_large_sessions()  # what the retry comes to
        assert memory.parts.vector_index.indexed == {"7"}
        valid = await writer.fetchval(
            "SELECT bool_and(indisvalid) FROM pg_index WHERE indexrelid = "
            "'dialogues_hnsw_384_s7'::regclass"
        )
        assert valid
    finally:
        await writer.close()
        await memory.aclose()


ANSWER = "收到。"
"""What the chat model (a ``RecordingModel``) answers every time."""


async def test_odd_text_is_answered_and_stored_cleaned_with_the_database_up_or_down(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    settings = MemorySettings(
        memory_dsn=proxy.dsn(database_name(fresh_dsn)), memory_data_dir=tmp_data_dir
    )
    memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
    engine = ConversationEngine(parts=memory.parts, chat_model=RecordingModel(ANSWER))
    sent: list[str] = []
    send = recorded_in(sent)

    expected: dict[int, str] = {}
    try:
        for down in (False, True):
            if down:
                await proxy.stop()
            for number, (_, text, cleaned) in enumerate(ODD_TEXTS):
                message_id = 100 * down + number
                turn = TurnInput(
                    user_id=7,
                    self_id=1,
                    role="user",
                    content=text,
                    sender_name=text,
                    message_id=message_id,
                    raw_segments=[{"type": "text", "data": {"text": text}}],
                )
                result = await engine.converse(turn, send)
                assert result.outcome is Outcome.REPLIED and result.spooled is down
                expected[message_id] = cleaned
        assert sent == [ANSWER] * len(expected)
        await proxy.start()
        await memory.parts.forgetting.flush_spool()
        reader = await asyncpg.connect(fresh_dsn)
        try:
            rows = await reader.fetch(
                "SELECT qq_message_id, content, sender_name, raw_segments FROM dialogues "
                "WHERE role = 'user'"
            )
            replies = await reader.fetchval(
                "SELECT count(*) FROM dialogues WHERE role = 'assistant'"
            )
        finally:
            await reader.close()
        assert {r["qq_message_id"]: r["content"] for r in rows} == expected
        for row in rows:
            cleaned = expected[row["qq_message_id"]]
            assert row["sender_name"] == cleaned
            assert json.loads(row["raw_segments"]) == [{"type": "text", "data": {"text": cleaned}}]
        assert replies == len(expected)
    finally:
        await memory.aclose()


async def test_bad_items_spooled_during_an_outage_never_block_the_good_ones_around_them(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    try:
        await proxy.stop()
        await memory.parts.writer.add_turn(said("停电时的第一句", 1))
        await memory.parts.writer.add_turn(said("半个\ud83d表情\x00", 2))  # stored cleaned
        await memory.parts.writer.add_turn(
            said("数据库拒收这一句", 3)
        )  # refused for its value, below
        # A line an older version could spool: content that is nothing but NUL.
        with memory.parts.spool.path.open("a", encoding="utf-8") as spool:
            spool.write(json.dumps({"user_id": 7, "role": "user", "content": "\x00\x00"}) + "\n")
        await memory.parts.writer.add_turn(said("停电时的最后一句", 4))
        await refuse_inserts(fresh_dsn, "22023", "NEW.content LIKE '%拒收%'")
        await proxy.start()
        assert await memory.parts.forgetting.flush_spool() == 3
        assert await stored_contents(fresh_dsn) == [
            "停电时的第一句",
            "半个\ufffd表情",
            "停电时的最后一句",
        ]
        letters = dead_letters(memory)
        assert [letter["item"]["content"] for letter in letters] == ["数据库拒收这一句", "\x00\x00"]
        assert letters[0]["error"].startswith("InvalidParameterValueError [22023]")
        assert letters[1]["error"].startswith("InvalidTurnError")
        stats = await memory.stats()
        assert (stats.spooled_turns, stats.dead_letters) == (0, 2)
        assert f"无法写入的消息：2 条，已移至 {memory.parts.spool.dead_path}" in stats.lines_zh()
        assert await memory.parts.forgetting.flush_spool() == 0
    finally:
        await memory.aclose()


async def test_a_torn_last_line_is_skipped_with_a_warning_and_the_turns_around_it_are_written(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder, caplog
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    try:
        await proxy.stop()
        await memory.parts.writer.add_turn(said("崩溃之前的话", 1))
        # A crash in the middle of writing a line: cut inside a Chinese character, no newline.
        line = json.dumps({"user_id": 7, "role": "user", "content": "写了一半"}, ensure_ascii=False)
        with memory.parts.spool.path.open("ab") as spool:
            spool.write(line.encode("utf-8")[:-4])
        await memory.parts.writer.add_turn(said("重启之后的话", 2))
        await proxy.start()
        with caplog.at_level(logging.WARNING, logger="memory_core.dialogue.spool"):
            assert await memory.parts.forgetting.flush_spool() == 2
        assert await stored_contents(fresh_dsn) == ["崩溃之前的话", "重启之后的话"]
        assert any("spool line 2 is skipped" in r.message for r in caplog.records)
        assert [letter["error"].split(":")[0] for letter in dead_letters(memory)] == [
            "unreadable line"
        ]
        assert memory.parts.spool.pending() == 0
    finally:
        await memory.aclose()


async def test_items_spooled_while_a_flush_runs_stay_for_the_next_one(tmp_data_dir):
    spool = TurnSpool(tmp_data_dir / "spool.jsonl")
    for number in (1, 2):
        await spool.append(said(f"第{number}句", number))
    written: list[str] = []

    async def write_turns(turns):
        if not written:
            await spool.append(said("写入期间到的", 3))  # a live turn spooled meanwhile
        written.extend(turn.content for turn in turns)
        return len(turns)

    async def forget(recalled):
        return 0

    report = await spool.drain(write_turns, forget, forget)
    assert (report.turns, report.left) == (2, 0) and written == ["第1句", "第2句"]
    entries, _ = await spool.read()
    assert [entry.item.content for entry in entries] == ["写入期间到的"]


class ReadOnlyDatabase:
    """``default_transaction_read_only`` for the database (new sessions get it)."""

    label = "ReadOnlySQLTransactionError [25006]"

    async def apply(self, dsn: str, memory) -> None:
        await self._set(dsn, memory, "on")

    async def lift(self, dsn: str, memory) -> None:
        await self._set(dsn, memory, "off")

    @staticmethod
    async def _set(dsn: str, memory, value: str) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("SET default_transaction_read_only = off")  # this session
            await conn.execute(
                f'ALTER DATABASE "{database_name(dsn)}" SET default_transaction_read_only = {value}'
            )
        finally:
            await conn.close()
        await memory.parts.database.pool.expire_connections()  # the pool's sessions are replaced


class RefusingTrigger:
    """Every dialogue insert fails with ``sqlstate``, as with a full disk or a lock timeout."""

    def __init__(self, sqlstate: str, label: str) -> None:
        self.sqlstate, self.label = sqlstate, label

    async def apply(self, dsn: str, memory) -> None:
        await refuse_inserts(dsn, self.sqlstate)

    async def lift(self, dsn: str, memory) -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("DROP TRIGGER refuse_insert ON dialogues")
        finally:
            await conn.close()


@pytest.mark.parametrize(
    "refusal",
    [
        ReadOnlyDatabase(),
        RefusingTrigger("53100", "DiskFullError [53100]"),
        RefusingTrigger("55P03", "LockNotAvailableError [55P03]"),
    ],
    ids=["read-only", "disk-full", "lock-timeout"],
)
async def test_turns_the_database_refuses_to_write_are_answered_spooled_then_drained(
    memory_factory, fresh_dsn, caplog, refusal
):
    memory = await memory_factory()
    engine = ConversationEngine(parts=memory.parts, chat_model=RecordingModel(ANSWER))
    sent: list[str] = []
    send = recorded_in(sent)

    await memory.parts.writer.add_turn(said("一切正常时说的", 1))
    await refusal.apply(fresh_dsn, memory)
    with caplog.at_level(logging.INFO, logger="memory_core.dialogue.writing"):
        for number in (2, 3, 4):
            result = await engine.converse(said(f"写不进去时说的第{number}句", number), send)
            assert result.outcome is Outcome.REPLIED and result.spooled
        assert sent == [ANSWER] * 3
        assert (
            memory.parts.writer.write_trouble is not None
            and memory.parts.writer.write_trouble.startswith(refusal.label)
        )
        stats = await memory.stats()  # reading still works
        assert stats.spooled_turns == 6
        assert any(line.startswith("记忆写入受阻") for line in stats.lines_zh())
        with pytest.raises(StorageError):
            await memory.parts.forgetting.flush_spool()  # still refused: kept for later
        assert memory.parts.spool.pending() == 6
        await refusal.lift(fresh_dsn, memory)
        assert await memory.parts.forgetting.flush_spool() == 6
    assert memory.parts.writer.write_trouble is None
    contents = await stored_contents(fresh_dsn)
    assert len(contents) == 7 and contents.count(ANSWER) == 3
    stats = await memory.stats()
    assert stats.spooled_turns == 0 and stats.dead_letters == 0
    assert not any(line.startswith("记忆写入受阻") for line in stats.lines_zh())
    said_when = [r.message for r in caplog.records if r.message.startswith("memory writes")]
    assert len(said_when) == 2  # one line when writes start failing, one when they work again
    assert said_when[0].startswith(f"memory writes fail ({refusal.label}")
    assert said_when[1].startswith("memory writes work again")


async def test_a_message_recalled_while_writes_are_refused_is_forgotten_once_they_work(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(said("发错了的消息", 1))
    read_only = ReadOnlyDatabase()
    await read_only.apply(fresh_dsn, memory)
    assert (
        await memory.parts.forgetting.delete_message(RecalledMessage(1, 1, user_id=7)) is None
    )  # spooled
    await read_only.lift(fresh_dsn, memory)
    await memory.parts.forgetting.flush_spool()
    assert await stored_contents(fresh_dsn) == []


async def test_an_item_refused_for_itself_with_an_unforeseen_error_does_not_jam_the_spool(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder, caplog
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    try:
        # An outage's backlog with an item the database refuses with an error that does not
        # say "bad data" (XX000, internal error: try later).
        await proxy.stop()
        for number, text in enumerate(["停电时的第一句", "有毒的一句", "停电时的最后一句"]):
            await memory.parts.writer.add_turn(said(text, number))
        await refuse_inserts(fresh_dsn, "XX000", "NEW.content LIKE '%有毒%'")
        await proxy.start()
        assert await memory.parts.forgetting.flush_spool() == 2  # the others are written; it waits
        assert (
            await memory.parts.forgetting.flush_spool() == 0
        )  # refused again, others went through: buried
        assert await stored_contents(fresh_dsn) == ["停电时的第一句", "停电时的最后一句"]
        # The same alone, arriving live: spooled; once other writes go through, buried.
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="memory_core.dialogue.writing"):
            assert (await memory.parts.writer.add_turn(said("又一句有毒的", 10))).spooled
            with pytest.raises(StorageError):
                await memory.parts.forgetting.flush_spool()  # alone and refused: cannot tell yet
            assert (await memory.parts.writer.add_turn(said("之后的正常一句", 11))).turn is not None
            assert (
                memory.parts.writer.write_trouble is not None
            )  # degraded until the spool is written
            assert await memory.parts.forgetting.flush_spool() == 0
        said_when = [r.message for r in caplog.records if r.message.startswith("memory writes")]
        assert [m.split(" (")[0].split(",")[0] for m in said_when] == [
            "memory writes fail",
            "memory writes work again",
        ]
        letters = dead_letters(memory)
        assert [letter["item"]["content"] for letter in letters] == ["有毒的一句", "又一句有毒的"]
        assert all(
            letter["error"].startswith(
                "refused twice while other writes went through: InternalServerError [XX000]"
            )
            for letter in letters
        )
        assert memory.parts.spool.pending() == 0 and memory.parts.writer.write_trouble is None
    finally:
        await memory.aclose()


async def test_a_live_turn_the_database_refuses_for_its_value_is_dead_lettered_and_answered(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    await refuse_inserts(fresh_dsn, "22023", "NEW.content LIKE '%拒收%'")
    sent: list[str] = []
    send = recorded_in(sent)

    engine = ConversationEngine(parts=memory.parts, chat_model=RecordingModel(ANSWER))
    result = await engine.converse(said("数据库拒收这一句", 1), send)
    assert result.outcome is Outcome.REPLIED and result.user_turn is None
    assert sent == [ANSWER]
    assert await stored_contents(fresh_dsn) == [ANSWER]
    assert [letter["item"]["content"] for letter in dead_letters(memory)] == ["数据库拒收这一句"]
    assert memory.parts.writer.write_trouble is None and memory.parts.spool.pending() == 0
    assert (await memory.stats()).dead_letters == 1


async def test_a_nearly_full_disk_letting_small_writes_through_never_dead_letters_a_turn(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    await refuse_inserts(fresh_dsn, "53100", "length(NEW.content) > 5")  # big rows do not fit
    assert (await memory.parts.writer.add_turn(said("这一句太长了写不进去", 1))).spooled
    with pytest.raises(StorageError):
        await memory.parts.forgetting.flush_spool()
    assert (
        await memory.parts.writer.add_turn(said("短句", 2))
    ).turn is not None  # a small one fits
    with pytest.raises(StorageError):
        await (
            memory.parts.forgetting.flush_spool()
        )  # refused again, others went through: still only waits
    assert (memory.parts.spool.pending(), memory.parts.spool.dead_letters()) == (1, 0)
    await RefusingTrigger("53100", "").lift(fresh_dsn, memory)
    assert await memory.parts.forgetting.flush_spool() == 1
    assert await stored_contents(fresh_dsn) == ["短句", "这一句太长了写不进去"]


async def test_the_pools_reconnection_retries_log_one_line_each_without_a_traceback(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder, caplog
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    try:
        await proxy.stop()
        with pytest.raises(DatabaseUnavailableError):
            await memory.parts.retriever.recall(7, "说的话")  # the pool finds its connection gone
        with caplog.at_level(logging.WARNING, logger="asyncpg.pool"):
            for _ in range(600):  # 60 s at most for asyncpg's first retry (1 s after the loss)
                if any(r.name == "asyncpg.pool" for r in caplog.records):
                    break
                await asyncio.sleep(0.1)
        retries = [r for r in caplog.records if r.name == "asyncpg.pool"]
        assert retries, "asyncpg did not retry the lost connection"
        assert all(r.exc_info is None and "\n" not in r.getMessage() for r in retries)
        assert "Error" in retries[0].getMessage()  # the reason is kept, on the same line
        await proxy.start()
    finally:
        await memory.aclose()


class FullSpoolDisk:
    """The spool file's disk refuses writes with ENOSPC, as a full disk does (the file system
    call is replaced; the database stays real)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = True
        write = TurnSpool._append_sync

        def append(path, data: bytes) -> None:
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            write(path, data)

        monkeypatch.setattr(TurnSpool, "_append_sync", staticmethod(append))


async def test_with_the_disk_full_for_the_spool_too_turns_wait_in_memory_and_are_written_later(
    memory_factory, fresh_dsn, caplog, monkeypatch
):
    """The spool usually shares the database's disk: both refuse writes as a full disk does."""
    memory = await memory_factory()
    engine = ConversationEngine(parts=memory.parts, chat_model=RecordingModel(ANSWER))
    sent: list[str] = []
    send = recorded_in(sent)

    disk = FullSpoolDisk(monkeypatch)
    full_disk = RefusingTrigger("53100", "DiskFullError [53100]")
    await full_disk.apply(fresh_dsn, memory)
    with caplog.at_level(logging.WARNING, logger="memory_core.dialogue.spool"):
        for number in (1, 2, 3):
            result = await engine.converse(said(f"磁盘满时说的第{number}句", number), send)
            assert result.outcome is Outcome.REPLIED and result.spooled
    assert sent == [ANSWER] * 3
    assert memory.parts.spool.pending() == 6  # three user turns and three replies, in memory
    assert any("wait in memory" in r.getMessage() for r in caplog.records)
    with pytest.raises(StorageError):
        await (
            memory.parts.forgetting.flush_spool()
        )  # neither the file nor the database takes them yet

    disk.full = False  # space again: the file takes writes, then the database
    await full_disk.lift(fresh_dsn, memory)
    assert await memory.parts.forgetting.flush_spool() == 6
    assert memory.parts.spool.pending() == 0
    contents = await stored_contents(fresh_dsn)
    assert sorted(c for c in contents if c != ANSWER) == [f"磁盘满时说的第{n}句" for n in (1, 2, 3)]


async def test_forget_drops_turns_waiting_in_memory_for_a_full_spool_file(tmp_path, monkeypatch):
    disk = FullSpoolDisk(monkeypatch)
    spool = TurnSpool(tmp_path / "spool.jsonl")
    await spool.append(said("要忘掉的话", 1))
    await spool.append(
        TurnInput(user_id=8, role="user", content="别人的话", message_id=2, self_id=1)
    )
    assert spool.pending() == 2
    assert await spool.forget(ForgetScope(user_id=7)) == 1
    disk.full = False
    entries, _ = await spool.read()
    assert [entry.item.content for entry in entries] == ["别人的话"]


async def test_a_write_the_disk_cuts_short_leaves_no_torn_line(tmp_path, monkeypatch):
    """A full disk taking only part of a write: the part is cut off again, so the retry of
    the whole line is the only copy in the file."""
    spool = TurnSpool(tmp_path / "spool.jsonl")
    await spool.append(said("第一句", 1))
    size = spool.path.stat().st_size
    real_open = Path.open

    class HalfWrite:
        def __init__(self, raw) -> None:
            self.raw = raw

        def __getattr__(self, name: str):
            return getattr(self.raw, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.raw.close()

        def write(self, data) -> int:
            if len(data) > 4:
                return self.raw.write(bytes(data[:4]))
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: HalfWrite(real_open(self, *a, **k)))
    await spool.append(said("第二句", 2))  # held in memory
    assert spool.path.stat().st_size == size
    monkeypatch.setattr(Path, "open", real_open)
    entries, _ = await spool.read()
    assert [entry.item.content for entry in entries] == ["第一句", "第二句"]
