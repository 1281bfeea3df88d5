"""Where a lone user's query embedding goes, stage by stage, and what a run's threads buy.

For the shipped two-line query of public-set chat messages (``bench.embedding_engines``'s
messages), CPU time (every thread of the process) and wall time, medians over the messages:

* ``fit``: the embedder's scrub and cut to one window (``LocalE5Embedder._fit``),
  the tokenizer's cache cleared first, so this is the message's tokenization;
* ``window``: the engine's ids of the cut text (``E5Tokenizer.window``, from that cache);
* ``model``: one ONNX Runtime run of the query, on a session of one thread and on one of
  ``--threads`` intra-op threads (the embedder's one session, ``EMBEDDING_LOCAL_THREADS``);
* ``embedder``: ``LocalE5Embedder.embed_query`` whole (thread hop, batcher, slot, checks), with
  one thread and with ``--threads``;
* the wider session's CPU split between the calling thread and its other thread: the larger
  share is what the run's wall time would be on free cores, a figure the load cannot inflate;
* the deferred-embedding batch: ``--batch`` passages (user lines and replies) in one call, as
  the backfill sends them, for the batch size and deadlines of issue 25 part 5.

    python -m bench.lone_query [--messages 60] [--threads 2] [--batch 32]

CPU time is the figure to compare on a shared machine; wall time is printed with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine_line
from bench.embedding_engines import DATA, load_average, public_messages
from memory_core.providers.embedding.local import E5_MAX_TOKENS, LocalE5Embedder, bundled_weights
from memory_core.providers.embedding.onnx_engine import OnnxE5, worker_count


def timed(work: Callable[[], object]) -> tuple[float, float]:
    """(CPU ms, wall ms) of one call of ``work``."""
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000


def split(work: Callable[[], object]) -> tuple[float, float]:
    """(CPU ms of the calling thread, CPU ms of the process's other threads) of one call: the
    larger is the run's critical path, what its wall time would be on free cores."""
    mine, every = time.thread_time(), time.process_time()
    work()
    mine, every = time.thread_time() - mine, time.process_time() - every
    return mine * 1000, (every - mine) * 1000


def medians(samples: list[tuple[float, float]]) -> str:
    cpu = statistics.median(s[0] for s in samples)
    wall = statistics.median(s[1] for s in samples)
    return f"CPU {cpu:6.2f} ms | wall {wall:6.2f} ms"


async def embedder_samples(
    cache: Path, threads: int, queries: list[str], repeat: int
) -> list[tuple[float, float]]:
    embedder = await LocalE5Embedder.load(cache_dir=cache, threads=threads)
    samples = []
    try:
        await embedder.embed_query("warm-up")
        for _ in range(repeat):
            for query in queries:
                cpu, wall = time.process_time(), time.perf_counter()
                await embedder.embed_query(query)
                samples.append(
                    ((time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000)
                )
    finally:
        await embedder.aclose()
    return samples


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    print(f"== lone query ({machine_line()}), load {load_average()}")
    messages = public_messages(args.data, args.messages)
    queries = [q for q, _, _ in messages]
    passages = [text for _, user, reply in messages for text in (user, reply)]
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        engine, wide = (
            OnnxE5.load(
                bundled_weights(),
                cache_dir=cache,
                precision="int8",
                max_tokens=E5_MAX_TOKENS,
                workers=worker_count(),
                threads=threads,
            )[0]
            for threads in (1, args.threads)
        )
        fitter = LocalE5Embedder(engine=engine)
        tokens = [engine.token_count(fitter._fit(engine, q, True), True) for q in queries]
        print(
            f"{len(queries)} queries, tokens median {statistics.median(tokens):.0f}, "
            f"mean {statistics.mean(tokens):.1f}; {worker_count()} worker(s)"
        )
        stages: dict[str, list[tuple[float, float]]] = {}

        def sample(name: str, work: Callable[[], object]) -> None:
            stages.setdefault(name, []).append(timed(work))

        engine.query(["warm-up"])
        wide.query(["warm-up"])
        for _ in range(args.repeat):
            for query in queries:
                # Cold: the tokenizer's cache would otherwise answer the repeats.
                engine.tokenizer.content_ids.cache_clear()
                sample("fit (scrub, tokenize, cut)", partial(fitter._fit, engine, query, True))
                cut = fitter._fit(engine, query, True)
                sample("window (cached ids)", partial(engine.tokenizer.window, cut, True))
                sample("model, 1 thread", partial(engine.query, [cut]))
                sample(f"model, {args.threads} threads", partial(wide.query, [cut]))
        shares = [split(partial(wide.query, [fitter._fit(engine, q, True)])) for q in queries]
        print(
            f"  {args.threads} threads, CPU of the calling thread / of the others: "
            f"{statistics.median(t[0] for t in shares):.2f} / "
            f"{statistics.median(t[1] for t in shares):.2f} ms (critical path: the larger)"
        )
        # The wider session is the same model; how far its vectors are from the one-thread's.
        cuts = [fitter._fit(engine, q, True) for q in queries]
        narrow = np.concatenate([engine.query([c]) for c in cuts])
        widened = np.concatenate([wide.query([c]) for c in cuts])
        largest = np.abs(narrow - widened).max()
        lowest = (narrow * widened).sum(axis=1).min()
        print(
            f"  {args.threads}-thread vs one-thread vectors: largest component difference "
            f"{largest:.1e}, "
            f"lowest cosine {lowest:.7f}"
        )
        for name, samples in stages.items():
            print(f"  {name:34} {medians(samples)}")
        for threads in (1, args.threads):
            samples = asyncio.run(embedder_samples(cache, threads, queries, args.repeat))
            print(f"  {f'embed_query, threads={threads}':34} {medians(samples)}")

        batch = passages[: args.batch]
        batch_tokens = sum(engine.token_count(t) for t in batch)
        runs: list[Any] = [timed(lambda: engine.passage(batch)) for _ in range(args.repeat)]
        print(f"  {f'passage batch of {len(batch)} ({batch_tokens} tokens)':34} {medians(runs)}")
        engine.close()
        wide.close()
    print(f"load {load_average()}")


if __name__ == "__main__":
    main()
