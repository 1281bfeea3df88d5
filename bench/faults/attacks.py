"""The console and import attacks of issue 29, against the real bot.

Console: oversized and endless bodies to the login form and to the console's own routes
(with a session), ten at once, against a stated bound on the bot's resident memory; dates and
pages at the calendar's and the integers' ends (400 with a message, never a 500 or a false
"database down" 503); thirty wrong logins, after which the right token must still log in.

Import: files with bad records (not JSON, no content, year 1 and year 9999, no time zone, a
10 MB line, NUL), a Shift-JIS QQ export with ``--encoding`` and a GB18030 and a UTF-16 one
detected, run through the real CLI on the bot's database while it runs: the good records are
stored, each bad one is named by its line, and the person whose records were imported still
gets answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx

from bench.faults.harness import Chats, Tally, embedded_dsn, running_bot, settle
from bench.faults.scenarios import OVERSIZED_BOUND_MB
from bench.process_stats import rss_mb
from tests.plugin.wire import REPO, BotProcess, StubLLM

CONSOLE_TOKEN = "fault-suite-console-token"
ATTACKER = "127.0.0.2"  # where the wrong logins come from; the operator is at 127.0.0.1
AT_ONCE = 10
BODY_MB = 200
ENDLESS_CAP_GB = 4  # an "endless" body stops here, should the bot read it all (a defect)

# Routes a session may POST to; each must refuse an oversized body before reading it.
CONSOLE_POSTS = ("/memory/login", "/memory/debug", "/memory/turn/edit", "/memory/delete-selected")
OUT_OF_RANGE = (
    "/memory/session?key=9301&to=9999-12-31",
    "/memory/session?key=9301&from=0001-01-01",
    "/memory/session?key=9301&from=2024-02-30",
    f"/memory/session?key=9301&page={2**63 - 1}",
    f"/memory/session?key=9301&page={10**40}",
    f"/memory/sessions?page={2**63}",
    f"/memory/audit?page={2**62}",
)


def _browser_headers(bot: BotProcess) -> dict[str, str]:
    # As a browser on the console's own page sends them: past the cross-site check.
    return {"Origin": f"http://127.0.0.1:{bot.port}", "Sec-Fetch-Site": "same-origin"}


@contextlib.asynccontextmanager
async def _session(bot: BotProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{bot.port}", trust_env=False, timeout=120
    ) as client:
        client.headers.update(_browser_headers(bot))
        answer = await client.post("/memory/login", data={"token": CONSOLE_TOKEN})
        if answer.status_code != 303:
            raise RuntimeError(f"console login answered {answer.status_code}")
        yield client


async def _big_post(client: httpx.AsyncClient, path: str, *, mode: str) -> int:
    """POST a body to ``path``: ``declared`` (``BODY_MB`` with its length), ``streamed`` (the
    same without one) or ``endless`` (never ends, up to ``ENDLESS_CAP_GB``). The status, 599
    if the bot hung up first (as it may once the limit is passed)."""
    chunk = b"a" * (1 << 20)
    count = ENDLESS_CAP_GB * 1024 if mode == "endless" else BODY_MB

    async def body() -> AsyncIterator[bytes]:
        yield b"csrf=x&token="
        for _ in range(count):
            yield chunk

    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if mode == "declared":
        headers["Content-Length"] = str(BODY_MB * len(chunk) + 13)
    try:
        answer = await client.post(path, content=body(), headers=headers)
        return answer.status_code
    except httpx.HTTPError:
        return 599


async def console_attacks() -> Tally:
    tally = Tally("console attacks")
    llm = StubLLM(delay=0.0).start()
    try:
        env = {"MEMORY_CONSOLE_TOKEN": CONSOLE_TOKEN}
        async with running_bot(tally, llm_url=llm.base_url, extra_env=env) as (bot, peer):
            chats = Chats(peer, tally, reply_timeout=30)
            await chats.say("控制台攻击之前", user_id=9301)
            async with _session(bot) as client:
                before = rss_mb(bot.process.pid)
                peak = before
                modes = ("declared", "streamed", "endless")
                jobs = [
                    asyncio.ensure_future(
                        _big_post(client, CONSOLE_POSTS[i % len(CONSOLE_POSTS)], mode=modes[i % 3])
                    )
                    for i in range(AT_ONCE)
                ]
                while not all(job.done() for job in jobs):
                    peak = max(peak, rss_mb(bot.process.pid))
                    await asyncio.sleep(0.05)
                statuses = Counter(job.result() for job in jobs)
                tally.notes.append(
                    f"{AT_ONCE} oversized/endless bodies at once: {dict(sorted(statuses.items()))}"
                    f"; RSS {before:.0f} -> {peak:.0f} MB (+{peak - before:.0f}, bound "
                    f"+{OVERSIZED_BOUND_MB})"
                )
                if peak - before > OVERSIZED_BOUND_MB:
                    tally.misses.append(f"resident memory grew {peak - before:.0f} MB")
                if set(statuses) - {413, 599}:
                    tally.misses.append("an oversized body was not refused")

                ranges = {path: (await client.get(path)).status_code for path in OUT_OF_RANGE}
                not_400 = {path: status for path, status in ranges.items() if status != 400}
                tally.notes.append(
                    f"out-of-range parameters: {sum(s == 400 for s in ranges.values())}/"
                    f"{len(ranges)} answered 400" + (f" (not: {not_400})" if not_400 else "")
                )
                if not_400:
                    tally.misses.append(f"out-of-range parameters not a 400: {not_400}")
                if (await client.get("/memory/session?key=9301")).status_code != 200:
                    tally.misses.append("the console no longer works after them")

            wrong = await _wrong_logins(bot, 30)
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{bot.port}", trust_env=False, timeout=60
            ) as fresh:
                fresh.headers.update(_browser_headers(bot))
                right = await fresh.post("/memory/login", data={"token": CONSOLE_TOKEN})
                attacker = httpx.AsyncHTTPTransport(local_address=ATTACKER)
                async with httpx.AsyncClient(
                    base_url=fresh.base_url, trust_env=False, timeout=60, transport=attacker
                ) as there:
                    there.headers.update(_browser_headers(bot))
                    locked = await there.post("/memory/login", data={"token": CONSOLE_TOKEN})
            tally.notes.append(
                f"30 wrong logins from {ATTACKER}: {dict(sorted(wrong.items()))}; then the "
                f"right token from 127.0.0.1: {right.status_code}, from {ATTACKER}: "
                f"{locked.status_code} (an address over the limit waits, by design)"
            )
            if right.status_code != 303:
                tally.misses.append("the right token was locked out by wrong logins")
            if not await chats.say("控制台攻击之后", user_id=9301):
                tally.misses.append("no answer after the console attacks")
            await settle(tally, embedded_dsn(bot))
    finally:
        llm.stop()
    return tally


async def _wrong_logins(bot: BotProcess, count: int) -> Counter[int]:
    """``count`` wrong tokens from another address (127.0.0.2: loopback is all of 127/8)."""
    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{bot.port}",
        trust_env=False,
        timeout=60,
        transport=httpx.AsyncHTTPTransport(local_address=ATTACKER),
    ) as client:
        client.headers.update(_browser_headers(bot))
        for number in range(count):
            answer = await client.post("/memory/login", data={"token": f"guess-{number:04d}"})
            statuses[answer.status_code] += 1
    return statuses


# ----------------------------------------------------------------------------- imports

IMPORTED_USER = 9401


def _jsonl_with_bad_records(folder: Path) -> tuple[Path, int, list[int]]:
    """A JSON-lines file: its path, how many good turns it holds, the lines that are bad."""
    good = {"user_id": IMPORTED_USER, "role": "user", "created_at": "2025-03-01T10:00:00+08:00"}
    lines: list[tuple[str, bool]] = [
        (json.dumps({**good, "content": "导入的第一句：我喜欢吃草莓"}, ensure_ascii=False), True),
        ("{not json", False),
        (json.dumps({"user_id": IMPORTED_USER, "role": "user"}), False),  # no content
        (json.dumps({**good, "content": "元年", "created_at": "0001-01-01T00:00:00+00:00"}), False),
        (
            json.dumps(
                {**good, "content": "万年", "created_at": "9999-12-31T23:59:59.999999+00:00"}
            ),
            False,
        ),
        (json.dumps({**good, "content": "无时区", "created_at": "2025-03-01T10:00:00"}), False),
        (json.dumps({**good, "content": "未来", "created_at": "2099-01-01T00:00:00+00:00"}), False),
        (json.dumps({**good, "content": "大" * 10_000_000}, ensure_ascii=False), True),
        (json.dumps({**good, "content": "前\x00后"}, ensure_ascii=False), True),
        (json.dumps({**good, "user_id": 2**70, "content": "大号"}), False),
        ("[1, 2, 3]", False),
        (json.dumps({**good, "content": "导入的最后一句：我住在杭州"}, ensure_ascii=False), True),
    ]
    path = folder / "bad-records.jsonl"
    path.write_text("\n".join(text for text, _ in lines) + "\n", encoding="utf-8")
    bad = [number for number, (_, ok) in enumerate(lines, start=1) if not ok]
    return path, sum(ok for _, ok in lines), bad


QQ_EXPORT = """消息记录（此消息记录为文本格式，不支持重新导入）

