"""What indexing a turn with the line it answers (``MEMORY_INDEX_CONTEXT``) costs the local model:
CPU time a turn embedded with and without that line, in alternating rounds, LoCoMo-dev's turns
(each with the other speaker's line before it in its session, as the memory builds it), one
turn a call as a live turn is embedded, and in batches of 8 as the deferred embeddings are.
CPU is the process's (the model's threads included), per turn (issue 26 part 4).

    python -m bench.public.context_cost [--turns 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence

from bench.common import machine_line
from bench.process_stats import load_average
from bench.public import locomo
from memory_core import MemorySettings
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
