"""The fault suite's own arithmetic: what counts as judged twice, which import lines are the
bad ones, how a disk is filled. The scenarios themselves run the real bot (``bench.faults``)."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import httpx

from bench.faults.attacks import _jsonl_with_bad_records, _qq_exports
from bench.faults.clocks import answered_twice
from bench.faults.harness import Judge
from memory_core.time_bounds import EARLIEST
from memory_core.transfer.encoding import decode_export
from memory_core.transfer.qq_text import parse_qq_text


def _ask(judge: Judge, prompt: str) -> httpx.Response:
    body = {"model": "x", "messages": [{"role": "user", "content": prompt}]}
    return httpx.post(f"{judge.server.base_url}/chat/completions", json=body, timeout=60)


def test_a_held_judge_answers_nothing_until_released_and_counts_only_given_answers():
    held, free = Judge(), Judge()
    try:
        held.hold_answers()
        prompt = "记忆价值 【回合 1】 ⟦f1⟧ 你好"
        waiting = threading.Thread(target=_ask, args=(held, prompt))
        waiting.start()
        assert _ask(free, prompt).status_code == 200
        assert answered_twice(held, free) == {}  # asked twice, answered once
        assert free.answered[("evaluation", "⟦f1⟧")] == 1
        assert _ask(free, prompt).status_code == 200
        assert answered_twice(held, free) == {"evaluation": 1}
        held.release()
        waiting.join(timeout=60)
        assert held.seen[("evaluation", "⟦f1⟧")] == 1
        assert held.answered[("evaluation", "⟦f1⟧")] == 0
    finally:
        held.release()
        held.server.close()
        free.server.close()


def _plainly_good(line: str) -> bool:
    """An oracle apart from the importer: a dict with a user below 2^63, some content and, if
    dated, a zoned time between 1990 and now."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return False
    if not isinstance(record, dict) or not record.get("content"):
        return False
    if not 0 < record["user_id"] < 2**63:
        return False
    if "created_at" not in record:
        return True
    try:
        moment = datetime.fromisoformat(record["created_at"])
    except ValueError:
        return False
    return moment.tzinfo is not None and EARLIEST <= moment <= datetime.now(timezone.utc)


def test_the_bad_import_lines_are_the_ones_said_bad(tmp_path: Path):
    path, good, bad = _jsonl_with_bad_records(tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [n for n, line in enumerate(lines, start=1) if not _plainly_good(line)] == bad
    assert len(lines) - len(bad) == good
    for _, export, extra, text in _qq_exports(tmp_path):
        encoding = extra[extra.index("--encoding") + 1] if "--encoding" in extra else None
        parsed = parse_qq_text(decode_export(export.read_bytes(), encoding).text)
        assert text in [message.text for message in parsed.messages]
        assert [message.time.year for message in parsed.messages] == [2025, 1, 9999, 2025]
