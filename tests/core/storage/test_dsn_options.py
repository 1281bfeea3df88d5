"""libpq's client options in ``MEMORY_DSN``: ``connect_timeout`` works, the others are refused
by name when the settings are read (asyncpg would send them to the server as settings, which
refuses every connect)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memory_core.errors import ConfigError
from memory_core.models import TurnInput
from memory_core.settings import settings_from_mapping
from memory_core.storage.dsn_options import split_connect_timeout


async def test_a_dsn_with_connect_timeout_opens_the_memory_and_stores(memory_factory, fresh_dsn):
    memory = await memory_factory(memory_dsn=f"{fresh_dsn}&connect_timeout=7")
    turn = TurnInput(
        user_id=1, role="user", content="连得上", created_at=datetime.now(timezone.utc)
    )
    outcome = await memory.parts.writer.add_turn(turn)
    assert outcome.turn is not None and memory.parts.database.connected


def test_connect_timeout_is_taken_out_of_the_dsn_with_its_seconds() -> None:
    dsn = "postgresql://u:p@h1:5432,h2/db?connect_timeout=7&sslmode=require"
    assert split_connect_timeout(dsn) == ("postgresql://u:p@h1:5432,h2/db?sslmode=require", 7.0)
    assert split_connect_timeout("postgresql://u@h/db") == ("postgresql://u@h/db", None)
    assert split_connect_timeout("postgresql://u@h/db?connect_timeout=0")[1] is None


@pytest.mark.parametrize(
    "query,named",
    [("keepalives_idle=30", "keepalives_idle"), ("connect_timeout=soon", "connect_timeout")],
)
def test_an_option_the_driver_cannot_use_is_refused_by_name_without_the_password(
    query: str, named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"MEMORY_DSN": f"postgresql://bot:s3cret@db/memory?{query}"})
    assert named in str(refused.value) and "s3cret" not in str(refused.value)
