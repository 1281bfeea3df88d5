"""Start the bot: `python bot.py` (or `make run`). Settings come from `.env.prod` + environment."""

import logging
import signal
from pathlib import Path
from types import FrameType

import nonebot
from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter
from nonebot.log import LoguruHandler

# The core logs through stdlib logging; show it next to NoneBot's own log.
logging.getLogger("memory_core").addHandler(LoguruHandler())
logging.getLogger("memory_core").setLevel(logging.INFO)

nonebot.init()

driver = nonebot.get_driver()
driver.register_adapter(OneBotV11Adapter)

nonebot.load_from_toml(str(Path(__file__).with_name("pyproject.toml")))


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    # uvicorn shuts down gracefully on SIGTERM (the memory's shutdown hook stops the embedded
    # PostgreSQL) and then re-raises the signal. With the default handler the process would die
    # without running atexit hooks, the embedded server's last chance to stop when a shutdown
    # hook failed; exiting normally runs them.
    raise SystemExit(0)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_cleanly)
    nonebot.run()
