"""What issue 29's parts 2-5 promise, tried over the real wire as a user or an operator would.

* part 2: a time outside 1990..2200 cannot be stored (the database's CHECK refuses it), and a
  row that is bad all the same (the constraint dropped, as an old restore might) breaks no
  reply and no background round;
* part 4: 撤回 takes the message, the bot's reply, and the bot's later replies repeating it;
* part 5: commands with odd digits answer once; a superuser's view of another chat asked in a
  group answers privately; a quote is resolved only within its own chat; a turn answered with
  the apology keeps the default retention.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg

from bench.faults.harness import Chats, Tally, embedded_dsn, marker, running_bot, settle
from tests.plugin.events import (
    SUPERUSER_ID,
    at_seg,
    message_payload,
    recall_payload,
    reply_seg,
    text_seg,
)
from tests.plugin.wire import ApiCall, OneBotPeer, StubLLM

SECRET = "864209"
# Evaluation on (its model the chat stand-in): an apology-answered turn's expiry is its work.
ENV = {"LOG_LEVEL": "INFO", "EVALUATOR_ENABLED": "true"}
BAD_ROW_USER = 9601


async def _execute(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def send_event(
    chats: Chats, peer: OneBotPeer, payload: dict[str, Any], *, timeout: float = 60.0
) -> ApiCall | None:
    """Send one event as it is and wait for the bot's answer in the same chat."""
    queue = chats.queue(int(payload["user_id"]), payload.get("group_id"))
    while not queue.empty():
        queue.get_nowait()
    chats.tally.sent += 1
    await peer.ws.send(json.dumps(payload))
    try:
        call = await asyncio.wait_for(queue.get(), timeout)
    except asyncio.TimeoutError:
        return None
    chats.tally.answered += 1
    return call


def text_of(call: ApiCall | None) -> str:
    if call is None:
        return ""
    message = call.params.get("message")
    if isinstance(message, str):
        return message
    return "".join(
        str(seg.get("data", {}).get("text", "")) for seg in message or [] if isinstance(seg, dict)
    )


