"""``docs/settings.md`` is what ``docs/settings_doc.py`` makes of ``.env.prod``: every key, its
default, its comment in both languages; the check fails when the page falls behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from dotenv import dotenv_values

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCRIPT = DOCS / "settings_doc.py"
ENV_PROD = ROOT / ".env.prod"


def settings_doc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_the_settings_page_is_what_env_prod_makes() -> None:
    done = settings_doc("--check")
    assert done.returncode == 0, done.stderr


def test_the_check_fails_when_env_prod_changes_and_the_page_does_not(tmp_path: Path) -> None:
    env = tmp_path / ".env.prod"
    text = ENV_PROD.read_text(encoding="utf-8")
    env.write_text(text, encoding="utf-8")
    page = tmp_path / "settings.md"
    assert settings_doc("--env-file", str(env), "--page", str(page)).returncode == 0
    assert settings_doc("--check", "--env-file", str(env), "--page", str(page)).returncode == 0

    env.write_text(text.replace("# 监听端口 / listen port.", "# 监听的端口 / the port."), "utf-8")
    done = settings_doc("--check", "--env-file", str(env), "--page", str(page))
    assert done.returncode == 1
    assert "make docs" in done.stderr


def test_every_key_of_env_prod_is_on_the_page_with_its_default_and_both_languages() -> None:
    page = (DOCS / "settings.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([A-Z0-9_]+)` \|.*$", page, re.M)}
    values = dotenv_values(ENV_PROD)
    assert set(rows) == set(values)
    assert "| `PORT` | `8080` | 监听端口 | listen port. |" in rows["PORT"]
    for key, row in rows.items():
        chinese, english = row.split(" | ")[2:4]
        assert re.search(r"[\u4e00-\u9fff]", chinese), key
        assert re.search(r"[a-z]{3}", english), key
