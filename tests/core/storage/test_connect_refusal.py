"""A database that answers and refuses the bot after a reconnect is said, once per reason (the
maintenance loop keeps storage refusals at debug level)."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import asyncpg
import pytest

from memory_core.errors import StorageError


async def test_a_refused_reconnect_is_a_warning_said_once(memory_factory, fresh_dsn, caplog):
    memory = await memory_factory()
    name = urlsplit(fresh_dsn).path.lstrip("/")
    await memory._drop_pool()  # the connection lost, as in an outage
    admin = await asyncpg.connect(fresh_dsn.replace(f"/{name}?", "/postgres?"))
    try:
        await admin.execute(f'ALTER DATABASE "{name}" RENAME TO "{name}_gone"')
        caplog.set_level(logging.WARNING, logger="memory_core.service")
        for _ in range(3):
            with pytest.raises(StorageError):
                await memory.maintenance_round()
        said = [r for r in caplog.records if "cannot use the memory's database" in r.message]
        assert len(said) == 1 and "does not exist" in said[0].message
    finally:
        await admin.execute(f'ALTER DATABASE "{name}_gone" RENAME TO "{name}"')
        await admin.close()
    await memory.maintenance_round()
    assert memory.parts.database.connected
