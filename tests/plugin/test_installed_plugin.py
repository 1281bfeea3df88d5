"""The plugin the way a NoneBot store user gets it: both wheels built from this checkout, installed
with their dependencies from the package index into a fresh virtual environment (nothing of this
repository or its .venv on the path), loaded by name from a minimal NoneBot project, and talked to
by a real OneBot v11 peer over a WebSocket.

Slow: building the two wheels and installing their dependencies takes most of a minute.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes import Answer, ScriptedLLM
from tests.plugin.events import SELF_ID, SUPERUSER_ID, message_payload, text_seg
from tests.plugin.wire import REPO, OneBotPeer, free_port, launch_bot, sent_text, stop_bot

PLUGIN_MODULE = "nonebot_plugin_temporal_memory"

# What the two pyproject files build from: the core at the repository's root, the plugin in
# plugins/. Copied out first so that building leaves no build/ or *.egg-info in the checkout.
CORE_SOURCES = ("pyproject.toml", "README.md", "memory_core", "migrations", "config")
PLUGIN_SOURCES = ("pyproject.toml", "README.md", PLUGIN_MODULE)

# A project as `nb create` makes one, minus everything optional.
BOT_PY = f"""\
import nonebot
from nonebot.adapters.onebot.v11 import Adapter

nonebot.init()
nonebot.get_driver().register_adapter(Adapter)
nonebot.load_plugin("{PLUGIN_MODULE}")

if __name__ == "__main__":
    nonebot.run()
