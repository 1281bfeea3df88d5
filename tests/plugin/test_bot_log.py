"""`python bot.py` logs with the full date and MEMORY_TIMEZONE's offset, the core's lines too;
each line once, also on a first start (which builds the embedding model's graph)."""

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.plugin.events import message_payload, text_seg
from tests.plugin.wire import OneBotPeer, StubLLM, start_bot, stop_bot

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


STDLIB_DEFAULT_LINE = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:")
"""A line in ``logging.basicConfig``'s format: a second handler printing what loguru prints."""


async def test_a_first_start_building_the_model_graph_logs_each_line_once_napcat_address_last():
    llm = StubLLM().start()
    bot = await start_bot(llm_url=llm.base_url, own_graph=True)
    try:
        peer = await OneBotPeer.connect(bot.ws_url, bot.token)
        try:
            mark = len(peer.calls)
            await peer.send_event(
                message_payload([text_seg("第一次启动后的第一句话")], user_id=20771)
            )
            await peer.wait_reply(user_id=20771, after=mark)
        finally:
            await peer.close()
    finally:
        await stop_bot(bot)
        llm.stop()
        log = bot.log_text()
        built = sorted(path.name for path in (bot.data_dir / "models").glob("*.onnx"))
        shutil.rmtree(bot.data_dir, ignore_errors=True)
    assert built, "this start found a graph instead of building it"
    lines = [line for line in log.splitlines() if line.strip()]
    assert [line for line in lines if STDLIB_DEFAULT_LINE.match(line)] == []
    twice = [line for line, count in Counter(lines).items() if count > 1]
    assert twice == []
    # The address NapCat is given is the line right after uvicorn's last start-up line.
    started = next(i for i, line in enumerate(lines) if "Uvicorn running on" in line)
    assert "connect NapCat's WebSocket client to ws://127.0.0.1:" in lines[started + 1]
    assert sum("connect NapCat's WebSocket client" in line for line in lines) == 1
