"""A real-wire harness: ``bot.py`` in a subprocess, a OneBot v11 peer on a real WebSocket, and a
loopback HTTP server standing in for the chat LLM. Used by the wire tests and the benchmark.

The peer connects the way NapCat does (reverse WebSocket to ``/onebot/v11/ws`` with
``X-Self-ID``, ``X-Client-Role: Universal`` and ``Authorization: Bearer``) and answers every API
call with its ``echo``, so the bot never waits 30 s for a missing answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection

from memory_core.storage.database import locate_database, prepare_database
from memory_core.storage.embedded_server import EmbeddedServer, embedded_cluster_dir
from tests.fakes import Loopback, json_response
from tests.model_graphs import keep_graphs, share_graphs
from tests.plugin.events import SELF_ID

REPO = Path(__file__).resolve().parents[2]
WS_PATH = "/onebot/v11/ws"
EVENT_POST_PATHS = ("/onebot/v11/", "/onebot/v11/http", "/onebot/v11/http/")
"""Where the OneBot v11 adapter takes events sent as HTTP POST."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----------------------------------------------------------------------------- stand-in LLM


@dataclass
class LLMCall:
    messages: list[dict[str, str]]
    received_at: float
    answered_at: float = 0.0


class StubLLM:
    """An OpenAI-compatible ``/chat/completions`` on loopback that records every prompt.

    ``mode`` is ``"ok"`` (answer ``reply``, a text or a function of the prompt's messages,
    after ``delay`` seconds: a model's latency, for
    the benchmarks) or ``"fail"`` (HTTP 500). With ``held`` every answer waits until
    ``release`` is set (a model still thinking for as long as the test wants; tests use this,
    never a delay raced against the bot's timers); ``stop`` sets it.
    """

    def __init__(
        self,
        reply: str | Callable[[list[dict[str, str]]], str] = "好的，我记下了。",
        delay: float = 0.0,
        held: bool = False,
        *,
        nagle: bool = False,
    ) -> None:
        self.reply = reply
        self.delay = delay
        self.held = held
        self.nagle = nagle
        self.release = threading.Event()
        self.mode = "ok"
        self.calls: list[LLMCall] = []
        self._lock = threading.Lock()
        self._loopback: Loopback | None = None

    async def respond(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        call = LLMCall(messages=body.get("messages", []), received_at=time.monotonic())
        with self._lock:
            self.calls.append(call)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.held:
            await asyncio.to_thread(self.release.wait, 300)  # a bound against a stuck test only
        if self.mode == "fail" or not request.url.path.endswith("/chat/completions"):
            response = json_response(500, {"error": {"message": "stub LLM is down"}})
        else:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": self._answer(call.messages)},
                "finish_reason": "stop",
            }
            answer = {"id": "stub", "object": "chat.completion", "choices": [choice]}
            response = json_response(200, answer)
        call.answered_at = time.monotonic()
        return response

    def _answer(self, messages: list[dict[str, str]]) -> str:
        return self.reply if isinstance(self.reply, str) else self.reply(messages)

    @property
    def base_url(self) -> str:
        assert self._loopback is not None, "start() the stand-in first"
        return f"{self._loopback.origin}/v1"

    def start(self) -> StubLLM:
        self._loopback = Loopback(self.respond, nagle=self.nagle)
        return self

    def stop(self) -> None:
        self.release.set()
        if self._loopback is not None:
            self._loopback.close()

    def prompts_containing(self, text: str) -> list[list[dict[str, str]]]:
        with self._lock:
            calls = list(self.calls)
        return [c.messages for c in calls if any(text in m["content"] for m in c.messages)]

    def last_prompt_for(self, current_text: str) -> list[dict[str, str]]:
        """The latest prompt whose current (last) message ends with ``current_text``."""
        with self._lock:
            calls = list(self.calls)
        for call in reversed(calls):
            if call.messages and call.messages[-1]["content"].endswith(current_text):
                return call.messages
        raise AssertionError(f"no prompt ended with {current_text!r}")


# ----------------------------------------------------------------------------- the bot process


