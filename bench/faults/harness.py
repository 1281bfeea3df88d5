"""What every fault scenario shares: chats over the real wire, stand-in embedding and judge
servers, counting what the database holds, and the per-scenario figures.

The bot, the OneBot peer and the stand-in chat model are the wire tests' (``tests.plugin.wire``);
this module adds only what those tests do not need.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import re
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np

from bench.common import percentiles
from bench.process_stats import rss_mb
from tests.fakes import Answer, Loopback, ScriptedLLM, json_response
from tests.pg_processes import postgres_processes
from tests.plugin.events import SELF_ID, at_seg, message_payload, text_seg
from tests.plugin.wire import ApiCall, BotProcess, OneBotPeer, StubLLM, start_bot, stop_bot

_markers = itertools.count(1)


def marker() -> str:
    """A tag no other message of the run carries: how a stored turn is matched to what was
    sent (hostile text is stored cleaned, so whole texts cannot be compared)."""
    return f"⟦f{next(_markers)}⟧"


def markers_in(text: str) -> list[str]:
    return re.findall(r"⟦f\d+⟧", text)


# ----------------------------------------------------------------------------- figures


@dataclass
class Tally:
    """One scenario's figures, printed as one row."""

    name: str
    sent: int = 0
    answered: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)  # markers of answered user turns
    user_stored: int = 0
    replies_stored: int = 0
    lost: int = 0
    rss_mb: float = 0.0
    crashed: bool = False
    left_behind: int = 0
    over_deadline: int = 0
    notes: list[str] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)  # other targets missed

    def row(self) -> str:
        stats = percentiles(self.latencies_ms) if self.latencies_ms else None
        latency = f"{stats['p50']:.0f} / {stats['p95']:.0f}" if stats else "–"
        return (
            f"| {self.name} | {self.sent} | {self.answered} | {self.user_stored} | "
            f"{self.replies_stored} | {self.lost} | {latency} | {self.rss_mb:.0f} | "
            f"{'yes' if self.crashed else 'no'} | {self.left_behind} | {'; '.join(self.notes)} |"
        )

    @property
    def failed(self) -> list[str]:
        """The targets this scenario missed."""
        missed = list(self.misses)
        if self.lost:
            missed.append(f"{self.lost} acknowledged user turn(s) lost")
        if self.crashed:
            missed.append("the bot crashed")
        if self.left_behind:
            missed.append(f"{self.left_behind} process(es) left behind")
        if self.over_deadline:
            missed.append(f"{self.over_deadline} repl(ies) past the deadline")
        return missed


