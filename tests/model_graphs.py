"""The bundled embedding model's ONNX graph, built once per test run and shared.

A data folder's first embedding builds the graph in ``data_dir/models`` (seconds of CPU, tens
of seconds on a loaded machine). Every test whose bot, CLI or memory gets a fresh data folder
would build it again; instead the first one built is kept in a folder that lives as long as the
run (its xdist workers share it), and later data folders start with a hard link to it.
``cached_graph`` checks a linked graph as it checks its own (checksums), and a later run, of
other code, builds its own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# One folder for the whole run: under xdist every worker shares the run's id, so the graph the
# first worker builds serves the others too.
SHARED_MODELS = Path(tempfile.gettempdir()) / (
    f"tm-test-models-{os.environ.get('PYTEST_XDIST_TESTRUNUID') or os.getpid()}"
)
atexit.register(shutil.rmtree, SHARED_MODELS, ignore_errors=True)


def share_graphs(data_dir: Path) -> None:
    """Link the graphs kept from earlier in this run into ``data_dir/models``."""
    kept = [path for path in SHARED_MODELS.glob("*") if path.is_file()]
    if not kept:
        return
    models = data_dir / "models"
    models.mkdir(parents=True, exist_ok=True)
    for path in kept:
        with contextlib.suppress(OSError):
            os.link(path, models / path.name)


def keep_graphs(data_dir: Path) -> None:
    """After a bot, a CLI or a memory is done with ``data_dir``: keep the graphs it built, if
    none are kept yet."""
    built = [path for path in (data_dir / "models").glob("*") if path.is_file()]
    if not built or any(SHARED_MODELS.glob("*")):
        return
    SHARED_MODELS.mkdir(parents=True, exist_ok=True)
    for path in built:
        with contextlib.suppress(OSError):
            os.link(path, SHARED_MODELS / path.name)


@contextlib.contextmanager
def graphs_shared(data_dir: Path) -> Iterator[None]:
    """``share_graphs`` before, ``keep_graphs`` after."""
    share_graphs(data_dir)
    try:
        yield
    finally:
        keep_graphs(data_dir)
