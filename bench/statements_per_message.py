"""The SQL statements the whole bot runs for one chat message (and what follows it).

``bot.py`` runs as in ``bench.bot_throughput`` (embedded PostgreSQL, stand-in chat model and
embedding API on loopback, a OneBot peer on a real WebSocket). After a warm-up message the
embedded server logs every statement (``log_statement = all``); one private and one group
message are sent, and the statements each caused until the background work settles are printed
in order, counted by kind.

    python -m bench.statements_per_message
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections import Counter

import asyncpg

from bench.faults.harness import StubEmbeddings, embedded_dsn
from tests.plugin.events import SELF_ID, at_seg, message_payload, text_seg
from tests.plugin.wire import ApiCall, OneBotPeer, StubLLM, start_bot, stop_bot

SETTLE = 3.0  # seconds for the deferred embedding (0.5 s) and the rest to finish
STATEMENT = re.compile(r"LOG:\s+(?:statement|execute [^:]*): (.*)")
# Statements the bot's background loops run on their own timers, not caused by a message.
BACKGROUND = ("pg_try_advisory", "pg_advisory_unlock")


async def set_logging(dsn: str, value: str | None) -> None:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        if value is None:
            await conn.execute("ALTER SYSTEM RESET log_statement")
        else:
            await conn.execute(f"ALTER SYSTEM SET log_statement = '{value}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def statements(log_text: str) -> list[str]:
    """Logged statements, each on one line (multi-line statements are joined)."""
    found: list[str] = []
    current: list[str] | None = None
    for line in log_text.splitlines():
        match = STATEMENT.search(line)
        if match:
            if current is not None:
                found.append(" ".join(current))
            current = [match.group(1).strip()]
        elif current is not None and (line.startswith("\t") or line.startswith(" ")):
            current.append(line.strip())
        elif current is not None:
            found.append(" ".join(current))
            current = None
    if current is not None:
        found.append(" ".join(current))
    return [" ".join(s.split()) for s in found]


async def one_message(
    peer: OneBotPeer, replies: asyncio.Queue[ApiCall], user_id: int, group_id: int | None
) -> None:
    text = "我周三要去图书馆还书，提醒我一下"
    segments = [text_seg(text)] if group_id is None else [at_seg(SELF_ID), text_seg(text)]
    await peer.send_event(message_payload(segments, user_id=user_id, group_id=group_id))
    await asyncio.wait_for(replies.get(), 60)


async def run() -> None:
    llm = StubLLM(reply="好的，我记住了。", delay=0.05).start()
    embeddings = StubEmbeddings()
    extra = {"LOG_LEVEL": "WARNING", "EVALUATOR_ENABLED": "false", **embeddings.env()}
    bot = await start_bot(llm_url=llm.base_url, extra_env=extra)
    dsn = embedded_dsn(bot)
    log_file = bot.data_dir / "pg" / "log"
    replies: asyncio.Queue[ApiCall] = asyncio.Queue()
    peer = await OneBotPeer.connect(bot.ws_url, bot.token)
    peer.on_call = lambda call: replies.put_nowait(call) if call.action == "send_msg" else None
    try:
        await one_message(peer, replies, 5_000_001, None)  # warm-up
        await asyncio.sleep(SETTLE)
        for label, user_id, group_id in (
            ("private", 5_000_002, None),
            ("group", 5_000_003, 6_000_003),
        ):
            # Two messages per session: the second is the usual case (a session with history).
            for number in (1, 2):
                await set_logging(dsn, "all")
                start = log_file.stat().st_size
                await one_message(peer, replies, user_id, group_id)
                await asyncio.sleep(SETTLE)
                await set_logging(dsn, None)
                with log_file.open(encoding="utf-8", errors="replace") as f:
                    f.seek(start)
                    logged = statements(f.read())
                caused = [
                    s
                    for s in logged
                    if "log_statement" not in s
                    and "pg_reload_conf" not in s
                    and not any(b in s for b in BACKGROUND)
                ]
                print(f"\n{label} message {number}: {len(caused)} statements")
                for s in caused:
                    print(f"  {s[:160]}")
                kinds = Counter(s.split()[0].upper() for s in caused)
                print("  by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    finally:
        await peer.close()
        await stop_bot(bot)
        llm.stop()
        embeddings.close()
        shutil.rmtree(bot.data_dir, ignore_errors=True)


def main() -> None:
    asyncio.run(run())


if __name__ == "__main__":
    main()
