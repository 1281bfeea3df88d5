"""A real full disk: the bot's data folder (its embedded PostgreSQL and its spool) on a
size-limited tmpfs that the suite fills until writes fail with ENOSPC, then frees.

Mounting needs root (``mount -t tmpfs``); without it the scenario says so and misses its
target rather than pretending. The embedding model is a loopback stand-in so that no model
graph takes the small disk's room.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.faults.harness import Chats, StubEmbeddings, Tally, embedded_dsn, finish_bot, settle
from bench.faults.promises import send_event, text_of
from bench.faults.scenarios import LLM_DELAY
from tests.plugin.events import SUPERUSER_ID, message_payload, text_seg
from tests.plugin.wire import (
    OneBotPeer,
    StubLLM,
    bot_environment,
    free_port,
    launch_bot,
    stop_bot,
)

DISK_MB = 256  # the cluster after initdb (~40 MB), its WAL, the spool, and room to fill


def _mount(folder: Path) -> str | None:
    """Mount a ``DISK_MB`` tmpfs on ``folder``; why not, or ``None`` once mounted."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m,mode=0755", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if done.returncode == 0 else f"mount failed: {done.stderr.strip()}"


def _unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)


def fill(folder: Path) -> int:
    """Write a file in ``folder`` until the filesystem refuses with ENOSPC; its size in bytes.
    Whatever else raises is not a full disk and propagates."""
    written = 0
    with (folder / "filler").open("wb", buffering=0) as filler:
        for size in (1 << 20, 1 << 12, 1):
            while True:
                try:
                    written += filler.write(b"\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return written


def free_space(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


async def real_full_disk() -> Tally:
    """Chat, fill the data folder's disk, chat while it is full (answers go on; turns are
    spooled, or held in memory when the spool cannot be written either), free it, and
    every acknowledged turn must reach the database."""
    tally = Tally("real ENOSPC on a full tmpfs")
    folder = Path(tempfile.mkdtemp(prefix="tm-faults-enospc-", dir="/tmp"))
    why_not = _mount(folder)
    if why_not is not None:
        tally.misses.append(f"no real full disk: {why_not}")
        shutil.rmtree(folder, ignore_errors=True)
        return tally
    llm = StubLLM(delay=LLM_DELAY).start()
    embeddings = StubEmbeddings()
    log_path = Path(tempfile.gettempdir()) / f"tm-faults-enospc-{os.getpid()}.log"
    bot = None
    try:
        port = free_port()
        extra = {"LOG_LEVEL": "WARNING", "EVALUATOR_ENABLED": "false", **embeddings.env()}
        env = bot_environment(
            port=port, token="wire-test-token", llm_url=llm.base_url, data_dir=folder, extra=extra
        )
        bot = await launch_bot(
            env=env, port=port, token="wire-test-token", data_dir=folder, log_path=log_path
        )
        peer = await OneBotPeer.connect(bot.ws_url, bot.token)
        chats = Chats(peer, tally)
        await chats.stream(sessions=4, messages=2, first_user=9100)
        filled = fill(folder)
        before = tally.answered
        await chats.stream(sessions=5, messages=6, first_user=9200, pause=0.3)
        answered_full = tally.answered - before
        # What the operator reads meanwhile (/memstat's 存储 and 连接 lines).
        status = text_of(
            await send_event(
                chats, peer, message_payload([text_seg("/memstat")], user_id=SUPERUSER_ID)
            )
        )
        said = [line for line in status.splitlines() if "写入" in line or "数据库" in line]
        still_full = free_space(folder)
        (folder / "filler").unlink()
        log = bot.log_text()
        tally.notes.append(
            f"filled {filled / 2**20:.0f} MB of {DISK_MB} MB; answered while full "
            f"{answered_full}/30; free while full {still_full // 1024} KiB; log lines: "
            f"'No space left' {log.count('No space left')}, spool held in memory "
            f"{log.count('wait in memory')}, PANIC {log.count('PANIC')}; /memstat while "
            f"full: {' / '.join(said) or '-'}"
        )
        if not await chats.say("恢复了吗", user_id=9998):
            tally.misses.append("no answer after the disk was freed")
        nudge = lambda: chats.say("腾出空间了", user_id=9999)  # noqa: E731
        await settle(tally, embedded_dsn(bot), timeout=180, nudge=nudge)
        await finish_bot(tally, bot, peer)
        bot = None
    finally:
        if bot is not None:
            with contextlib.suppress(Exception):
                await stop_bot(bot)
        embeddings.close()
        llm.stop()
        await asyncio.sleep(0.5)
        _unmount(folder)
        shutil.rmtree(folder, ignore_errors=True)
        log_path.unlink(missing_ok=True)  # finish_bot kept a copy if it holds a traceback
    return tally


SCENARIOS = {"enospc": real_full_disk}
