"""Two bots on one PostgreSQL whose clocks disagree, one of them killed while it holds claims.

One bot runs with its clock 15 minutes ahead (beyond the 10-minute leases) under libfaketime,
in that process only; the other is killed with SIGKILL while its evaluation and distillation
claims are out (its judge holds every answer). Targets: no exchange or turn judged twice
(answers given, across both judges), no leased item taken over before its lease ended by the
database's clock, and the survivor finishes the killed bot's work once the leases end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import asyncpg

from bench.faults.harness import Chats, Judge, Tally, finish_bot, markers_in, settle
from bench.faults.scenarios import LLM_DELAY, ExternalServer, _wait_until_judged
from tests.plugin.events import SELF_ID
from tests.plugin.wire import BotProcess, OneBotPeer, StubLLM, start_bot

FAKETIME_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEW = "+15m"  # beyond the leases (CLAIM_LEASE, SESSION_LEASE: 10 minutes)
SKEW_SECONDS = 15 * 60
TAKEOVER_TIMEOUT = 16 * 60.0  # the lease, the survivor's next rounds, and this machine's load

# What the killed bot holds when it dies: leased queue items and sessions, by the database's
# clock, with the markers of the user turns they cover and when their leases end.
SQL_HELD_EVALUATIONS = """
SELECT d.content, q.not_before FROM evaluation_queue q JOIN dialogues d ON d.id = q.user_turn_id
WHERE q.not_before > now()
"""
SQL_HELD_SESSIONS = """
SELECT count(*) FROM distilled_sessions WHERE pending_turns > 0 AND not_before > now()
"""
SQL_LEFT = """
SELECT (SELECT count(*) FROM evaluation_queue) AS queued,
       (SELECT coalesce(sum(pending_turns), 0) FROM distilled_sessions) AS pending
