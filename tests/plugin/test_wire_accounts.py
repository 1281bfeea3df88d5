"""Two QQ bot accounts on one bot and one database, over the real wire (two NapCat-like peers
on real WebSockets, each with its own ``X-Self-ID``): what a person told one account is never in
the other's prompt nor its /回忆; a 撤回 in one leaves the other;
``MEMORY_SHARE_ACCOUNTS=true`` joins them."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.plugin.events import SELF_ID, at_seg, message_payload, recall_payload, text_seg
from tests.plugin.wire import BotProcess, OneBotPeer, StubLLM, sent_text, start_bot, stop_bot
from tests.tcp_proxy import SwitchableProxy, unix_socket_of

BOT_A, BOT_B = SELF_ID, SELF_ID + 1234
GROUP = 51515
ALICE, BOB = 61001, 61002


@dataclass
class TwoBots:
    llm: StubLLM
    bot: BotProcess
    a: OneBotPeer
    b: OneBotPeer

    async def say(
        self, peer: OneBotPeer, text: str, *, user_id: int, group_id: int | None = None
    ) -> str:
        mark = len(peer.calls)
        segments = [text_seg(text)] if group_id is None else [at_seg(peer.self_id), text_seg(text)]
        payload = message_payload(
            segments, user_id=user_id, group_id=group_id, self_id=peer.self_id
        )
        await peer.send_event(payload)
        call = await peer.wait_reply(user_id=user_id, group_id=group_id, after=mark, timeout=90)
        return sent_text(call)

    def prompt_text(self, question: str) -> str:
        return "\n".join(m["content"] for m in self.llm.last_prompt_for(question))


async def connected(bot: BotProcess, self_id: int) -> OneBotPeer:
    peer = await OneBotPeer.connect(bot.ws_url, bot.token, self_id=self_id)
    await peer.send_event(
        {
            "time": int(time.time()),
            "self_id": self_id,
            "post_type": "meta_event",
            "meta_event_type": "lifecycle",
            "sub_type": "connect",
        }
    )
    return peer


async def two_bots(extra_env: dict[str, str]) -> AsyncIterator[TwoBots]:
    llm = StubLLM().start()
    bot = await start_bot(llm_url=llm.base_url, extra_env=extra_env)
    peers: list[OneBotPeer] = []
    try:
        peers.append(await connected(bot, BOT_A))
        peers.append(await connected(bot, BOT_B))
        yield TwoBots(llm=llm, bot=bot, a=peers[0], b=peers[1])
    finally:
        for peer in peers:
            await peer.close()
        await stop_bot(bot)
        llm.stop()
        log = bot.log_text()
        shutil.rmtree(bot.data_dir, ignore_errors=True)
        assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]


@pytest.fixture(scope="module")
async def apart() -> AsyncIterator[TwoBots]:
    async for bots in two_bots({}):
        yield bots


async def test_what_account_a_was_told_is_never_in_account_bs_prompt(apart: TwoBots):
    await apart.say(apart.a, "我的暗号是swordfish", user_id=ALICE)
    await apart.say(apart.a, "群里的暗号是marlin", user_id=ALICE, group_id=GROUP)
    await apart.say(apart.b, "我的暗号是什么？(B私聊)", user_id=ALICE)
    await apart.say(apart.b, "群里的暗号是什么？(B群)", user_id=ALICE, group_id=GROUP)
    await apart.say(apart.a, "我的暗号是什么？(A私聊)", user_id=ALICE)
    await apart.say(apart.a, "群里的暗号是什么？(A群)", user_id=ALICE, group_id=GROUP)
    assert "swordfish" not in apart.prompt_text("我的暗号是什么？(B私聊)")
    assert "marlin" not in apart.prompt_text("群里的暗号是什么？(B群)")
    assert "swordfish" in apart.prompt_text("我的暗号是什么？(A私聊)")
    assert "marlin" in apart.prompt_text("群里的暗号是什么？(A群)")
    # One log line says which account adopted the memory stored before, once (the core's
    # lines reach the log through NoneBot's logger as "memory_core | …").
    adopted = [
        line
        for line in apart.bot.log_text().splitlines()
        if "memory_core | " in line and "is the first on this database" in line
    ]
    assert len(adopted) == 1 and f"QQ account {BOT_A} is the first" in adopted[0], adopted


async def test_a_person_recalls_and_withdraws_only_what_that_account_keeps(apart: TwoBots):
    await apart.say(apart.a, "周三要去医院复查", user_id=BOB)
    told_b = message_payload([text_seg("周四要去银行办卡")], user_id=BOB, self_id=BOT_B)
    mark = len(apart.b.calls)
    await apart.b.send_event(told_b)
    await apart.b.wait_reply(user_id=BOB, after=mark, timeout=90)
    seen_by_a = await apart.say(apart.a, "/回忆 医院 银行", user_id=BOB)
    seen_by_b = await apart.say(apart.b, "/回忆 医院 银行", user_id=BOB)
    assert "周三要去医院复查" in seen_by_a and "周四要去银行办卡" not in seen_by_a
    assert "周四要去银行办卡" in seen_by_b and "周三要去医院复查" not in seen_by_b
    # B's 撤回 of its message takes it from B's memory and leaves A's as it was.
    message_id = told_b["message_id"]
    await apart.b.send_event(recall_payload(message_id, user_id=BOB, self_id=BOT_B))
    done = f"recalled message {message_id}: forgotten"
    for _ in range(600):  # the notice has no answer: the bot's log says when it is done
        if done in apart.bot.log_text():
            break
        await asyncio.sleep(0.1)
    assert done in apart.bot.log_text()
    assert "周四要去银行办卡" not in await apart.say(apart.b, "/回忆 医院 银行", user_id=BOB)
    assert "周三要去医院复查" in await apart.say(apart.a, "/回忆 医院 银行", user_id=BOB)


@pytest.fixture(scope="module")
async def joined() -> AsyncIterator[TwoBots]:
    async for bots in two_bots({"MEMORY_SHARE_ACCOUNTS": "true"}):
        yield bots


async def test_share_accounts_puts_what_a_was_told_in_bs_prompt(joined: TwoBots):
    await joined.say(joined.a, "我的暗号是tuna", user_id=ALICE)
    await joined.say(joined.b, "我的暗号是什么？(共享)", user_id=ALICE)
    assert "tuna" in joined.prompt_text("我的暗号是什么？(共享)")


# ----------------------------------------------------------------- an outage at start-up

PATIENT = 61500
RECORD = "我的病历号是 MR-9911"


async def rows_of(dsn: str, user_id: int) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT content, session_key FROM dialogues WHERE user_id = $1", user_id
        )
    finally:
        await conn.close()
    return {r["content"]: r["session_key"] for r in rows}


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(1800):  # the bot's maintenance round reconnects: 3 min at most, no timer
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(what)


async def test_what_b_was_told_while_the_database_was_away_at_start_stays_bs(fresh_dsn):
    """A bot on its own PostgreSQL, started while it is unreachable: account B is told a record
    and answers; once the database is back the turns are B's, A recalls none of it, and
    /忘记我 through B removes them (they used to land in A's memory, unprefixed)."""
    conn = await asyncpg.connect(fresh_dsn)
    try:  # an earlier run made A the first account on this database
        await conn.execute(
            "INSERT INTO memory_meta (key, value) VALUES ('first_account', $1)", str(BOT_A)
        )
    finally:
        await conn.close()
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))  # not started: the database is away
    running = two_bots({"MEMORY_DSN": proxy.dsn(urlsplit(fresh_dsn).path.lstrip("/"))})
    bots = await anext(running)
    spool = bots.bot.data_dir / "spool.jsonl"

    async def spooled() -> bool:
        return spool.exists() and "MR-9911" in spool.read_text("utf-8")

    async def stored() -> bool:
        return len(await rows_of(fresh_dsn, PATIENT)) == 2

    try:
        await bots.say(bots.b, RECORD, user_id=PATIENT)
        await eventually(spooled, "the record was not spooled")
        await proxy.start()
        await eventually(stored, "the spooled exchange was not written")
        assert set((await rows_of(fresh_dsn, PATIENT)).values()) == {f"{BOT_B}/{PATIENT}"}
        assert "MR-9911" not in await bots.say(bots.a, "/回忆 病历号", user_id=PATIENT)
        assert "MR-9911" in await bots.say(bots.b, "/回忆 病历号", user_id=PATIENT)
        assert "确认" in await bots.say(bots.b, "/忘记我", user_id=PATIENT)
        await bots.say(bots.b, "确认", user_id=PATIENT)
        assert await rows_of(fresh_dsn, PATIENT) == {}
    finally:
        await proxy.stop()
        await running.aclose()
