"""Turning a ``TurnInput`` into a row: one function returns the turn as stored and its row, and
a turn's text is scrubbed once on its way in. Pure checks, no database."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from memory_core.dialogue import turn_rows
from memory_core.errors import InvalidTurnError
from memory_core.lang import text as lang_text
from memory_core.models import TurnInput

NOW = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
TZ = ZoneInfo("Asia/Shanghai")


class CharCounter:
    def count(self, text: str) -> int:
        return len(text)


def _prepare(turn: TurnInput) -> tuple[TurnInput, turn_rows.NewTurnRow]:
    return turn_rows.prepare_row(turn, now=NOW, max_chars=100, token_counter=CharCounter(), tz=TZ)


def test_the_turn_comes_back_as_stored_with_the_rows_key_and_time() -> None:
    broken = "我明天\x00上午十点要去体检 \ud83d"  # a NUL and half an emoji
    turn, row = _prepare(TurnInput(user_id=1, role="user", content=broken, sender_name="小\x00明"))
    assert row.content == turn.content == "我明天上午十点要去体检 \ufffd"
    assert row.sender_name == turn.sender_name == "小明"
    assert turn.message_uuid == row.message_uuid and row.message_uuid.startswith("local:")
    assert turn.created_at == row.created_at == NOW
    assert row.embedding is None and row.embedding_model is None
    # Prepared again (a spooled turn on its flush), the stored turn keeps its key and time.
    again, row_again = _prepare(turn)
    assert (row_again.message_uuid, row_again.created_at) == (row.message_uuid, NOW)
    assert again == turn


def test_a_turns_text_is_scrubbed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    scrubbed: list[str] = []
    real = lang_text.scrub

    def counting(text: str) -> str:
        scrubbed.append(text)
        return real(text)

    # Wherever the preparation reaches ``scrub`` from.
    monkeypatch.setattr(lang_text, "scrub", counting)
    monkeypatch.setattr(turn_rows, "scrub", counting)
    _prepare(TurnInput(user_id=1, role="user", content="记得带伞", sender_name="小明"))
    assert scrubbed.count("记得带伞") == 1
    assert scrubbed.count("小明") == 1


def test_a_blank_turn_is_refused_after_its_scrub() -> None:
    with pytest.raises(InvalidTurnError, match="empty"):
        _prepare(TurnInput(user_id=1, role="user", content="\x00 \x00"))