HEADER = (
    "| scenario | sent | answered | user turns stored | replies stored | lost | "
    "p50 / p95 ms | RSS MB | crash | left behind | notes |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


# ----------------------------------------------------------------------------- chats


def chat_key(user_id: int, group_id: int | None) -> tuple[str, int]:
    return ("group", group_id) if group_id is not None else ("private", user_id)


class Chats:
    """Sends messages over one peer and waits for the bot's reply in the same chat."""

    def __init__(self, peer: OneBotPeer, tally: Tally, *, reply_timeout: float = 60.0) -> None:
        self.peer = peer
        self.tally = tally
        self.reply_timeout = reply_timeout
        self._queues: dict[tuple[str, int], asyncio.Queue[ApiCall]] = {}
        self.sent_at: dict[str, float] = {}  # marker -> when its message was sent
        self.replied_at: dict[str, float] = {}  # marker -> when the reply to it arrived
        peer.on_call = self._route

    def _route(self, call: ApiCall) -> None:
        if call.action not in {"send_msg", "send_private_msg", "send_group_msg"}:
            return
        key = chat_key(int(call.params.get("user_id", 0)), call.params.get("group_id"))
        queue = self._queues.get(key)
        if queue is not None:
            queue.put_nowait(call)

    def queue(self, user_id: int, group_id: int | None) -> asyncio.Queue[ApiCall]:
        return self._queues.setdefault(chat_key(user_id, group_id), asyncio.Queue())

    async def say(
        self,
        text: str,
        *,
        user_id: int,
        group_id: int | None = None,
        segments: list[dict[str, Any]] | None = None,
        self_id: int = SELF_ID,
        expect_reply: bool = True,
    ) -> bool:
        """Send one message (``text`` carries a fresh marker); True if the bot answered it."""
        tag = marker()
        body = segments if segments is not None else [text_seg(f"{tag} {text}")]
        if group_id is not None and segments is None:
            body = [at_seg(self_id), *body]
        queue = self.queue(user_id, group_id)
        while not queue.empty():
            queue.get_nowait()
        try:
            payload = message_payload(body, user_id=user_id, group_id=group_id, self_id=self_id)
        except (AttributeError, TypeError):  # segments no client sends well-formed
            payload = message_payload([], user_id=user_id, group_id=group_id, self_id=self_id)
            payload["message"] = body
        sent_at = time.monotonic()
        self.tally.sent += 1
        try:
            await self.peer.ws.send(json.dumps(payload))  # ASCII escapes: lone surrogates pass
        except Exception as exc:  # the connection is gone: counted as unanswered
            self.tally.notes.append(f"send failed: {type(exc).__name__}")
            return False
        if not expect_reply:
            return True
        try:
            await asyncio.wait_for(queue.get(), self.reply_timeout)
        except asyncio.TimeoutError:
            return False
        self.tally.answered += 1
        replied_at = time.monotonic()
        self.tally.latencies_ms.append((replied_at - sent_at) * 1000)
        tags = markers_in(json.dumps(body, ensure_ascii=False))
        self.tally.acknowledged.extend(tags)
        for tag in tags:
            self.sent_at[tag], self.replied_at[tag] = sent_at, replied_at
        return True

    def llm_times(self, llm: StubLLM) -> dict[str, tuple[float, float]]:
        """Per answered marker: seconds from sending to the chat model being asked, and from
        being asked to the reply reaching the chat (what a deadline on the model bounds)."""
        found = {}
        for call in list(llm.calls):
            last = call.messages[-1]["content"] if call.messages else ""
            for tag in markers_in(last):
                if tag in self.replied_at:
                    found[tag] = (
                        call.received_at - self.sent_at[tag],
                        self.replied_at[tag] - call.received_at,
                    )
        return found

    async def stream(
        self, *, sessions: int, messages: int, first_user: int, pause: float = 0.0
    ) -> None:
        """``sessions`` chats (every other one a group) each saying ``messages`` messages, one
        after another, all chats at once."""

        async def session(index: int) -> None:
            user_id = first_user + index
            group_id = 7_000_000 + first_user + index if index % 2 else None
            for number in range(messages):
                await self.say(
                    f"第{number}条：我周{number % 7 + 1}要去图书馆还书",
                    user_id=user_id,
                    group_id=group_id,
                )
                if pause:
                    await asyncio.sleep(pause)

        await asyncio.gather(*(session(i) for i in range(sessions)))


# ----------------------------------------------------------------------------- the database


def embedded_dsn(bot: BotProcess) -> str:
    return f"postgresql://postgres@/postgres?host={bot.data_dir / 'pg'}"


async def stored_markers(dsn: str) -> tuple[Counter[str], Counter[str]]:
    """Markers found in stored user turns and in stored replies (replies quote no marker, so
    the second counts the replies: one per marker of the user turn they answer is not known;
    it counts rows)."""
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch("SELECT role, content FROM dialogues")
    finally:
        await conn.close()
    users: Counter[str] = Counter()
    replies: Counter[str] = Counter()
    for row in rows:
        if row["role"] == "user":
            users.update(markers_in(row["content"]))
        else:
            replies["rows"] += 1
    return users, replies


async def settle(tally: Tally, dsn: str, *, timeout: float = 90.0, nudge: Any = None) -> None:
    """Wait (bounded) until every acknowledged user turn is in the database, then count.

    ``nudge`` (a coroutine function) is called now and then: a message makes the bot try the
    database at once instead of at its next maintenance round."""
    deadline = time.monotonic() + timeout
    users: Counter[str] = Counter()
    replies: Counter[str] = Counter()
    while True:
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncio.TimeoutError):
            users, replies = await stored_markers(dsn)
        missing = [tag for tag in tally.acknowledged if tag not in users]
        if not missing or time.monotonic() > deadline:
            break
        if nudge is not None:
            await nudge()
        await asyncio.sleep(2.0)
    tally.user_stored = sum(1 for tag in set(tally.acknowledged) if tag in users)
    tally.replies_stored = replies["rows"]
    tally.lost = len(set(tally.acknowledged)) - tally.user_stored


# ----------------------------------------------------------------------------- the bot


@contextlib.asynccontextmanager
async def running_bot(
    tally: Tally, *, llm_url: str, extra_env: dict[str, str], self_id: int = SELF_ID
) -> AsyncIterator[tuple[BotProcess, OneBotPeer]]:
    """A bot and a connected peer; afterwards: RSS, whether it crashed, what it left running."""
    env = {"LOG_LEVEL": "WARNING", "EVALUATOR_ENABLED": "false", **extra_env}
    bot = await start_bot(llm_url=llm_url, extra_env=env)
    peer = await OneBotPeer.connect(bot.ws_url, bot.token, self_id=self_id)
    try:
        yield bot, peer
    finally:
        await finish_bot(tally, bot, peer)


