"""Start the bot: `python bot.py` (or `make run`). Settings come from `.env.prod` + environment."""

import logging
from pathlib import Path

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

if __name__ == "__main__":
    # SIGTERM ends the bot normally (so the embedded PostgreSQL stops): the plugin sees to that,
    # in any NoneBot project (nonebot_plugin_temporal_memory.runtime.exit_normally_on_sigterm).
    nonebot.run()