"""
SQL_SKEW = """
SELECT extract(epoch FROM max(created_at) - now()) FROM dialogues WHERE self_id = $1
"""


def skewed_clock_env() -> dict[str, str] | None:
    """The environment that shifts one process's clock, or ``None`` without libfaketime."""
    if not FAKETIME_LIBRARY.exists():
        return None
    return {
        "LD_PRELOAD": str(FAKETIME_LIBRARY),
        "FAKETIME": SKEW,
        # Monotonic time is left alone: asyncio's timers run on it, and an offset means nothing.
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def answered_twice(*judges: Judge) -> dict[str, int]:
    """Per task: user turns whose judgment was given more than once, over every judge."""
    given: Counter[tuple[str, str]] = Counter()
    for judge in judges:
        given.update(judge.answered)
    doubled: Counter[str] = Counter()
    for (task, _), count in given.items():
        if count > 1:
            doubled[task.split(":")[0]] += 1
    return dict(doubled)


async def _query(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def _held_claims(dsn: str, timeout: float = 180.0) -> tuple[list[asyncpg.Record], int]:
    """Wait (bounded) until the bot whose judge holds its answers has claims out."""
    deadline = time.monotonic() + timeout
    while True:
        held = await _query(dsn, SQL_HELD_EVALUATIONS)
        sessions = int((await _query(dsn, SQL_HELD_SESSIONS))[0][0])
        if (held and sessions) or time.monotonic() > deadline:
            return held, sessions
        await asyncio.sleep(1.0)


async def skewed_clocks_and_a_kill() -> Tally:
    """Phase 1: both bots chat and their work is judged, one bot's clock 15 minutes ahead.
    Phase 2: the other bot's judge stops answering; once that bot holds claims it is killed
    (SIGKILL); the skewed survivor must leave the claims alone until their leases end by the
    database's clock and then finish them."""
    tally = Tally("two bots, skewed clocks, one killed mid-job")
    clock = skewed_clock_env()
    if clock is None:
        tally.misses.append(f"libfaketime is not installed ({FAKETIME_LIBRARY}): no skew")
        return tally
    llm = StubLLM(delay=LLM_DELAY).start()
    judges = (Judge(), Judge())
    server = ExternalServer()
    bots: list[BotProcess] = []
    peers: list[OneBotPeer] = []
    try:
        dsn = await server.create()
        base = {"LOG_LEVEL": "WARNING", "MEMORY_DSN": dsn}
        # The killed bot must still be waiting for its judge when it dies.
        waiting = {"EVALUATOR_TIMEOUT": "900", "EXTRACTION_TIMEOUT": "900"}
        bots = list(
            await asyncio.gather(
                start_bot(llm_url=llm.base_url, extra_env={**base, **judges[0].env(), **clock}),
                start_bot(llm_url=llm.base_url, extra_env={**base, **judges[1].env(), **waiting}),
            )
        )
        peers = [
            await OneBotPeer.connect(bot.ws_url, bot.token, self_id=SELF_ID + index)
            for index, bot in enumerate(bots)
        ]
        chats = [Chats(peer, tally) for peer in peers]
        await asyncio.gather(
            *(
                chat.stream(sessions=6, messages=3, first_user=8500 + 100 * index)
                for index, chat in enumerate(chats)
            )
        )
        await settle(tally, dsn)
        skew = (await _query(dsn, SQL_SKEW, SELF_ID))[0][0]
        tally.notes.append(f"skewed bot's newest turn {float(skew or 0):+.0f} s from the DB clock")
        if skew is None or float(skew) < SKEW_SECONDS - 120:
            tally.misses.append("the skewed bot's clock was not ahead")
        await _wait_until_judged(dsn)
        phase_one = answered_twice(*judges)
        tally.notes.append(f"phase 1 judged: {judges[0].judged()} + {judges[1].judged()}")

        judges[1].hold_answers()
        await chats[1].stream(sessions=4, messages=2, first_user=8800)
        held, held_sessions = await _held_claims(dsn)
        victim = bots[1]
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait()
        killed_at = time.monotonic()
        # Leased items the survivor itself is judging at this moment are not the victim's.
        asked = {tag for (task, tag) in judges[1].seen if task == "evaluation"}
        held = [row for row in held if set(markers_in(row["content"])) & asked]
        held_tags = {tag for row in held for tag in markers_in(row["content"])}
        lease_ends = [row["not_before"] for row in held]
        db_now = (await _query(dsn, "SELECT now()"))[0][0]
        lease_left = (min(lease_ends) - db_now).total_seconds() if lease_ends else 0.0
        tally.notes.append(
            f"killed holding {len(held)} evaluation claim(s) and {held_sessions} session "
            f"claim(s), first lease ending {lease_left:.0f} s later"
        )
        if not held or not held_sessions:
            tally.misses.append("the bot was killed without claims of both kinds out")

        # The survivor goes on chatting meanwhile; its own work is judged as usual.
        await chats[0].stream(sessions=2, messages=2, first_user=8900, pause=1.0)
        taken_over_after = await _takeover(judges[0], held_tags, TAKEOVER_TIMEOUT)
        await settle(tally, dsn)
        await _wait_until_judged(dsn, timeout=240.0)
        left = (await _query(dsn, SQL_LEFT))[0]
        tally.notes.append(
            f"left at the end: {left['queued']} evaluation(s), {left['pending']} turn(s) to distil"
        )
        if left["queued"] or left["pending"]:
            tally.misses.append("the survivor did not finish the killed bot's work")
        if taken_over_after is None:
            tally.misses.append("the killed bot's claims were not finished by the survivor")
        else:
            since_kill = taken_over_after - killed_at
            tally.notes.append(
                f"survivor took the held work {since_kill:.0f} s after the kill "
                f"({since_kill - lease_left:+.0f} s from the lease's end)"
            )
            if since_kill < lease_left - 5:  # the DB clock and this one: same machine
                tally.misses.append("a leased claim was taken before its lease ended")
        unjudged = held_tags - {tag for (task, tag) in judges[0].answered if task == "evaluation"}
        if unjudged:
            tally.misses.append(f"{len(unjudged)} held exchange(s) never judged")
        twice = answered_twice(*judges)
        tally.notes.append(f"judged twice: phase 1 {phase_one or 'none'}, in all {twice or 'none'}")
        if twice:
            tally.misses.append(f"judged twice: {twice}")
        await finish_bot(tally, bots[0], peers[0])
        with contextlib.suppress(Exception):
            await peers[1].close()
        shutil.rmtree(victim.data_dir, ignore_errors=True)
        bots = []
    finally:
        for judge in judges:
            judge.release()
        for bot in bots:
            with contextlib.suppress(Exception):
                bot.process.send_signal(signal.SIGTERM)
                bot.process.wait(30)
        llm.stop()
        for judge in judges:
            judge.server.close()
        server.close()
    return tally


async def _takeover(judge: Judge, tags: set[str], timeout: float) -> float | None:
    """When (monotonic) ``judge`` first answered an evaluation of one of ``tags``; ``None`` if
    it had not finished all of them within ``timeout``."""
    deadline = time.monotonic() + timeout
    first: float | None = None
    while time.monotonic() < deadline:
        done = {tag for (task, tag) in list(judge.answered) if task == "evaluation"}
        if first is None and done & tags:
            first = time.monotonic()
        if tags and tags <= done:
            return first
        await asyncio.sleep(1.0)
    return None


SCENARIOS = {"skewed-kill": skewed_clocks_and_a_kill}
