"""The topic change set and leave-one-set-out (``bench.public.madial``, ``bench.public.loso``)."""

from __future__ import annotations

from datetime import timezone
from typing import Any

import pytest

from bench.public import loso, madial
from bench.public.run import madial_root

ROOT = madial_root(None)


@pytest.mark.skipif(not (ROOT / "data").is_dir(), reason=f"MADial-Bench not found at {ROOT}")
def test_each_topic_change_case_asks_its_own_line_after_two_lines_of_another_dialogue() -> None:
    data = madial.load(ROOT, "zh")
    task = madial.topic_change_task(data, timezone.utc)
    assert len(task.cases) == len(data.dialogues) == 160
    half = len(data.dialogues) // 2
    for number, (case, dialogue) in enumerate(zip(task.cases, data.dialogues, strict=True)):
        donor = data.dialogues[(number + half) % len(data.dialogues)]
        assert case.queries["topic change"] == dialogue.last_user_line()
        assert list(case.earlier["topic change"]) == donor.before_last_user_line()[-2:]
        assert case.relevant == dialogue.relevant and donor.id != dialogue.id
    # Deterministic: built again, the same cases.
    assert madial.topic_change_task(data, timezone.utc).cases == task.cases


def rows(config: str, set_name: str, hybrid: float, single: float) -> list[dict[str, Any]]:
    """Ten cases of a set: the share ``hybrid`` of them hits in hybrid mode at every k,
    ``single`` in vector mode."""
    out = []
    for case in range(10):
        for mode, share in (("hybrid", hybrid), ("vector", single)):
            for k in loso.AT_K:
                out.append(
                    {
                        "config": config,
                        "set": set_name,
                        "case": f"{set_name}#{case}",
                        "form": "question",
                        "mode": mode,
                        "k": k,
                        "hit": case < share * 10,
                    }
                )
    return out


def test_the_pick_is_made_on_the_other_sets_and_read_on_the_one_left_out() -> None:
    # B wins on sets a and b, loses on c: picked when c is left out, and read there.
    table = loso.figures(
        rows("shipped", "a", 0.5, 0.4)
        + rows("shipped", "b", 0.5, 0.4)
        + rows("shipped", "c", 0.5, 0.4)
        + rows("X=1", "a", 0.7, 0.4)
        + rows("X=1", "b", 0.7, 0.4)
        + rows("X=1", "c", 0.3, 0.4)
    )
    folds = {f.left_out: f for f in loso.folds(table, ["shipped", "X=1"], ["a", "b", "c"])}
    assert folds["c"].pick == "X=1" and folds["c"].pick_figures[5] == pytest.approx(0.3)
    assert folds["c"].single_figures[5] == pytest.approx(0.4)  # below its best single there
    # Left out a (or b), the others are b and c: 0.5 against 0.5, a tie goes to shipped.
    assert folds["a"].pick == "shipped"
    assert "stays" in loso.verdict(list(folds.values()))  # the folds disagree


def test_a_value_picked_on_every_fold_that_wins_everywhere_moves_the_default() -> None:
    table = loso.figures(
        [
            *(r for s in "ab" for r in rows("shipped", s, 0.5, 0.4)),
            *(r for s in "ab" for r in rows("X=1", s, 0.6, 0.4)),
        ]
    )
    found = loso.folds(table, ["shipped", "X=1"], ["a", "b"])
    assert [f.pick for f in found] == ["X=1", "X=1"]
    assert "moves" in loso.verdict(found)
    assert "moves" in loso.verdict(found, loso.STRICT_RULE)


def test_by_the_strict_rule_one_left_out_loss_keeps_the_default() -> None:
    # X wins a and b by far and loses c a little: picked on every fold (c's loss is smaller
    # than a's and b's gains), moves by the mean, not by the strict rule.
    table = loso.figures(
        rows("shipped", "a", 0.5, 0.4)
        + rows("shipped", "b", 0.5, 0.4)
        + rows("shipped", "c", 0.5, 0.4)
        + rows("X=1", "a", 0.8, 0.4)
        + rows("X=1", "b", 0.8, 0.4)
        + rows("X=1", "c", 0.4, 0.4)
    )
    found = loso.folds(table, ["shipped", "X=1"], ["a", "b", "c"])
    assert [f.pick for f in found] == ["X=1"] * 3
    assert "moves" in loso.verdict(found)
    assert "stays" in loso.verdict(found, loso.STRICT_RULE)
