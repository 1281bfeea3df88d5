"""Running ``python -m memory_core`` from a test: in this process (``run_cli``), or as the
program itself (``run_program``).

Starting an interpreter and importing the core costs about a second of CPU, and the CLI tests
ask for some forty runs. ``run_cli`` calls the same ``memory_core.cli.main`` that
``python -m memory_core`` calls, with the arguments, environment and working folder the program
would have, and captures what it prints; ``run_program`` starts the real program, for the tests
of what only a process shows (its exit status, its start as a module).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from memory_core.cli import main
from tests.model_graphs import graphs_shared

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, dsn: str, data_dir: Path, **env: str) -> CliResult:
    """``python -m memory_core --data-dir DATA_DIR ARGS`` with ``MEMORY_DSN=dsn`` and ``env``,
    run in this process from ``data_dir`` (no .env.prod there: only the environment counts).

    ``main`` runs in a thread of its own: its ``asyncio.run`` then makes and closes a loop of
    its own without touching the test's."""
    out, err = io.StringIO(), io.StringIO()
    with (
        graphs_shared(data_dir),  # the local model's graph, built once per run
        mock.patch.dict(os.environ, {"MEMORY_DSN": dsn, **env}),
        contextlib.chdir(data_dir),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        concurrent.futures.ThreadPoolExecutor(max_workers=1) as thread,
    ):
        code = thread.submit(main, ["--data-dir", str(data_dir), *args]).result()
    return CliResult(code, out.getvalue(), err.getvalue())


def run_program(*args: str, dsn: str, data_dir: Path, **env: str) -> CliResult:
    """The same as ``run_cli``, as a process of its own: ``python -m memory_core``."""
    environ = {**os.environ, "MEMORY_DSN": dsn, "PYTHONPATH": str(ROOT), **env}
    with graphs_shared(data_dir):
        done = subprocess.run(
            [sys.executable, "-m", "memory_core", "--data-dir", str(data_dir), *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=environ,
            cwd=data_dir,
        )
    return CliResult(done.returncode, done.stdout, done.stderr)