class ClusterTemplate:
    """An embedded PostgreSQL cluster made once (initdb, pgvector, every migration; no rows, no
    embedding model recorded) and stopped, that each bot's data folder starts from as a copy
    (``cp -a``, which keeps the files' owner): initdb and the migrations cost a bot start some
    seconds. Such a bot meets a cluster it did not make, as after an upgrade; a bot's start on
    an empty folder (initdb by the bot itself) is what the installed-plugin and start-up-check
    tests keep. Made on first use, by ``start_bot`` when ``CLUSTER_TEMPLATE`` is set."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._lock = asyncio.Lock()

    async def copy_to(self, data_dir: Path) -> None:
        async with self._lock:
            if self._folder is None:
                self._folder = await self._make()
        template = embedded_cluster_dir(self._folder)
        await asyncio.to_thread(
            subprocess.run,
            ["cp", "-a", str(template), str(embedded_cluster_dir(data_dir))],
            check=True,
        )

    @staticmethod
    async def _make() -> Path:
        folder = Path(tempfile.mkdtemp(prefix="tm-cluster-", dir="/tmp"))
        server = EmbeddedServer(embedded_cluster_dir(folder))
        try:
            await prepare_database((await locate_database(None, server)).dsn)
        finally:
            await asyncio.to_thread(server.stop)
        return folder

    def remove(self) -> None:
        if self._folder is not None:
            _stop_orphan_postgres(self._folder)  # only if making it failed halfway
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


CLUSTER_TEMPLATE: ClusterTemplate | None = None
"""Set by the tests (``tests/plugin/conftest.py``): bots with an embedded database start from
its copy. The benchmarks leave it unset: their bots make their own cluster."""


@dataclass
class BotProcess:
    port: int
    token: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{WS_PATH}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""


def bot_environment(
    *, port: int, token: str, llm_url: str | None, data_dir: Path, extra: dict[str, str]
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ENVIRONMENT": "prod",
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "ONEBOT_ACCESS_TOKEN": token,
            "MEMORY_DATA_DIR": str(data_dir),
            "MEMORY_DSN": "",
            "LLM_BASE_URL": llm_url or "http://127.0.0.1:9/v1",
            "LLM_MODEL": "stub-model" if llm_url else "",
            "LLM_API_KEY": "test-key",
            # Timers the wire tests expect never to run out, made far longer than a loaded
            # machine takes (the tests of each timer set their own): a stand-in model's answer,
            # the local embedder's query and store deadlines, and the wait message (0 = never),
            # which a reply slower than its 8 s would otherwise send in place of the answer.
            "LLM_TIMEOUT": "60",
            "EMBEDDING_QUERY_DEADLINE": "60",
            "EMBEDDING_STORE_DEADLINE": "60",
            "CHAT_SLOW_NOTICE_AFTER": "0",
            "SUPERUSERS": '["99999"]',
            "NICKNAME": '["小诗"]',
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


async def start_bot(
    *,
    llm_url: str | None,
    token: str = "wire-test-token",
    extra_env: dict[str, str] | None = None,
    startup_timeout: float = 120.0,
    own_cluster: bool = False,
    own_graph: bool = False,
) -> BotProcess:
    """Start ``bot.py`` on a free loopback port with its data under /tmp; wait until it listens.
    Its embedded database is a copy of ``CLUSTER_TEMPLATE`` when that is set, unless
    ``own_cluster`` (the bot makes its own, as on a first start); the embedding model's graph
    is the one built earlier in the run, unless ``own_graph`` (the bot builds it)."""
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="tm-wire-", dir="/tmp"))
    if not own_graph:
        share_graphs(data_dir)  # the model's graph, built once per run
    env = bot_environment(
        port=port, token=token, llm_url=llm_url, data_dir=data_dir, extra=extra_env or {}
    )
    try:
        if CLUSTER_TEMPLATE is not None and not env["MEMORY_DSN"] and not own_cluster:
            await CLUSTER_TEMPLATE.copy_to(data_dir)
        return await launch_bot(
            env=env,
            port=port,
            token=token,
            data_dir=data_dir,
            log_path=data_dir / "bot.log",
            startup_timeout=startup_timeout,
        )
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise


async def launch_bot(
    *,
    env: dict[str, str],
    port: int,
    token: str,
    data_dir: Path,
    log_path: Path,
    python: Path | None = None,
    cwd: Path = REPO,
    startup_timeout: float = 120.0,
) -> BotProcess:
    """Start ``bot.py`` in ``cwd`` (this repository's, or another NoneBot project) under
    ``python`` and wait until it listens on ``port``. ``data_dir`` is where its embedded
    PostgreSQL lives. A bot that exits or does not listen in time is stopped, and the error
    carries its log."""
    process = _spawn_bot(env, log_path, python=python, cwd=cwd)
    bot = BotProcess(port=port, token=token, data_dir=data_dir, log_path=log_path, process=process)
    try:
        await _wait_until_listening(bot, startup_timeout)
    except BaseException:
        await stop_bot(bot)
        _stop_orphan_postgres(data_dir)
        raise
    return bot


async def _wait_until_listening(bot: BotProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bot.process.poll() is not None:
            raise RuntimeError(f"bot.py exited with {bot.process.returncode}:\n{bot.log_text()}")
        # uvicorn binds its socket only after NoneBot's start-up hooks have finished.
        if await _accepts_connections(bot.port):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"bot.py did not start in {timeout}s:\n{bot.log_text()}")


async def _accepts_connections(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _spawn_bot(
    env: dict[str, str], log_path: Path, *, python: Path | None = None, cwd: Path = REPO
) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            [str(python or sys.executable), "bot.py"],
            cwd=cwd,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


async def stop_bot(bot: BotProcess, timeout: float = 30.0) -> None:
    """SIGTERM (NoneBot shuts down and the embedded PostgreSQL stops with it); SIGKILL late."""
    process = bot.process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(process.wait, timeout)
    if process.poll() is None:
        process.kill()
        process.wait()
        _stop_orphan_postgres(bot.data_dir)
    keep_graphs(bot.data_dir)


class StandInModel(Protocol):
    """A chat model served on loopback (``StubLLM``, ``tests.tool_llm.ToolLLM``)."""

    @property
    def base_url(self) -> str: ...

    def stop(self) -> None: ...


Model = TypeVar("Model", bound=StandInModel)


@dataclass
class ChattingBot(Generic[Model]):
    """A running ``bot.py``, its stand-in chat model and a peer connected to it
    (``chatting_bot``); ``log`` is the bot's log once it has stopped."""

    llm: Model
    bot: BotProcess
    peer: OneBotPeer
    log: str = ""


@contextlib.asynccontextmanager
async def chatting_bot(
    llm: Model, *, extra_env: dict[str, str] | None = None, said_may_be_logged: bool = False
) -> AsyncIterator[ChattingBot[Model]]:
    """Start ``bot.py`` on ``llm`` (started) and connect a NapCat-shaped peer; on leaving, stop
    all three, delete the bot's folder and check its log: no traceback, and (unless
    ``said_may_be_logged``) none of the texts the peer sent. The log stays in ``log`` for the
    caller's own checks."""
    try:
        bot = await start_bot(llm_url=llm.base_url, extra_env=extra_env)
    except BaseException:
        llm.stop()
        raise
    peer = None
    chatting: ChattingBot[Model] | None = None
    try:
        peer = await OneBotPeer.connect(bot.ws_url, bot.token)
        chatting = ChattingBot(llm=llm, bot=bot, peer=peer)
        yield chatting
    finally:
        if peer is not None:
            await peer.close()
        await stop_bot(bot)
        llm.stop()
        log = bot.log_text()
        shutil.rmtree(bot.data_dir, ignore_errors=True)
        if chatting is not None:
            chatting.log = log
        assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
        # What people said stays out of the log (NoneBot's line for each message included).
        if peer is not None and not said_may_be_logged:
            assert texts_in_log(log, peer.said) == []


@dataclass
class ExitedBot:
    returncode: int
    log: str
    database_started: bool
    database_left_running: bool = False  # its postmaster.pid outlived the bot


async def run_bot_until_exit(*, extra_env: dict[str, str], timeout: float = 120.0) -> ExitedBot:
    """Start ``bot.py`` expecting it to exit by itself; one that starts listening or still runs
    after ``timeout`` is stopped and fails the caller. Reports whether it started its embedded
    PostgreSQL."""
    port = free_port()
    data_dir = Path(tempfile.mkdtemp(prefix="tm-wire-", dir="/tmp"))
    log_path = data_dir / "bot.log"
    env = bot_environment(port=port, token="", llm_url=None, data_dir=data_dir, extra=extra_env)
    process = _spawn_bot(env, log_path)
    bot = BotProcess(port=port, token="", data_dir=data_dir, log_path=log_path, process=process)
    try:
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            if time.monotonic() > deadline or await _accepts_connections(port):
                await stop_bot(bot)
                raise AssertionError(f"bot.py did not exit:\n{bot.log_text()}")
            await asyncio.sleep(0.2)
        return ExitedBot(
            returncode=process.returncode,
            log=bot.log_text(),
            database_started=(data_dir / "pg").exists(),
            database_left_running=(data_dir / "pg" / "postmaster.pid").exists(),
        )
    finally:
        _stop_orphan_postgres(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _stop_orphan_postgres(data_dir: Path) -> None:
    # A killed bot cannot stop the server it started; stop that one server by its own pid file.
    pid_file = data_dir / "pg" / "postmaster.pid"
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pid_file.read_text().splitlines()[0])
        os.kill(pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown


# ----------------------------------------------------------------------------- HTTP POST events


async def post_event(
    bot: BotProcess,
    payload: dict[str, Any],
    *,
    path: str,
    self_id: int = SELF_ID,
    secret: str | None = None,
    token: str | None = None,
) -> httpx.Response:
    """Send an event the way a OneBot client's HTTP reporting does: ``X-Self-ID``, a JSON body,
    ``X-Signature: sha1=<HMAC of the body>`` when ``secret`` is given, a bearer ``token``."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    headers = {"Content-Type": "application/json", "X-Self-ID": str(self_id)}
    if secret is not None:
        digest = hmac.new(secret.encode("utf-8"), body, "sha1").hexdigest()
        headers["X-Signature"] = f"sha1={digest}"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{bot.port}", trust_env=False
    ) as client:
        return await client.post(path, content=body, headers=headers)


# ----------------------------------------------------------------------------- the OneBot peer


@dataclass
class ApiCall:
    action: str
    params: dict[str, Any]
    echo: Any
    at: float


@dataclass
class OneBotPeer:
    """The NapCat side of the reverse WebSocket."""

    ws: ClientConnection | ServerConnection
    self_id: int = SELF_ID
    calls: list[ApiCall] = field(default_factory=list)
    member_names: dict[tuple[int, int], str] = field(default_factory=dict)
    nicknames: dict[int, str] = field(default_factory=dict)  # get_stranger_info
    group_names: dict[int, str] = field(default_factory=dict)  # get_group_info
    sent_messages: dict[int, dict[str, Any]] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)  # the text of every message event sent
    on_call: Callable[[ApiCall], None] | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(700_000_000))
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _reader: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        token: str | None,
        self_id: int = SELF_ID,
        *,
        auth_scheme: str = "Bearer",
        **kwargs: Any,
    ) -> OneBotPeer:
        """NapCat's handshake (go-cqhttp sends ``Token <token>``: ``auth_scheme="Token"``)."""
        headers = {
            "X-Self-ID": str(self_id),
            "X-Client-Role": "Universal",
            "User-Agent": "OneBot/11",
            "Authorization": f"{auth_scheme} {token}" if token else "",
        }
        ws = await connect(url, additional_headers=headers, max_size=None, **kwargs)
        return cls.attach(ws, self_id=self_id)

    @classmethod
    def attach(cls, ws: Any, self_id: int = SELF_ID) -> OneBotPeer:
        """A peer over an open connection (forward mode: the bot connected to us)."""
        peer = cls(ws=ws, self_id=self_id)
        peer._reader = asyncio.create_task(peer._read())
        return peer

    async def close(self) -> None:
        await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    async def send_event(self, payload: dict[str, Any]) -> None:
        self.said.extend(message_texts(payload))
        await self.ws.send(json.dumps(payload, ensure_ascii=False))

    async def _read(self) -> None:
        async for raw in self.ws:
            data = json.loads(raw)
            call = ApiCall(
                action=str(data.get("action")),
                params=data.get("params") or {},
                echo=data.get("echo"),
                at=time.monotonic(),
            )
            response = self._answer(call)
            await self.ws.send(json.dumps(response, ensure_ascii=False))
            self.calls.append(call)
            if self.on_call is not None:
                self.on_call(call)
            async with self._changed:
                self._changed.notify_all()

    def _answer(self, call: ApiCall) -> dict[str, Any]:
        ok: dict[str, Any] = {"status": "ok", "retcode": 0, "message": "", "wording": ""}
        if call.action in {"send_msg", "send_private_msg", "send_group_msg"}:
            message_id = next(self._ids)
            self.sent_messages[message_id] = call.params
            data: Any = {"message_id": message_id}
            call.params = {**call.params, "_message_id": message_id}
        elif call.action == "get_msg":
            found = self.sent_messages.get(int(call.params.get("message_id", 0)))
            if found is None:
                return {
                    "status": "failed",
                    "retcode": 1404,
                    "data": None,
                    "echo": call.echo,
                    "message": "消息不存在",
                    "wording": "消息不存在",
                }
            data = {
                "time": int(time.time()),
                "message_type": found.get("message_type", "group"),
                "message_id": call.params["message_id"],
                "real_id": call.params["message_id"],
                "sender": {"user_id": self.self_id, "nickname": "bot"},
                "message": found.get("message", []),
            }
            if "group_id" in found:  # as NapCat, go-cqhttp and Lagrange name it
                data["group_id"] = found["group_id"]
        elif call.action == "get_group_member_info":
            key = (int(call.params["group_id"]), int(call.params["user_id"]))
            name = self.member_names.get(key, f"成员{key[1]}")
            data = {"group_id": key[0], "user_id": key[1], "nickname": name, "card": name}
        elif call.action == "get_stranger_info" and int(call.params["user_id"]) in self.nicknames:
            user_id = int(call.params["user_id"])
            data = {"user_id": user_id, "nickname": self.nicknames[user_id]}
        elif call.action == "get_group_info" and int(call.params["group_id"]) in self.group_names:
            group_id = int(call.params["group_id"])
            data = {"group_id": group_id, "group_name": self.group_names[group_id]}
        else:
            data = None
        return {**ok, "data": data, "echo": call.echo}

    # ------------------------------------------------------------------ waiting

    def sends(self) -> list[ApiCall]:
        return [
            c for c in self.calls if c.action in {"send_msg", "send_private_msg", "send_group_msg"}
        ]

    async def wait_for(
        self, predicate: Callable[[ApiCall], bool], *, after: int = 0, timeout: float = 30.0
    ) -> ApiCall:
        """The first API call from index ``after`` on that satisfies ``predicate``."""

        def find() -> ApiCall | None:
            for call in self.calls[after:]:
                if predicate(call):
                    return call
            return None

        async def wait() -> ApiCall:
            async with self._changed:
                while (found := find()) is None:
                    await self._changed.wait()
                return found

        return await asyncio.wait_for(wait(), timeout)

    async def wait_reply(
        self,
        *,
        user_id: int,
        group_id: int | None = None,
        after: int = 0,
        timeout: float = 30.0,
    ) -> ApiCall:
        """The bot's next message to this private chat / group."""

        def match(call: ApiCall) -> bool:
            if call.action not in {"send_msg", "send_private_msg", "send_group_msg"}:
                return False
            if group_id is not None:
                return call.params.get("group_id") == group_id
            return call.params.get("group_id") is None and call.params.get("user_id") == user_id

        return await self.wait_for(match, after=after, timeout=timeout)


def message_texts(payload: dict[str, Any]) -> list[str]:
    """The text segments of a message event (a CQ-code string whole)."""
    if payload.get("post_type") != "message":
        return []
    message = payload.get("message")
    if isinstance(message, str):
        return [message]
    return [
        str(seg["data"].get("text") or "")
        for seg in message or []
        if seg.get("type") == "text" and isinstance(seg.get("data"), dict)
    ]


LOGGED_TEXT_MIN_CHARS = 4
"""Shorter texts (好, 确认, /帮助) are left out of ``texts_in_log``: any line may hold them."""


def texts_in_log(log: str, texts: list[str]) -> list[str]:
    """Those of ``texts`` (at least ``LOGGED_TEXT_MIN_CHARS`` characters, surrounding spaces
    aside) that some line of ``log`` holds."""
    found = []
    for text in dict.fromkeys(t.strip() for t in texts):
        if len(text) >= LOGGED_TEXT_MIN_CHARS and text in log:
            found.append(text)
    return found


def sent_text(call: ApiCall) -> str:
    """The text of a send call (the reply quote segment left out)."""
    message = call.params.get("message")
    if isinstance(message, str):
        return message
    return "".join(
        seg["data"].get("text", "") for seg in message or [] if seg.get("type") == "text"
    )
