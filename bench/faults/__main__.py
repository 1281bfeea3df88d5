"""Run the fault scenarios and print one table row per scenario (see ``bench.faults``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from bench.common import machine_line
from bench.faults.catalogue import SCENARIOS
from bench.faults.harness import HEADER, Tally
from bench.process_stats import load_average


async def run(names: list[str]) -> list[Tally]:
    tallies = []
    for name in names:
        started = time.monotonic()
        tally = await SCENARIOS[name]()
        tally.notes.append(f"{time.monotonic() - started:.0f} s")
        print(tally.row(), flush=True)
        tallies.append(tally)
    return tallies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}"
    )
    args = parser.parse_args()
    names = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    print(f"machine: {machine_line()}; load average at the start: {load_average()}")
    print(HEADER, flush=True)
    started = time.monotonic()
    tallies = asyncio.run(run(names))
    print(f"\nwhole suite: {time.monotonic() - started:.0f} s; load average: {load_average()}")
    missed = [(t.name, miss) for t in tallies for miss in t.failed]
    for name, miss in missed:
        print(f"TARGET MISSED in {name}: {miss}")
    if not missed:
        print("every target met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
