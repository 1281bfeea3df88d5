"""bench.engine_flips: two runs' per-case hits compared, flips counted, the sign test exact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.engine_flips import cases_needed, compare, read_hits, sign_test


def write_run(path: Path, hits: dict[str, bool]) -> Path:
    lines = [
        json.dumps({"set": "zh", "case": c, "form": "f", "mode": "hybrid", "k": 5, "hit": hit})
        for c, hit in hits.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_sign_test_is_the_exact_binomial() -> None:
    assert sign_test(0, 0) == 1.0
    assert sign_test(3, 3) == 1.0
    assert sign_test(0, 5) == pytest.approx(2 / 32)  # 2 * 0.5**5
    assert sign_test(1, 4) == pytest.approx(2 * 6 / 32)  # 2 * (1 + 5) / 32


def test_cases_needed_grows_with_the_flip_rate() -> None:
    # 8 flips in 160 cases (5 %): 1.96² * 0.05 / 0.01² = 1920.8 -> 1921 cases.
    assert cases_needed(8, 160) == 1921
    assert cases_needed(0, 160) == 0


def test_flips_are_counted_case_by_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reference = write_run(tmp_path / "a.jsonl", {"1": True, "2": False, "3": True, "4": False})
    other = write_run(tmp_path / "b.jsonl", {"1": False, "2": True, "3": True, "4": True})

    compare(read_hits(reference), read_hits(other))

    row = capsys.readouterr().out.splitlines()[1]
    # Same any@5 would hide this: 2 of 4 against 3 of 4, two gained and one lost.
    assert row == "zh | f | hybrid | 5 | 4 | 0.500 | 0.750 | +0.250 | 2 / 1 | 1.00 | 28812"