async def finish_bot(tally: Tally, bot: BotProcess, peer: OneBotPeer) -> None:
    tally.rss_mb = max(tally.rss_mb, rss_mb(bot.process.pid))
    tally.crashed = tally.crashed or bot.process.poll() is not None
    with contextlib.suppress(Exception):
        await peer.close()
    stopping = time.monotonic()
    await stop_bot(bot)
    tally.notes.append(f"stopped in {time.monotonic() - stopping:.1f} s")
    if bot.process.returncode not in (0, -15):
        tally.crashed = True
        tally.notes.append(f"exit code {bot.process.returncode}")
    log = bot.log_text()
    tracebacks = log.count("Traceback")
    if tracebacks:
        keep = Path(tempfile.gettempdir()) / f"tm-faults-{tally.name.split()[0]}-{bot.port}.log"
        keep.write_text(log, encoding="utf-8")
        tally.notes.append(f"log kept in {keep}")
        tally.notes.append(f"{tracebacks} traceback(s) in the log")
    cluster = bot.data_dir / "pg"
    if cluster.exists():
        for _ in range(50):  # the server's last backends take a moment to exit
            if not postgres_processes(cluster):
                break
            await asyncio.sleep(0.1)
        tally.left_behind += len(postgres_processes(cluster))
    shutil.rmtree(bot.data_dir, ignore_errors=True)


# ----------------------------------------------------------------------------- stand-ins


class StubEmbeddings:
    """``POST /v1/embeddings`` on loopback: ``mode`` ``ok`` (hashed vectors), ``hang`` (never
    answers while hanging), ``503``."""

    dim = 64

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = 0
        self._loopback = Loopback(self.respond)

    async def respond(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        body = json.loads(request.content)
        await asyncio.to_thread(self._while_hanging)
        if self.mode == "503":
            return json_response(503, {"error": {"message": "stand-in is overloaded"}})
        data = [
            {"index": i, "embedding": _hashed(text, self.dim)}
            for i, text in enumerate(body["input"])
        ]
        return json_response(200, {"data": data, "model": body["model"]})

    def _while_hanging(self) -> None:
        while self.mode == "hang":  # set and cleared by the scenario, from another thread
            time.sleep(0.1)

    @property
    def base_url(self) -> str:
        return f"{self._loopback.origin}/v1"

    def env(self) -> dict[str, str]:
        return {
            "EMBEDDING_PROVIDER": "api",
            "EMBEDDING_BASE_URL": self.base_url,
            "EMBEDDING_MODEL": "stand-in-embedding",
            "EMBEDDING_DIM": str(self.dim),
        }

    def close(self) -> None:
        self.mode = "ok"
        self._loopback.close()


def _hashed(text: str, dim: int) -> list[float]:
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8", "replace")).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dim)
    return [float(x) for x in vector / np.linalg.norm(vector)]


class Judge:
    """The evaluation and extraction model: scores every exchange 60, distils nothing, and
    counts how often each user turn was put before it, by task (``seen``) and how often its
    answer was given (``answered``).

    With ``hold`` set (``hold_answers``) it takes prompts and answers none until ``release``:
    a model still thinking, while the bot that asked holds the claims on that work."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str]] = Counter()
        self.answered: Counter[tuple[str, str]] = Counter()
        self.hold: threading.Event | None = None
        self._lock = threading.Lock()
        self.server = ScriptedLLM(self._answer)

    def hold_answers(self) -> None:
        self.hold = threading.Event()

    def release(self) -> None:
        if self.hold is not None:
            self.hold.set()

    def _answer(self, messages: list[dict[str, str]]) -> Answer:
        prompt = messages[-1]["content"]
        if "记忆价值" in prompt:
            task = "evaluation"
        elif "对话（每行开头是说话时间）" in prompt:
            task = "extraction:" + prompt[:40]
        else:
            task = "other"
        hold = self.hold
        with self._lock:
            for tag in set(markers_in(prompt)):
                self.seen[(task, tag)] += 1
                if hold is None:
                    self.answered[(task, tag)] += 1
        if task == "evaluation":
            count = prompt.count("【回合 ")
            scores = "\n".join(f"{i}: 60" for i in range(1, count + 1)) if count else "60"
            return Answer(scores, held=hold)
        return Answer("无", held=hold)

    def env(self) -> dict[str, str]:
        return {
            "EVALUATOR_ENABLED": "true",
            "EVALUATOR_BASE_URL": self.server.base_url,
            "EVALUATOR_MODEL": "stand-in-judge",
            "EXTRACTION_BASE_URL": self.server.base_url,
            "EXTRACTION_MODEL": "stand-in-judge",
            "EXTRACTION_EVERY_TURNS": "1",
            "EXTRACTION_SETTLE_SECONDS": "0",
        }

    def twice(self) -> dict[str, int]:
        """Per task: how many user turns were judged more than once."""
        doubled: Counter[str] = Counter()
        for (task, _), count in self.seen.items():
            if count > 1:
                doubled[task.split(":")[0]] += 1
        return dict(doubled)

    def judged(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for task, _ in self.seen:
            counts[task.split(":")[0]] += 1
        return dict(counts)


def scratch_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