================================================================
消息分组:我的好友
================================================================
消息对象:{name}
================================================================

2025-03-02 09:00:01 {name}({qq})
{text}

0001-01-01 00:00:00 {name}({qq})
元年の話

9999-12-31 23:59:59 {name}({qq})
万年の話

2025-03-02 09:01:00 {name}({qq})
最後の一言
"""


def _qq_exports(folder: Path) -> list[tuple[str, Path, list[str], str]]:
    """(what, file, extra CLI arguments, a text that must be stored as it was)."""
    made = []
    for number, (encoding, what, text, args) in enumerate(
        [
            ("shift_jis", "Shift-JIS, --encoding shift_jis", "こんにちは、東京です", True),
            ("gb18030", "GB18030, detected", "我在广州吃早茶", False),
            ("utf-16", "UTF-16, detected", "周末去爬山", False),
        ]
    ):
        qq = 9500 + number
        path = folder / f"export-{encoding}.txt"
        name = "友達" if encoding == "shift_jis" else f"朋友{number}"
        content = QQ_EXPORT.format(name=name, qq=qq, text=text)
        if encoding == "shift_jis":
            # A Japanese client's header is not the Chinese one (and Shift-JIS has no 记):
            # this export starts at its first message.
            content = content[content.index("2025-03-02") :]
        path.write_bytes(content.replace("\n", "\r\n").encode(encoding))
        extra = ["--user-id", str(qq), "--user-name", name]
        if args:
            extra += ["--encoding", encoding]
        made.append((what, path, extra, text))
    return made


def _cli(dsn: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMORY_DSN": dsn, "MEMORY_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "memory_core", "--env-file", "/dev/null", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=600,
        check=False,
    )


async def import_attacks() -> Tally:
    tally = Tally("import attacks")
    llm = StubLLM(delay=0.0).start()
    folder = Path(tempfile.mkdtemp(prefix="tm-faults-import-", dir="/tmp"))
    try:
        async with running_bot(tally, llm_url=llm.base_url, extra_env={}) as (bot, peer):
            chats = Chats(peer, tally, reply_timeout=60)
            await chats.say("导入之前", user_id=IMPORTED_USER)
            dsn = embedded_dsn(bot)
            path, good, bad = _jsonl_with_bad_records(folder)
            cli = folder / "cli"
            dry = await asyncio.to_thread(_cli, dsn, cli, "import", str(path), "--dry-run")
            real = await asyncio.to_thread(_cli, dsn, cli, "import", str(path))
            named = sorted({int(n) for n in _skipped_lines(real.stderr, path)})
            tally.notes.append(
                f"jsonl with {len(bad)} bad of {len(bad) + good} lines: exit {real.returncode}, "
                f"lines named {named} (dry run named {len(_skipped_lines(dry.stderr, path))}); "
                f"{real.stdout.strip().splitlines()[-1] if real.stdout.strip() else '-'}"
            )
            if named != bad:
                tally.misses.append(f"bad lines named {named}, expected {bad}")
            if f"stored {good} new" not in real.stdout:
                tally.misses.append(f"the {good} good records were not all stored")
            for what, export, extra, text in _qq_exports(folder):
                done = await asyncio.to_thread(
                    _cli, dsn, cli, "import", str(export), "--format", "qq-txt", *extra
                )
                stored = await _stored_texts(dsn, int(extra[1]))
                kept = text in stored
                skipped = len(_skipped_lines(done.stderr, export))
                tally.notes.append(
                    f"{what}: exit {done.returncode}, {len(stored)} stored, text intact "
                    f"{'yes' if kept else 'no'}, {skipped} line(s) skipped"
                )
                if not kept:
                    tally.misses.append(f"{what}: stored text differs from the export")
                if skipped != 2:
                    tally.misses.append(
                        f"{what}: {skipped} lines named, expected 2 (years 1, 9999)"
                    )
            # Not a target: Shift-JIS read without --encoding (it decodes as GB18030 too).
            what, export, extra, text = _qq_exports(folder)[0]
            unstated = [arg for arg in extra if arg not in ("--encoding", "shift_jis")]
            guessed = await asyncio.to_thread(
                _cli, dsn, cli, "import", str(export), "--format", "qq-txt", *unstated, "--dry-run"
            )
            tally.notes.append(
                f"{what.split(',')[0]} without --encoding (dry run): text intact "
                f"{'yes' if text in guessed.stdout else 'no'}"
            )
            # The imported person and the bot's upkeep are not broken by anything imported.
            for text in ("我喜欢吃什么？", "我住在哪里？"):
                if not await chats.say(text, user_id=IMPORTED_USER):
                    tally.misses.append("the imported person got no answer")
            await asyncio.sleep(35)  # one maintenance round over the imported rows
            await settle(tally, dsn)
            if "Traceback" in bot.log_text():
                tally.misses.append("a traceback in the bot's log after the imports")
    finally:
        llm.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return tally


def _skipped_lines(stderr: str, path: Path) -> list[str]:
    return [
        line.split(":", 2)[1]
        for line in stderr.splitlines()
        if line.startswith(f"{path}:") and ": skipped: " in line
    ]


async def _stored_texts(dsn: str, user_id: int) -> list[str]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        rows = await conn.fetch("SELECT content FROM dialogues WHERE user_id = $1", user_id)
    finally:
        await conn.close()
    return [row["content"] for row in rows]


SCENARIOS = {"console": console_attacks, "import": import_attacks}
