"""The bot's commands. ``dispatch`` is the one matcher that finds them, ``help`` the lines that
describe them, ``common`` what their handlers share; each other module registers its own:
``menu`` (/帮助), ``forget`` (/forget and the confirmation every delete waits for),
``memstat``, ``recall``, ``remember``, ``self_service`` (/我的记忆, /忘记我, /导出我的记忆 …) and
``group_sharing`` (/群共享). The plugin's ``__init__`` imports them, which registers them."""
