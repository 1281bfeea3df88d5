"""`python bot.py` logs with the full date and MEMORY_TIMEZONE's offset, the core's lines too."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import logging
import bot
from nonebot.log import logger
logger.info("plugin probe")
logging.getLogger("memory_core.probe").warning("core probe")
"""
STAMPED = r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\+05:30 \[(INFO|WARNING)\] .* \| "


def test_log_lines_carry_the_date_and_the_configured_zone_offset():
    # Asia/Kolkata: +05:30 all year, and no machine runs the tests in it by accident.
    env = {**os.environ, "MEMORY_TIMEZONE": "Asia/Kolkata"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for probe in ("plugin probe", "core probe"):
        line = next(line for line in lines if line.endswith(probe))
        assert re.match(STAMPED + probe + "$", line), line
    assert all(re.match(r"^\d{4}-\d{2}-\d{2} ", line) for line in lines if "] " in line), lines
