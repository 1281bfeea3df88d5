"""``python -m memory_core``: import, export, recall, stats, reembed, purge, mcp — with the
bot's settings.

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
from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any, TextIO

from dotenv import dotenv_values

from .accounts import serving
from .console.dashboard import connection_of, dashboard_zh
from .errors import MemoryCoreError
from .models import MemoryTurn, RecallResult, TurnInput
from .parts import MemoryParts
from .recall.options import RecallOptions
from .service import TemporalMemory
from .settings import MemorySettings, settings_from_mapping
from .time_bounds import check_time
from .transfer.importer import (
    FORMATS,
    ImportReport,
    import_chatrecorder,
    import_json_file,
    import_qq_text,
    read_json_lines,
)
from .transfer.portable import export_lines
from .transfer.target import ImportTarget
from .unknown_settings import unknown_settings
from .wiring import open_memory

DEFER_INDEX_LINES = 20_000

log = logging.getLogger(__name__)


def load_settings(
    env_file: Path, environ: Mapping[str, str], data_dir: str | None
) -> MemorySettings:
    values: dict[str, Any] = {}
    if env_file.is_file():
        values.update({k: v for k, v in dotenv_values(env_file).items() if v is not None})
    values.update(environ)
    if data_dir:
        values["MEMORY_DATA_DIR"] = data_dir
    if (ignored := unknown_settings(values)) is not None:
        log.warning(ignored)
    return settings_from_mapping(values)


def _parse_time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    return check_time(datetime.fromisoformat(value), field)


def _shown(moment: datetime | None, tz: tzinfo) -> str | None:
    """A time as the CLI prints it: ISO 8601 in ``MEMORY_TIMEZONE``, with its offset."""
    return moment.astimezone(tz).isoformat() if moment is not None else None


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer or null")
    return value


def import_format(args: argparse.Namespace, err: TextIO) -> str:
    if args.format:
        return str(args.format)
    name = args.file.lower()
    if name.endswith(".txt"):
        guessed = "qq-txt"
    elif name.startswith(("postgresql://", "postgres://")) or name.endswith((".db", ".sqlite3")):
        guessed = "chatrecorder"
    else:
        guessed = "jsonl"
    print(f"format: {guessed} (from the file name; set it with --format)", file=err)
    return guessed


def import_target(args: argparse.Namespace, fmt: str) -> ImportTarget | None:
    """The session a QQ text export goes to; JSON lines name their own sessions."""
    if fmt != "qq-txt":
        if args.user_id is not None or args.group_id is not None:
            raise ValueError(f"{fmt} names its own sessions: no --user-id / --group-id")
        return None
    if (args.user_id is None) == (args.group_id is None):
        raise ValueError(
            "a QQ text export needs its target: --user-id QQ (a private chat) "
            "or --group-id GROUP (a group)"
        )
    return ImportTarget(
        user_id=args.user_id,
        group_id=args.group_id,
        self_id=args.self_id,
        bot_names=frozenset(args.bot_name),
        user_names=frozenset(args.user_name),
    )


def _shown_turn(turn: TurnInput, tz: tzinfo) -> str:
    when = turn.created_at.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S") if turn.created_at else "-"
    who = f"{turn.role}({turn.sender_name})" if turn.sender_name else turn.role
    text = " ⏎ ".join(turn.content.splitlines())
    return f"would store [{when}] session {turn.session_key} {who}: {text}"


def _count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


async def run_import(parts: MemoryParts, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    source: str = args.file
    path = Path(source)
    fmt = import_format(args, err)
    target = import_target(args, fmt)
    started = time.perf_counter()

    def progress(report: ImportReport) -> None:
        rate = report.read / max(time.perf_counter() - started, 1e-9)
        print(
            f"\r{report.read} turns read, {report.new} new, {report.already} already stored, "
            f"{rate:.{0 if rate >= 10 else 1}f} turns/s",
            end="",
            file=err,
        )

    def show(turn: TurnInput) -> None:
        print(_shown_turn(turn, parts.tz), file=out)

    async def run() -> ImportReport:
        options: dict[str, Any] = {"dry_run": args.dry_run, "progress": progress, "show": show}
        if target is not None:
            return await import_qq_text(
                parts, path, target, chat=args.chat, encoding=args.encoding, **options
            )
        if fmt == "chatrecorder":
            return await import_chatrecorder(parts, source, **options)
        return await import_json_file(parts, path, **options)

    lines = 0 if args.dry_run or fmt == "chatrecorder" else _count_lines(path)
    if args.dry_run:
        report = await run()
    elif lines >= DEFER_INDEX_LINES:
        print(f"{lines} lines: vector indexes are rebuilt once at the end", file=err)
        async with parts.upkeep.vector_index_deferred():
            report = await run()
    else:
        report = await run()
        await parts.upkeep.index_large_sessions()  # sessions this import took past the limit
    print(file=err)
    if fmt != "chatrecorder":
        where = f"{path}:"
    elif source.startswith(("postgresql://", "postgres://")):
        where = "record "  # a DSN may hold a password
    else:
        where = f"{path}:record "
    for warning in report.warnings:
        print(f"{path}: warning: {warning}", file=err)
    for problem in report.problems:
        print(f"{where}{problem.line}: skipped: {problem.reason}", file=err)
    elapsed = time.perf_counter() - started
    print(f"{report.summary(dry_run=args.dry_run)} ({elapsed:.1f} s)", file=out)
    return 1 if report.problems else 0


async def run_export(parts: MemoryParts, args: argparse.Namespace, err: TextIO) -> int:
    sessions = args.session or None
    counts: Counter[str] = Counter()
    target = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        async for line in export_lines(parts, sessions):
            counts[line["type"]] += 1
            target.write(json.dumps(line, ensure_ascii=False) + "\n")
    finally:
        if args.output:
            target.close()
    where = args.output or "standard output"
    print(
        f"exported {counts['turn']} turns and {counts['memory']} distilled memories "
        f"({'all sessions' if sessions is None else ', '.join(sessions)}) to {where}",
        file=err,
    )
    return 0


def turn_json(turn: MemoryTurn, parts: MemoryParts) -> dict[str, Any]:
    return {
        "id": turn.id,
        "message_id": turn.message_id,
        "role": turn.role,
        "content": turn.content,
        "created_at": turn.created_at.astimezone(parts.tz).isoformat(),
        "user_id": turn.user_id,
        "group_id": turn.group_id,
    }


async def _recall(
    parts: MemoryParts, query: Mapping[str, Any], now_field: str = "now"
) -> tuple[RecallResult, datetime | None]:
    """Recall one query given as ``recall --batch`` reads it; the result and its ``now``."""
    user_id = _optional_int(query, "user_id")
    if user_id is None:
        raise ValueError("user_id is required")
    text = query.get("query")
    if not isinstance(text, str):
        raise ValueError("query must be a string")
    context = query.get("context") or []
    if not isinstance(context, list) or not all(isinstance(line, str) for line in context):
        raise ValueError("context must be a list of strings (the lines said before the query)")
    options = RecallOptions(
        top_n=_optional_int(query, "top_n"),
        window_size=_optional_int(query, "window_size"),
        now=_parse_time(query.get("now"), now_field),
        context=tuple(context),
    )
    result = await parts.retriever.recall(user_id, text, _optional_int(query, "group_id"), options)
    return result, options.now


async def recall_json(parts: MemoryParts, query: Mapping[str, Any]) -> dict[str, Any]:
    result, _ = await _recall(parts, query)
    return {"query": query["query"], "turns": [turn_json(t, parts) for t in result.turns]}


async def run_recall(parts: MemoryParts, args: argparse.Namespace, out: TextIO) -> int:
    if args.batch:
        for number, data in read_json_lines(Path(args.batch)):
            if isinstance(data, Exception):
                raise ValueError(f"{args.batch}:{number}: {data}")
            try:
                result = await recall_json(parts, data)
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
        "context": args.earlier,
    }
    if args.json:
        print(json.dumps(await recall_json(parts, query), ensure_ascii=False), file=out)
        return 0
    recalled, now = await _recall(parts, query, now_field="--now")
    block = parts.context_builder.format_block(recalled, now)
    print(block.text or "(没有相关记忆)", file=out)
    return 0


async def run_stats(memory: TemporalMemory, args: argparse.Namespace, out: TextIO) -> int:
    now = datetime.now(timezone.utc)
    stats = await memory.stats(now)
    if args.json:
        data = {
            "rows": stats.total_rows,
            "by_chat_type_role": {f"{c}/{r}": n for (c, r), n in stats.store.by_type_role.items()},
            "sessions": stats.store.sessions,
            "bytes": stats.store.total_bytes,
            "oldest": _shown(stats.store.oldest, memory.parts.tz),
            "newest": _shown(stats.store.newest, memory.parts.tz),
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
        # The same dashboard as /memstat, less the uptime of a running bot.
        distilled = await memory.distilled_stats(now)
        settings = memory.parts.settings
        connection = connection_of(
            memory.parts, chat_model=settings.llm_model if settings.llm_configured else None
        )
        print(dashboard_zh(stats, distilled, connection, now=now, tz=memory.parts.tz), file=out)
    return 0


async def run_reembed(memory: TemporalMemory, out: TextIO, err: TextIO) -> int:
    started = time.perf_counter()

    def progress(done: int, total: int) -> None:
        print(f"\rre-embedded {done}/{total}", end="", file=err)

    done = await memory.reembed(progress=progress)
    embedder = memory.parts.embedder
    print(file=err)
    print(
        f"re-embedded {done} rows with {embedder.model} ({embedder.dim}-d) "
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
    parser.add_argument(
        "--account",
        type=int,
        metavar="SELF_ID",
        help="the QQ bot account whose memory import, export of a person, recall, stats and "
        "purge use (default: the first account's; memory_core.accounts)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    imp = sub.add_parser(
        "import",
        help="import chat history: the memory's JSON lines or a QQ PC text export",
        description="Import chat history. Formats: jsonl (this memory's export, or one turn a "
        "line), qq-txt (QQ PC 消息管理器 → 导出为 .txt; needs --user-id or --group-id), "
        "chatrecorder (nonebot-plugin-chatrecorder's database). Importing the same file again "
        "adds nothing.",
    )
    imp.add_argument(
        "file", help="the file; for chatrecorder its SQLite file or a postgresql:// DSN"
    )
    imp.add_argument(
        "--format",
        choices=FORMATS,
        help="default: qq-txt for .txt, chatrecorder for .db/.sqlite3/postgresql://, else jsonl",
    )
    imp.add_argument("--user-id", type=int, help="qq-txt: the private chat with this QQ user")
    imp.add_argument("--group-id", type=int, help="qq-txt: this QQ group")
    imp.add_argument("--self-id", type=int, help="qq-txt: the bot's QQ number (its lines)")
    imp.add_argument(
        "--bot-name", action="append", default=[], help="qq-txt: a name the bot has in the export"
    )
    imp.add_argument(
        "--user-name",
        action="append",
        default=[],
        help="qq-txt, private chat: the user's name in the export (default: 消息对象)",
    )
    imp.add_argument("--chat", help="qq-txt: which 消息对象 of an export holding several")
    imp.add_argument(
        "--encoding",
        help="qq-txt: the file's encoding, e.g. shift_jis (default: detected among UTF-8, "
        "UTF-16 and GB18030)",
    )
    imp.add_argument(
        "--dry-run", action="store_true", help="print what would be stored; store nothing"
    )

    exp = sub.add_parser(
        "export", help="export turns and distilled memories as JSON lines (for import)"
    )
    exp.add_argument(
        "--session",
        action="append",
        help="session key: QQ (private) or GROUP:QQ; repeat for more; default: every session",
    )
    exp.add_argument("--format", choices=("jsonl",), default="jsonl")
    exp.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")

    rec = sub.add_parser("recall", help="show what would be recalled for a query")
    rec.add_argument("query", nargs="?")
    rec.add_argument("--user-id", type=int)
    rec.add_argument("--group-id", type=int)
    rec.add_argument(
        "--top-n",
        type=int,
        help="anchors, each ±--window turns; without both: the turns the bot's prompt recalls "
        "(the text of MEMORY_TOP_N anchors ±MEMORY_WINDOW_SIZE, spent on the best-matching "
        "turns first)",
    )
    rec.add_argument("--window", type=int, help="turns around each anchor (with --top-n)")
    rec.add_argument("--now", help="reference time, ISO 8601 with offset")
    rec.add_argument("--json", action="store_true", help="print the turns as JSON")
    rec.add_argument(
        "--earlier",
        action="append",
        default=[],
        metavar="LINE",
        help="a line said before the query (repeat, oldest first): recall reads the query "
        "with the last MEMORY_QUERY_CONTEXT_TURNS of them, as the bot does",
    )
    rec.add_argument("--batch", help="JSON-lines file of queries; prints one JSON object a line")

    st = sub.add_parser("stats", help="counts, sessions, size, embedding model")
    st.add_argument("--json", action="store_true")

    sub.add_parser(
        "reembed",
        help="re-embed (and re-keyword) every stored turn with the configured model and text form",
    )

    sub.add_parser(
        "mcp",
        help="serve the memory to a local agent over MCP (stdio): find_people, recall, ...",
        description="Serve the memory over MCP on standard input and output, for an agent "
        "that starts this command (Claude Desktop, AstrBot, any MCP client). Tools: find_people, "
        "recall, remember, forget; no remember or forget with MEMORY_MCP_READONLY=true. Logs go "
        "to standard error.",
    )

    pur = sub.add_parser("purge", help="delete expired turns now (the bot also does it daily)")
    pur.add_argument("--now", help="reference time, ISO 8601 with offset (default: now)")
    return parser


async def _run(args: argparse.Namespace, settings: MemorySettings) -> int:
    if args.command == "mcp":
        # Imported here: the SDK takes a second to import, which no other command should pay.
        from .agents.mcp_server import serve_stdio

        # Opens the memory itself, inside the stdio transport (see agents.mcp_server).
        await serve_stdio(settings)
        return 0
    memory = await open_memory(
        settings, allow_model_change=args.command == "reembed", maintenance_interval=None
    )
    try:
        namespace = (
            "" if args.account is None else await memory.parts.writer.adopt_account(args.account)
        )
        with serving(namespace):
            return await _run_command(memory, args)
    finally:
        await memory.aclose()


async def _run_command(memory: TemporalMemory, args: argparse.Namespace) -> int:
    if args.command == "import":
        return await run_import(memory.parts, args, sys.stdout, sys.stderr)
    if args.command == "export":
        return await run_export(memory.parts, args, sys.stderr)
    if args.command == "recall":
        return await run_recall(memory.parts, args, sys.stdout)
    if args.command == "stats":
        return await run_stats(memory, args, sys.stdout)
    if args.command == "purge":
        purged = await memory.purge_expired(now=_parse_time(args.now, "--now"))
        print(f"purged {purged} expired rows", file=sys.stdout)
        return 0
    return await run_reembed(memory, sys.stdout, sys.stderr)


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
