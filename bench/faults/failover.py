"""The operator's PostgreSQL with a synchronous hot standby (``tests.replication``, the
embedded server's own binaries), the bot on the README's multi-host ``MEMORY_DSN``: the primary
is killed (``failover-kill``) or goes silent without refusing connections (``failover-silent``:
SIGSTOP on the postmaster and its children, a hung host or a cut network), the standby is
promoted mid-chat. Targets: 0 acknowledged turns lost, every reply within the bot's deadline,
a turn said after the promotion on the new primary within 10 s of it, no restart."""

from __future__ import annotations

import asyncio
import contextlib
import time

import asyncpg

from bench.faults.harness import Chats, Tally, markers_in, running_bot, settle
from bench.faults.scenarios import LLM_DELAY, Scenario
from tests.plugin.wire import StubLLM
from tests.replication import ReplicatedPair

REPLY_DEADLINE = 25.0  # LLM_REPLY_DEADLINE's default: the longest a person waits for a reply
WRITES_WITHIN = 10.0  # seconds from the promotion to a turn stored on the new primary


async def _user_markers(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn, timeout=5)
    try:
        rows = await conn.fetch("SELECT content FROM dialogues WHERE role = 'user'")
    finally:
        await conn.close()
    return {tag for row in rows for tag in markers_in(row["content"])}


async def _first_write_after(
    chats: Chats, dsn: str, promoted_at: float, *, timeout: float = 60.0
) -> float | None:
    """Seconds from the promotion until a turn said after it is on ``dsn`` (a message every
    0.5 s, each also waking the bot's spool); ``None`` if none within ``timeout``."""
    said: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = set(chats.sent_at)
        await chats.say("备库接手了吗", user_id=3999)
        said.extend(tag for tag in chats.sent_at if tag not in before)
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncio.TimeoutError):
            if set(said) & await _user_markers(dsn):
                return time.monotonic() - promoted_at
        await asyncio.sleep(0.5)
    return None


async def _failover(fault: str) -> Tally:
    tally = Tally(
        f"primary {'SIGKILLed' if fault == 'kill' else 'silent (SIGSTOP)'}, standby promoted"
    )
    llm = StubLLM(delay=LLM_DELAY).start()
    pair = ReplicatedPair(synchronous=True)
    try:
        await asyncio.to_thread(pair.start)
        env = {"MEMORY_DSN": pair.dsn()}
        async with running_bot(tally, llm_url=llm.base_url, extra_env=env) as (_, peer):
            chats = Chats(peer, tally, reply_timeout=REPLY_DEADLINE * 4)
            stream = asyncio.create_task(
                chats.stream(sessions=6, messages=10, first_user=3000, pause=0.3)
            )
            await asyncio.sleep(4)
            await asyncio.to_thread(pair.primary.kill if fault == "kill" else pair.primary.freeze)
            await asyncio.sleep(1)  # what an operator (or a failover manager) takes at best
            await asyncio.to_thread(pair.standby.promote)
            promoted_at = time.monotonic()
            took = await _first_write_after(chats, pair.standby.dsn(), promoted_at)
            await stream
            await settle(tally, pair.standby.dsn(), nudge=lambda: chats.say("在吗", user_id=3998))
        slow = [ms / 1000 for ms in tally.latencies_ms if ms / 1000 > REPLY_DEADLINE + 1.0]
        tally.over_deadline = len(slow)
        tally.notes.append(
            "first turn said after the promotion stored on the new primary "
            + (f"{took:.1f} s after it" if took is not None else "not within 60 s")
        )
        tally.notes.append(f"slowest reply {max(tally.latencies_ms, default=0) / 1000:.1f} s")
        if took is None or took > WRITES_WITHIN:
            tally.misses.append(f"no write on the new primary within {WRITES_WITHIN:g} s")
    finally:
        llm.stop()
        await asyncio.to_thread(pair.close)
    return tally


async def primary_killed() -> Tally:
    """The primary is SIGKILLed (connections refused at once), the standby promoted."""
    return await _failover("kill")


async def primary_silent() -> Tally:
    """The primary stops answering without refusing (SIGSTOP), the standby promoted."""
    return await _failover("silent")


SCENARIOS: dict[str, Scenario] = {
    "failover-kill": primary_killed,
    "failover-silent": primary_silent,
}