"""

EVALUATOR_MARK = "【本项目自己的评估模板】"
EVALUATOR_PROMPT = (
    f"{EVALUATOR_MARK}\n给这轮对话打分（0-100），只输出数字。\n用户：{{user}}\nAI：{{assistant}}\n"
)
REPLY = "你好呀，我是小诗。"

REPORT_RESOURCES = """
import json, sys, sysconfig
import memory_core.resources as resources
print(json.dumps({
    "purelib": sysconfig.get_paths()["purelib"],
    "migrations_dir": str(resources.MIGRATIONS_DIR),
    "defaults_dir": str(resources.DEFAULTS_DIR),
    "migrations": sorted(p.name for p in resources.MIGRATIONS_DIR.glob("*.sql")),
    "defaults": sorted(
        p.name for p in resources.DEFAULTS_DIR.iterdir() if p.is_file() and p.suffix != ".py"
    ),
    "nonebot_loaded": sorted(m for m in sys.modules if m.startswith("nonebot")),
}))
"""


@dataclass(frozen=True)
class Installed:
    root: Path
    core_wheel: Path
    plugin_wheel: Path
    python: Path
    site_packages: Path


def _copy_sources(source: Path, names: tuple[str, ...], target: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    target.mkdir(parents=True)
    for name in names:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, ignore=ignore)
        else:
            shutil.copy2(source / name, target / name)
    return target


def _run(
    *command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _clean_env(home: Path) -> dict[str, str]:
    # Nothing from this test run: no PYTHONPATH or virtual env, a home of its own (so localstore's
    # default data dir is inside it). A NoneBot project's settings are in its .env.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }


def _build_wheels(root: Path) -> tuple[Path, Path]:
    core = _copy_sources(REPO, CORE_SOURCES, root / "src" / "core")
    plugin = _copy_sources(REPO / "plugins", PLUGIN_SOURCES, root / "src" / "plugin")
    wheels = root / "wheels"
    # Two builds at once (each in its own isolated build environment).
    builds = [
        subprocess.Popen(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), src],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for src in (str(core), str(plugin))
    ]
    for build in builds:
        output, _ = build.communicate(timeout=600)
        assert build.returncode == 0, output
    (core_wheel,) = wheels.glob("temporal_memory-*.whl")
    (plugin_wheel,) = wheels.glob("nonebot_plugin_temporal_memory-*.whl")
    return core_wheel, plugin_wheel


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="tm-installed-", dir="/tmp"))
    try:
        core_wheel, plugin_wheel = _build_wheels(root)
        venv = root / "venv"
        # No pip inside (this one installs into it) and no system site-packages: every
        # dependency the two wheels need has to come from what they declare.
        _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=root)
        python = venv / "bin" / "python"
        _run(
            sys.executable, "-m", "pip", "--python", python, "install", "--quiet",
            "--no-compile", core_wheel, plugin_wheel, cwd=root,
        )  # fmt: skip
        purelib = _run(
            python,
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            cwd=root,
            env=_clean_env(root),
        )
        yield Installed(
            root=root,
            core_wheel=core_wheel,
            plugin_wheel=plugin_wheel,
            python=python,
            site_packages=Path(purelib.strip()),
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheels_hold_their_own_packages_and_only_the_plugin_requires_nonebot(
    installed: Installed,
) -> None:
    core_files = _names(installed.core_wheel)
    assert "memory_core/migrations/001_dialogues.sql" in core_files
    assert "memory_core/defaults/evaluator_prompt.txt" in core_files
    assert "memory_core/defaults/retention.toml" in core_files
    assert not [n for n in core_files if n.startswith((PLUGIN_MODULE, "tests/", "plugins/"))]
    plugin_files = _names(installed.plugin_wheel)
    assert f"{PLUGIN_MODULE}/__init__.py" in plugin_files
    assert not [n for n in plugin_files if n.startswith(("memory_core", "tests/"))]

    core_needs = [r for r in _requirements(installed.core_wheel) if "extra ==" not in r]
    assert not [r for r in core_needs if "nonebot" in r.lower()]
    plugin_needs = " ".join(_requirements(installed.plugin_wheel))
    for needed in ("temporal-memory", "nonebot2", "nonebot-adapter-onebot",
                   "nonebot-plugin-localstore"):  # fmt: skip
        assert needed in plugin_needs
    # The core's maintenance runs the daily purge and upkeep: no scheduler of the plugin's.
    assert "apscheduler" not in plugin_needs


def test_the_installed_core_finds_its_migrations_and_defaults_in_site_packages(
    installed: Installed,
) -> None:
    # Run outside the checkout: from its root, `import memory_core` would find the sources.
    found = json.loads(
        _run(
            installed.python,
            "-c",
            REPORT_RESOURCES,
            cwd=installed.root,
            env=_clean_env(installed.root),
            timeout=120,
        )
    )
    site = Path(found["purelib"])
    assert Path(found["migrations_dir"]) == site / "memory_core" / "migrations"
    assert Path(found["defaults_dir"]) == site / "memory_core" / "defaults"
    assert found["migrations"] == sorted(p.name for p in (REPO / "migrations").glob("*.sql"))
    assert found["defaults"] == sorted(
        p.name for p in (REPO / "config").iterdir() if p.is_file() and p.suffix != ".py"
    )
    assert found["nonebot_loaded"] == []


# ----------------------------------------------------------------------------- a NoneBot project


def _answer(messages: list[dict[str, str]]) -> Answer:
    """The chat model and the evaluator: a score for the project's own evaluator template."""
    if EVALUATOR_MARK in messages[-1]["content"]:
        return Answer("80")
    return Answer(REPLY)


