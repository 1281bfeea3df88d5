"""``python -m memory_core``: import, recall, stats, reembed, purge — with the bot's settings.

Settings come from ``.env.prod`` in the working directory, overridden by environment variables,
overridden by ``--data-dir``. This module is an entry point: it is the one place in the core
that reads ``os.environ``, and hands a plain mapping to ``settings_from_mapping``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from dotenv import dotenv_values

from .errors import MemoryCoreError
from .models import MemoryTurn, TurnInput
from .service import TemporalMemory, open_memory
from .settings import MemorySettings, settings_from_mapping

IMPORT_CHUNK = 1000
DEFER_INDEX_LINES = 20_000


def load_settings(
    env_file: Path, environ: Mapping[str, str], data_dir: str | None
) -> MemorySettings:
    values: dict[str, Any] = {}
    if env_file.is_file():
        values.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    values.update(environ)
    if data_dir:
        values["MEMORY_DATA_DIR"] = data_dir
    return settings_from_mapping(values)


def _parse_time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"{field} needs a timezone offset, e.g. 2024-01-16T10:30:15+08:00")
    return parsed


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer or null")
    return value


def turn_from_json(data: Mapping[str, Any]) -> TurnInput:
    """One import line -> TurnInput, with a ValueError naming the bad field."""
    if not isinstance(data, Mapping):
        raise ValueError("each line must be a JSON object")
    user_id = _optional_int(data, "user_id")
    if user_id is None:
        raise ValueError("user_id is required")
    role = data.get("role")
    if role not in ("user", "assistant"):
        raise ValueError("role must be 'user' or 'assistant'")
    content = data.get("content")
    if not isinstance(content, str):
        raise ValueError("content must be a string")
    sender = data.get("sender_name")
    return TurnInput(
        user_id=user_id,
        group_id=_optional_int(data, "group_id"),
        role=role,
        content=content,
        sender_name=sender if isinstance(sender, str) else None,
        message_id=_optional_int(data, "message_id"),
        self_id=_optional_int(data, "self_id"),
        created_at=_parse_time(data.get("created_at"), "created_at"),
    )


def _read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield number, exc


async def run_import(memory: TemporalMemory, path: Path, out: TextIO, err: TextIO) -> int:
    with path.open("rb") as handle:
        lines = sum(1 for _ in handle)
    if lines >= DEFER_INDEX_LINES:
        print(f"{lines} lines: vector indexes are rebuilt once at the end", file=err)
        async with memory.vector_index_deferred():
            return await _import_lines(memory, path, out, err)
    code = await _import_lines(memory, path, out, err)
    await memory.index_large_sessions()  # sessions this import took past the limit
    return code


async def _import_lines(memory: TemporalMemory, path: Path, out: TextIO, err: TextIO) -> int:
    started = time.perf_counter()
    seen = inserted = bad = 0
    chunk: list[TurnInput] = []

    async def flush() -> None:
        nonlocal inserted
        if chunk:
            inserted += await memory.add_dialogues(chunk)
            chunk.clear()
            rate = seen / max(time.perf_counter() - started, 1e-9)
            print(f"\r{seen} lines read, {inserted} new rows, {rate:.0f} rows/s", end="", file=err)

    for number, data in _read_jsonl(path):
        seen += 1
        try:
            if isinstance(data, Exception):
                raise ValueError(f"not JSON: {data}")
            turn = turn_from_json(data)
            memory.check_turn(turn)
        except (ValueError, MemoryCoreError) as exc:
            bad += 1
            print(f"\n{path}:{number}: skipped: {exc}", file=err)
            continue
        chunk.append(turn)
        if len(chunk) >= IMPORT_CHUNK:
            await flush()
    await flush()
    elapsed = time.perf_counter() - started
    print(file=err)
    print(
        f"imported {inserted} new rows from {seen} lines in {elapsed:.1f} s "
        f"({seen / max(elapsed, 1e-9):.0f} rows/s); {bad} bad lines skipped",
        file=out,
    )
    return 1 if bad else 0


def turn_json(turn: MemoryTurn, memory: TemporalMemory) -> dict[str, Any]:
    return {
        "id": turn.id,
        "message_id": turn.message_id,
        "role": turn.role,
        "content": turn.content,
        "created_at": turn.created_at.astimezone(memory.tz).isoformat(),
        "user_id": turn.user_id,
        "group_id": turn.group_id,
    }


async def recall_json(memory: TemporalMemory, query: Mapping[str, Any]) -> dict[str, Any]:
    user_id = _optional_int(query, "user_id")
    if user_id is None:
        raise ValueError("user_id is required")
    text = query.get("query")
    if not isinstance(text, str):
        raise ValueError("query must be a string")
    context = query.get("context") or []
    if not isinstance(context, list) or not all(isinstance(line, str) for line in context):
        raise ValueError("context must be a list of strings (the lines said before the query)")
    top_n = _optional_int(query, "top_n")
    window = _optional_int(query, "window_size")
    result = await memory.recall(
        user_id,
        text,
        _optional_int(query, "group_id"),
        top_n=memory.settings.memory_top_n if top_n is None else top_n,
        window_size=memory.settings.memory_window_size if window is None else window,
        now=_parse_time(query.get("now"), "now"),
        context=context,
    )
    return {"query": text, "turns": [turn_json(t, memory) for t in result.turns]}


async def run_recall(memory: TemporalMemory, args: argparse.Namespace, out: TextIO) -> int:
    if args.batch:
        for number, data in _read_jsonl(Path(args.batch)):
            if isinstance(data, Exception):
                raise ValueError(f"{args.batch}:{number}: not JSON: {data}")
            try:
                result = await recall_json(memory, data)
            except ValueError as exc:
                raise ValueError(f"{args.batch}:{number}: {exc}") from exc
            print(json.dumps(result, ensure_ascii=False), file=out)
        return 0
    if args.user_id is None or args.query is None:
        raise ValueError("recall needs --user-id and a QUERY (or --batch FILE)")
    query = {
        "user_id": args.user_id,
        "group_id": args.group_id,
        "query": args.query,
        "top_n": args.top_n,
        "window_size": args.window,
        "now": args.now,
    }
    if args.json:
        print(json.dumps(await recall_json(memory, query), ensure_ascii=False), file=out)
        return 0
    now = _parse_time(args.now, "--now")
    recalled = await memory.recall(
        args.user_id, args.query, args.group_id, top_n=args.top_n, window_size=args.window, now=now
    )
    block = memory.format_block(recalled, now)
    print(block.text or "(没有相关记忆)", file=out)
    return 0


async def run_stats(memory: TemporalMemory, args: argparse.Namespace, out: TextIO) -> int:
    stats = await memory.stats()
    if args.json:
        data = {
            "rows": stats.total_rows,
            "by_chat_type_role": {f"{c}/{r}": n for (c, r), n in stats.store.by_type_role.items()},
            "sessions": stats.store.sessions,
            "bytes": stats.store.total_bytes,
            "oldest": stats.store.oldest.isoformat() if stats.store.oldest else None,
            "newest": stats.store.newest.isoformat() if stats.store.newest else None,
            "pending_embeddings": stats.store.pending_embeddings,
            "spooled_turns": stats.spooled_turns,
            "dead_letters": stats.dead_letters,
            "write_trouble": stats.write_trouble,
            "embedding_model": stats.embedding_model,
            "embedding_dim": stats.embedding_dim,
            "vector_index": {
                "mode": stats.vector_index,
                "indexed_sessions": stats.indexed_sessions,
                "building": stats.indexing_sessions,
            },
            "database": stats.database,
            "evaluation": {
                "evaluator": stats.evaluation.evaluator,
                "succeeded": stats.evaluation.succeeded,
                "failed": stats.evaluation.failed,
                "success_rate": stats.evaluation.success_rate,
                "save_rate": stats.evaluation.save_rate,
                "pending": stats.evaluation.pending,
                "bands": stats.evaluation.band_counts(),
                "purged_total": stats.evaluation.totals.get("purged", 0),
                "purged_last_7_days": {d.isoformat(): n for d, n in stats.evaluation.purged_by_day},
            },
        }
        print(json.dumps(data, ensure_ascii=False), file=out)
    else:
        print(f"数据库：{stats.database}", file=out)
        for line in stats.lines_zh(memory.tz):
            print(line, file=out)
    return 0


async def run_reembed(memory: TemporalMemory, out: TextIO, err: TextIO) -> int:
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"\rre-embedded {done}/{total}", end="", file=err)

    done = await memory.reembed(progress=progress)
    print(file=err)
    print(
        f"re-embedded {done} rows with {memory.embedding_model} ({memory.embedding_dim}-d) "
        f"in {time.perf_counter() - started:.1f} s",
        file=out,
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m memory_core", description=__doc__)
    parser.add_argument(
        "--data-dir", help="data folder of the embedded PostgreSQL (MEMORY_DATA_DIR)"
    )
    parser.add_argument("--env-file", default=".env.prod", help="settings file (default .env.prod)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO")
    sub = parser.add_subparsers(dest="command", required=True)

    imp = sub.add_parser("import", help="bulk import turns from a JSON-lines file")
    imp.add_argument("file", type=Path)

    rec = sub.add_parser("recall", help="show what would be recalled for a query")
    rec.add_argument("query", nargs="?")
    rec.add_argument("--user-id", type=int)
    rec.add_argument("--group-id", type=int)
    rec.add_argument("--top-n", type=int)
    rec.add_argument("--window", type=int)
    rec.add_argument("--now", help="reference time, ISO 8601 with offset")
    rec.add_argument("--json", action="store_true", help="print the turns as JSON")
    rec.add_argument("--batch", help="JSON-lines file of queries; prints one JSON object a line")

    st = sub.add_parser("stats", help="counts, sessions, size, embedding model")
    st.add_argument("--json", action="store_true")

    sub.add_parser(
        "reembed",
        help="re-embed (and re-keyword) every stored turn with the configured model and text form",
    )

    pur = sub.add_parser("purge", help="delete expired turns now (the bot also does it daily)")
    pur.add_argument("--now", help="reference time, ISO 8601 with offset (default: now)")
    return parser


async def _run(args: argparse.Namespace, settings: MemorySettings) -> int:
    memory = await open_memory(
        settings, allow_model_change=args.command == "reembed", maintenance_interval=None
    )
    try:
        if args.command == "import":
            return await run_import(memory, args.file, sys.stdout, sys.stderr)
        if args.command == "recall":
            return await run_recall(memory, args, sys.stdout)
        if args.command == "stats":
            return await run_stats(memory, args, sys.stdout)
        if args.command == "purge":
            purged = await memory.purge_expired(now=_parse_time(args.now, "--now"))
            print(f"purged {purged} expired rows", file=sys.stdout)
            return 0
        return await run_reembed(memory, sys.stdout, sys.stderr)
    finally:
        await memory.aclose()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = load_settings(Path(args.env_file), os.environ, args.data_dir)
        return asyncio.run(_run(args, settings))
    except (MemoryCoreError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
