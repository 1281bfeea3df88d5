"""What indexing a turn with the line it answers (``MEMORY_INDEX_CONTEXT``) costs the local model:
CPU time a turn embedded with and without that line, in alternating rounds, LoCoMo-dev's turns
(each with the other speaker's line before it in its session, as the memory builds it), one
turn a call as a live turn is embedded, and in batches of 8 as the deferred embeddings are.
CPU is the process's (the model's threads included), per turn (issue 26 part 4).
``--inserts``: what migration 018's triggers cost an insert and a delete with the setting off
(its partial index empty) and what reading a live turn's line costs with it on: single-row
inserts of LoCoMo-dev's turns into a throwaway embedded database, with the triggers and with
them dropped, in alternating rounds; the embedded PostgreSQL's CPU a turn.

    python -m bench.public.context_cost [--turns 300] [--rounds 3] [--inserts]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from bench.common import bench_data_dir, machine_line
from bench.process_stats import load_average, postgres_cpu
from bench.public import locomo
from memory_core import MemorySettings, TurnInput, open_memory
from memory_core.dialogue.recall_store import PgRecallStore
from memory_core.lang.indexed import WITH_CONTEXT, ContextLine, index_texts
from memory_core.providers.embedding.local import LocalE5Embedder


def texts(turns: int) -> tuple[list[str], list[str]]:
    """The first ``turns`` turns of LoCoMo-dev: alone, and after the line each answers (the
    other speaker's previous line of its conversation; LoCoMo's turns are 30 s apart within a
    session, its sessions days apart)."""
    settings = MemorySettings()
    alone: list[str] = []
    with_line: list[str] = []
    for chat in locomo.load(locomo.data_dir(None), settings.tz):
        before: dict[str, locomo.Turn] = {}
        for turn in chat.turns:
            other = next((t for s, t in before.items() if s != turn.speaker), None)
            line = None
            if other is not None and turn.at - other.at <= locomo.TURN_STEP * 120:
                line = ContextLine(other.text, other.speaker)
            alone.append(turn.text)
            with_line.append(index_texts(turn.text, turn.speaker, WITH_CONTEXT, line).vector)
            before[turn.speaker] = turn
    return alone[:turns], with_line[:turns]


async def cpu_per_turn(embedder: LocalE5Embedder, batch: Sequence[str], size: int) -> float:
    started = time.process_time()
    for start in range(0, len(batch), size):
        await embedder.embed_passages(batch[start : start + size])
    return (time.process_time() - started) / len(batch) * 1000


async def run(args: argparse.Namespace) -> None:
    print(f"== context embedding cost ({machine_line()}), load {load_average()}")
    alone, with_line = texts(args.turns)
    chars = (statistics.mean(map(len, alone)), statistics.mean(map(len, with_line)))
    print(f"{len(alone)} turns, mean {chars[0]:.0f} characters alone, {chars[1]:.0f} with the line")
    embedder = await LocalE5Embedder.load()
    try:
        await embedder.embed_passages(alone[:8])  # warm
        for size in (1, 8):
            found: dict[str, list[float]] = {"alone": [], "with the line": []}
            for _ in range(args.rounds):
                found["alone"].append(await cpu_per_turn(embedder, alone, size))
                found["with the line"].append(await cpu_per_turn(embedder, with_line, size))
            a, w = (statistics.median(v) for v in found.values())
            print(
                f"batch {size}: CPU ms a turn, median of {args.rounds} rounds: alone {a:.1f}, "
                f"with the line {w:.1f} ({w / a:.2f}x); rounds {found}"
            )
    finally:
        await embedder.aclose()
    print(f"load at the end {load_average()} (pid {os.getpid()})")


DROP_TRIGGERS = """
DROP TRIGGER IF EXISTS dialogues_lines_inserted ON dialogues;
DROP TRIGGER IF EXISTS dialogues_lines_deleted ON dialogues;
DROP TRIGGER IF EXISTS dialogues_line_edited ON dialogues
"""
# Migration 018's triggers again (the same statements).
CREATE_TRIGGERS = (
    DROP_TRIGGERS
    + """;
CREATE TRIGGER dialogues_lines_inserted AFTER INSERT ON dialogues
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION dialogues_lines_changed();
CREATE TRIGGER dialogues_lines_deleted AFTER DELETE ON dialogues
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION dialogues_lines_changed();
CREATE TRIGGER dialogues_line_edited BEFORE UPDATE OF content ON dialogues
    FOR EACH ROW EXECUTE FUNCTION dialogues_line_edited()
"""
)


async def inserts(args: argparse.Namespace) -> None:
    """Single-row inserts (and their deletes) with migration 018's triggers and without."""
    print(f"== inserts with and without the triggers ({machine_line()}), load {load_average()}")
    alone, _ = texts(args.turns)
    with bench_data_dir("context-cost") as data_dir:
        memory = await open_memory(
            MemorySettings(memory_data_dir=data_dir), maintenance_interval=None
        )
        try:
            writer, store = memory.parts.writer, memory.parts.database.store(PgRecallStore)
            pool = memory.parts.database.pool
            start = datetime(2026, 1, 1, tzinfo=timezone.utc)

            async def one_round(user: int, read_line: bool) -> tuple[float, float]:
                rows = [
                    writer.prepare(
                        TurnInput(
                            user_id=user,
                            role="user" if i % 2 else "assistant",
                            content=text,
                            created_at=start + timedelta(seconds=30 * i),
                        ),
                        start + timedelta(days=1),
                    )[1]
                    for i, text in enumerate(alone)
                ]
                cpu, wall = postgres_cpu(data_dir), time.perf_counter()
                ids = []
                for row in rows:
                    if read_line:
                        await store.context_before(row)
                    stored = await store.insert_turn(row)
                    assert stored is not None
                    ids.append(stored.id)
                async with pool.acquire() as conn:
                    for row_id in ids:
                        await conn.execute("DELETE FROM dialogues WHERE id = $1", row_id)
                n = len(rows)
                return (time.perf_counter() - wall) / n * 1000, (
                    postgres_cpu(data_dir) - cpu
                ) / n * 1000

            found: dict[str, list[tuple[float, float]]] = {
                "triggers (setting off)": [],
                "triggers and the line read (live turn, setting on)": [],
                "no triggers (before migration 018)": [],
            }
            user = 1
            for _ in range(args.rounds):
                for name in found:
                    user += 1
                    async with pool.acquire() as conn:
                        await conn.execute(
                            DROP_TRIGGERS if "no triggers" in name else CREATE_TRIGGERS
                        )
                    found[name].append(await one_round(user, "line" in name))
            for name, rounds in found.items():
                wall = statistics.median(r[0] for r in rounds)
                cpu = statistics.median(r[1] for r in rounds)
                print(
                    f"{name}: an insert and its delete {wall:.2f} ms wall, "
                    f"PostgreSQL CPU {cpu:.2f} ms a turn (median of {len(rounds)} rounds)"
                )
        finally:
            await memory.aclose()
    print(f"load at the end {load_average()}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inserts", action="store_true", help="time inserts, not embeddings")
    args = parser.parse_args(argv)
    asyncio.run(inserts(args) if args.inserts else run(args))


if __name__ == "__main__":
    main()
