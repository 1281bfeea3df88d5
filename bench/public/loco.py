"""Leave-one-conversation-out inside one set: a choice that only one public set can show (the
speakers a LoCoMo question names) picked on all its conversations but one and read on the one
left out (issue 26 part 2).

The outcomes are ``python -m bench.public --outcomes FILE`` rows; a case's conversation is the
part of its label before ``/`` (LoCoMo-dev: ``conv-26/q0``). For each conversation, the
configuration with the best mean hybrid any@1/@5/@10 over the others (conversations alike,
ties to ``shipped``, then to the first label) is picked and its figures there are printed
beside every configuration's.

    python -m bench.public.loco /tmp/o.jsonl [more.jsonl] [--set "LoCoMo-dev (5 conversations)"]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.public.loso import AT_K, FUSED, SHIPPED
from bench.public.outcomes import read_outcomes

DEFAULT_SET = "LoCoMo-dev (5 conversations)"

# config -> conversation -> k -> hybrid any@k
Scores = dict[str, dict[str, dict[int, float]]]


def scores(rows: Sequence[Mapping[str, Any]], set_name: str) -> Scores:
    """Hybrid any@k per configuration and conversation, over ``set_name``'s rows."""
    hits: dict[tuple[str, str, int], list[bool]] = defaultdict(list)
    for row in rows:
        if row["set"] == set_name and row["mode"] == FUSED and row["k"] in AT_K:
            conversation = row["case"].split("/", 1)[0]
            hits[(row["config"], conversation, row["k"])].append(bool(row["hit"]))
    found: Scores = defaultdict(lambda: defaultdict(dict))
    for (config, conversation, k), values in hits.items():
        found[config][conversation][k] = sum(values) / len(values)
    return found


def mean(by_k: Mapping[int, float]) -> float:
    return sum(by_k[k] for k in AT_K) / len(AT_K)


def pick(found: Scores, conversations: Sequence[str]) -> str:
    """The configuration with the best mean over ``conversations`` (ties: shipped, then order)."""
    configs = sorted(found, key=lambda c: (c != SHIPPED, c))
    return max(configs, key=lambda c: sum(mean(found[c][v]) for v in conversations))


def figure(by_k: Mapping[int, float]) -> str:
    return " / ".join(f"{by_k[k]:.3f}" for k in AT_K)


def report(found: Scores) -> list[str]:
    """The markdown lines: every fold, then every configuration's figures."""
    conversations = sorted({v for c in found.values() for v in c})
    configs = sorted(found, key=lambda c: (c != SHIPPED, c))
    lines = [
        "| left out | picked on the others | its hybrid any@1/@5/@10 | shipped |",
        "|---|---|---|---|",
    ]
    picks = []
    for left in conversations:
        chosen = pick(found, [v for v in conversations if v != left])
        picks.append(chosen)
        shipped = figure(found[SHIPPED][left]) if SHIPPED in found else "–"
        lines.append(f"| {left} | {chosen} | {figure(found[chosen][left])} | {shipped} |")
    lines += ["", f"picked: {', '.join(sorted(set(picks)))}", ""]
    lines += ["| configuration | " + " | ".join(conversations) + " |"]
    lines += ["|---|" + "---|" * len(conversations)]
    for config in configs:
        cells = [figure(found[config][v]) for v in conversations]
        lines.append(f"| {config} | " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--set", default=DEFAULT_SET, help=f"the set (default: {DEFAULT_SET})")
    args = parser.parse_args(argv)
    found = scores(read_outcomes(args.files), args.set)
    if not found:
        parser.error(f"no hybrid outcomes of {args.set!r} in the files")
    print("\n".join(report(found)))


if __name__ == "__main__":
    main()