async def stored_bad_rows(
    chats: Chats, peer: OneBotPeer, dsn: str, tally: Tally, log_text: Any
) -> None:
    """Part 2: the CHECK refuses year 1; with it dropped, rows of year 1 and 9999 break no
    reply and no maintenance round."""
    await chats.say("我最喜欢的水果是草莓", user_id=BAD_ROW_USER)
    insert = (
        "INSERT INTO dialogues (session_key, user_id, chat_type, role, content, created_at, "
        "message_uuid) VALUES ($1, $2, 'private', 'user', $3, $4::text::timestamptz, "
        "gen_random_uuid()::text)"
    )
    try:
        await _execute(dsn, insert, str(BAD_ROW_USER), BAD_ROW_USER, "坏行", "-infinity")
        tally.misses.append("a -infinity time was stored")
    except asyncpg.CheckViolationError:
        tally.notes.append("-infinity refused by the database's CHECK")
    await _execute(
        dsn,
        "ALTER TABLE dialogues DROP CONSTRAINT dialogues_created_at_in_range, "
        "DROP CONSTRAINT dialogues_expires_at_in_range",
    )
    for when in ("-infinity", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999+00"):
        await _execute(dsn, insert, str(BAD_ROW_USER), BAD_ROW_USER, "我最喜欢的水果是榴莲", when)
    await _execute(
        dsn,
        "UPDATE dialogues SET expires_at = 'infinity' WHERE user_id = $1 AND content = '坏行'",
        BAD_ROW_USER,
    )
    tracebacks_before = log_text().count("Traceback")
    answered = 0
    for text in ("我最喜欢的水果是什么？", "榴莲", "水果"):
        answered += await chats.say(text, user_id=BAD_ROW_USER)
    memstat = text_of(
        await send_event(chats, peer, message_payload([text_seg("/memstat")], user_id=SUPERUSER_ID))
    )
    counted = next((line for line in memstat.splitlines() if "时间超出范围" in line), None)
    await asyncio.sleep(35)  # a maintenance round (30 s) over the bad rows
    tracebacks = log_text().count("Traceback") - tracebacks_before
    tally.notes.append(
        f"bad rows (year 1, -infinity, 9999): {answered}/3 answered, /memstat "
        f"{'says ' + repr(counted) if counted else 'answered ' + str(bool(memstat))}, "
        f"{tracebacks} traceback(s) in a maintenance round"
    )
    if counted is None:
        tally.misses.append("/memstat does not count the bad rows")
    if answered < 3:
        tally.misses.append("a stored row silenced a person")
    if tracebacks:
        tally.misses.append("a stored row broke a background loop")


async def withdrawn_repeats(
    chats: Chats, peer: OneBotPeer, llm: StubLLM, tally: Tally, dsn: str
) -> None:
    """Part 4: the withdrawn message, the bot's reply and its later replies repeating it go.

    Twice: once withdrawn the moment the second reply arrives (the bot may not have stored
    that reply yet: what that leaves is reported, not a target), once after both replies
    are stored (a person's 撤回 comes seconds later; the target)."""
    for user, secret, wait in ((9611, SECRET, False), (9612, "573918", True)):
        llm.reply = f"好的，你的银行卡密码是{secret}，我记住了。"
        first = message_payload([text_seg(f"{marker()} 我的银行卡密码是{secret}")], user_id=user)
        await send_event(chats, peer, first)
        again = message_payload([text_seg(f"{marker()} 再说一次：密码{secret}")], user_id=user)
        await send_event(chats, peer, again)
        llm.reply = "好的，我记下了。"
        if wait:
            await _holding(dsn, secret, {"assistant": 2, "user": 2})
        await peer.ws.send(json.dumps(recall_payload(int(first["message_id"]), user_id=user)))
        left = await _holding(dsn, secret, {"user": 1})
        when = "after both replies were stored" if wait else "at once"
        tally.notes.append(
            f"撤回 {when}: rows holding the withdrawn text afterwards: {left or 'none'} "
            "(the person's own later repeat is theirs and stays)"
        )
        if wait and left.get("assistant"):
            tally.misses.append("撤回 left the bot's replies repeating the text")


async def _holding(dsn: str, text: str, expected: dict[str, int]) -> dict[str, int]:
    """Rows holding ``text`` by role, once they are ``expected`` or after 30 s (bounded)."""
    sql = "SELECT role, count(*) FROM dialogues WHERE content LIKE $1 GROUP BY role"
    deadline = time.monotonic() + 30
    while True:
        rows = await _execute(dsn, sql, f"%{text}%")
        found = {row["role"]: int(row["count"]) for row in rows}
        if found == expected or time.monotonic() > deadline:
            return found
        await asyncio.sleep(1.0)


async def odd_digits(chats: Chats, tally: Tally) -> None:
    """Part 5: commands with odd digits answer, once."""
    user = 9621
    unanswered = []
    for command in ("/我的记忆 ²", "/我的记忆 " + "9" * 5000, "/忘记 ²", "/忘记 " + "7" * 5000):
        queue = chats.queue(user, None)
        if not await chats.say(command, user_id=user, segments=[text_seg(command)]):
            unanswered.append(command[:8])
        await asyncio.sleep(1.0)
        if queue.qsize() > 0:
            unanswered.append(f"{command[:8]} answered more than once")
    tally.notes.append(f"odd digits: {4 - len(unanswered)}/4 commands answered once")
    if unanswered:
        tally.misses.append(f"commands with odd digits: {unanswered}")


async def cross_chat_views(chats: Chats, peer: OneBotPeer, llm: StubLLM, tally: Tally) -> None:
    """Part 5: a superuser's view of another chat asked in a group answers privately; a quote
    of another chat's message is not resolved."""
    group = 7_900_001
    private = chats.queue(SUPERUSER_ID, None)
    in_group = chats.queue(SUPERUSER_ID, group)
    for queue in (private, in_group):
        while not queue.empty():
            queue.get_nowait()
    command = "/回忆 --user 9611 --private 密码"
    payload = message_payload(
        [at_seg(10001), text_seg(command)], user_id=SUPERUSER_ID, group_id=group
    )
    await peer.ws.send(json.dumps(payload))
    chats.tally.sent += 1
    got = await _first_of(private, in_group, 60)
    where = {id(private): "privately", id(in_group): "in the group"}.get(id(got[0]), "nowhere")
    tally.notes.append(f"superuser's --private view asked in a group: answered {where}")
    if got[0] is not private:
        tally.misses.append(f"another chat's memory answered {where}")
    if got[0] is not None:
        chats.tally.answered += 1

    secret_word = "青龙偃月"
    quoted = message_payload(
        [at_seg(10001), text_seg(f"{marker()} 暗号是{secret_word}")], user_id=9631, group_id=group
    )
    await send_event(chats, peer, quoted)
    tag = marker()
    asking = message_payload(
        [reply_seg(int(quoted["message_id"])), text_seg(f"{tag} 这是什么意思")], user_id=9632
    )
    await send_event(chats, peer, asking)
    prompts = [
        call.messages
        for call in list(llm.calls)
        if tag in json.dumps(call.messages, ensure_ascii=False)
    ]
    leaked = any(secret_word in json.dumps(p, ensure_ascii=False) for p in prompts)
    tally.notes.append(
        f"a quote of another chat's message: {'resolved (leaked)' if leaked else 'not resolved'}"
    )
    if leaked or not prompts:
        tally.misses.append("a quote was resolved outside its own chat" if leaked else "no prompt")


async def _first_of(
    first: asyncio.Queue[ApiCall], second: asyncio.Queue[ApiCall], timeout: float
) -> tuple[asyncio.Queue[ApiCall] | None, ApiCall | None]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for queue in (first, second):
            if not queue.empty():
                return queue, queue.get_nowait()
        await asyncio.sleep(0.1)
    return None, None


async def apology_retention(chats: Chats, llm: StubLLM, tally: Tally, dsn: str) -> None:
    """Part 5: a turn answered with the apology keeps the default retention."""
    llm.mode = "fail"
    user = 9641
    await chats.say("模型坏了的时候说的话", user_id=user)
    llm.mode = "ok"
    deadline = time.monotonic() + 30
    while True:  # the expiry is given by the evaluation worker's next round
        rows = await _execute(
            dsn, "SELECT expires_at FROM dialogues WHERE user_id = $1 AND role = 'user'", user
        )
        kept = [row["expires_at"] for row in rows]
        if (kept and None not in kept) or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    tally.notes.append(f"apology-answered turn: expires_at {kept}")
    if not kept or any(value is None for value in kept):
        tally.misses.append("an apology-answered turn never expires")


async def promises_kept() -> Tally:
    tally = Tally("issue 29 parts 2-5 over the wire")
    llm = StubLLM(delay=0.0).start()
    try:
        async with running_bot(tally, llm_url=llm.base_url, extra_env=ENV) as (
            bot,
            peer,
        ):
            chats = Chats(peer, tally, reply_timeout=60)
            dsn = embedded_dsn(bot)
            await withdrawn_repeats(chats, peer, llm, tally, dsn)
            await odd_digits(chats, tally)
            await cross_chat_views(chats, peer, llm, tally)
            await apology_retention(chats, llm, tally, dsn)
            await stored_bad_rows(chats, peer, dsn, tally, bot.log_text)
            await settle(tally, dsn)
    finally:
        llm.stop()
    return tally


SCENARIOS = {"promises": promises_kept}