def _postgres_pids(directory: Path) -> list[int]:
    """Live postgres processes whose command line names ``directory`` (its cluster)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "postgres" in command and str(directory) in command:
            pids.append(int(proc.name))
    return pids


async def test_a_nonebot_project_with_the_installed_plugin_answers_over_onebot_v11(
    installed: Installed,
) -> None:
    project = installed.root / "project"
    home = installed.root / "home"
    project.mkdir()
    home.mkdir()
    # localstore's data dir for the plugin, as nothing sets MEMORY_DATA_DIR.
    data_dir = home / ".local" / "share" / "nonebot2" / PLUGIN_MODULE
    port, token = free_port(), "installed-test-token"
    llm = ScriptedLLM(_answer)
    # The operator's copy of a shipped file, in a folder of their own.
    config_dir = project / "my_config"
    config_dir.mkdir()
    (config_dir / "evaluator_prompt.txt").write_text(EVALUATOR_PROMPT, encoding="utf-8")
    (project / "bot.py").write_text(BOT_PY, encoding="utf-8")
    (project / ".env").write_text(
        "\n".join(
            [
                "DRIVER=~fastapi",
                "HOST=127.0.0.1",
                f"PORT={port}",
                f"ONEBOT_ACCESS_TOKEN={token}",
                f'SUPERUSERS=["{SUPERUSER_ID}"]',
                'NICKNAME=["小诗"]',
                'COMMAND_START=["/"]',
                "LOG_LEVEL=INFO",
                f"LLM_BASE_URL={llm.base_url}",
                "LLM_MODEL=stub-model",
                "LLM_API_KEY=test-key",
                # Timers this test expects never to run out (see tests/plugin/wire.py).
                "CHAT_SLOW_NOTICE_AFTER=0",
                "EMBEDDING_QUERY_DEADLINE=60",
                "EMBEDDING_STORE_DEADLINE=60",
                f"MEMORY_CONFIG_DIR={config_dir}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    bot = None
    try:
        bot = await launch_bot(
            env=_clean_env(home),
            port=port,
            token=token,
            data_dir=data_dir,
            log_path=installed.root / "bot.log",
            python=installed.python,
            cwd=project,
        )
        peer = await OneBotPeer.connect(bot.ws_url, token)
        try:
            await peer.send_event(
                {
                    "time": int(time.time()),
                    "self_id": SELF_ID,
                    "post_type": "meta_event",
                    "meta_event_type": "lifecycle",
                    "sub_type": "connect",
                }
            )
            user = 20031
            mark = len(peer.calls)
            await peer.send_event(message_payload([text_seg("我的猫叫Momo")], user_id=user))
            reply = await peer.wait_reply(user_id=user, after=mark, timeout=60)
            assert sent_text(reply) == REPLY
            # Stored in the embedded PostgreSQL the installed core's migrations set up.
            mark = len(peer.calls)
            await peer.send_event(message_payload([text_seg("/recall 猫")], user_id=user))
            recalled = await peer.wait_reply(user_id=user, after=mark, timeout=60)
            assert "Momo" in sent_text(recalled)
            # The exchange was scored with the project's own prompt file, not the shipped one.
            for _ in range(300):  # at least 60 s, not a timing check
                if any(EVALUATOR_MARK in text for text in llm.prompt_texts()):
                    break
                await asyncio.sleep(0.2)
            else:
                pytest.fail(f"no evaluation with the project's prompt:\n{llm.prompt_texts()}")
        finally:
            await peer.close()

        # SIGTERM, as systemd or docker stop send it: the bot ends by itself, normally.
        bot.process.send_signal(signal.SIGTERM)
        returncode = await asyncio.to_thread(bot.process.wait, 60)
        log = bot.log_text()
        assert returncode == 0, log
        for _ in range(300):  # at least 60 s, not a timing check
            if not _postgres_pids(data_dir):
                break
            await asyncio.sleep(0.2)
        assert _postgres_pids(data_dir) == [], log
    finally:
        if bot is not None:
            await stop_bot(bot)
        for pid in _postgres_pids(data_dir):  # left by a failure above; the test has failed
            os.kill(pid, signal.SIGINT)
        llm.close()

    site = installed.site_packages
    plugin_dir, core_dir = site / PLUGIN_MODULE, site / "memory_core"
    assert f"TemporalMemory plugin from {plugin_dir}, core from {core_dir}" in log
    assert f'Succeeded to load plugin "{PLUGIN_MODULE}"' in log
    assert f"TemporalMemory data directory: {data_dir}" in log
    assert f"TemporalMemory database: embedded PostgreSQL in {data_dir / 'pg'}" in log
    assert "applied migration 001_dialogues.sql" in log  # the core's log reaches NoneBot's
    assert "Traceback" not in log, log
