"""What the session-row triggers (migration 011) cost online inserts: the storage bench's
single inserts, with the triggers on and off in turn on one database, ``--rounds`` times."""

from __future__ import annotations

import argparse
import asyncio

from bench.common import RandomQueryEmbedder, bench_data_dir, machine_line
from bench.storage_bench import online_inserts
from memory_core import open_memory
from memory_core.settings import MemorySettings

TRIGGERS = ("dialogue_sessions_on_insert", "dialogue_sessions_on_delete")
DIM = 384


async def run(rounds: int) -> None:
    print(f"session-row triggers and online inserts ({machine_line()})")
    with bench_data_dir("session_rows") as data_dir:
        settings = MemorySettings(
            memory_data_dir=data_dir,
            embedding_dim=DIM,
            embedding_provider="api",
            memory_vector_index="never",
        )
        memory = await open_memory(
            settings, embedder=RandomQueryEmbedder(DIM), maintenance_interval=None
        )
        message_id = 10_000_000
        try:
            for round_number in range(rounds):
                for state in ("ENABLE", "DISABLE"):
                    async with memory.parts.database.pool.acquire() as conn:  # bench-only switch
                        for trigger in TRIGGERS:
                            await conn.execute(f"ALTER TABLE dialogues {state} TRIGGER {trigger}")
                    sequential = await online_inserts(memory, 1000, 1, message_id, (3, None))
                    concurrent = await online_inserts(memory, 2000, 8, message_id + 1000, (4, None))
                    message_id += 3000
                    print(
                        f"  round {round_number + 1}, triggers {state.lower()}d: "
                        f"{sequential:.0f} rows/s sequential, "
                        f"{concurrent:.0f} rows/s with 8 concurrent into one session",
                        flush=True,
                    )
        finally:
            await memory.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    asyncio.run(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
