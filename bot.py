"""Start the bot: `python bot.py` (or `make run`). Settings come from `.env.prod` + environment."""

from pathlib import Path

import nonebot
from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter

nonebot.init()

driver = nonebot.get_driver()
driver.register_adapter(OneBotV11Adapter)

nonebot.load_from_toml(str(Path(__file__).with_name("pyproject.toml")))

if __name__ == "__main__":
    # The plugin shows the core's log and lets SIGTERM end the bot normally, in any NoneBot
    # project (nonebot_plugin_temporal_memory.runtime).
    nonebot.run()
