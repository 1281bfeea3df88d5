"""The bot's commands: one matcher finds them (``dispatch``), ``help`` describes them, and each
module registers its own (``forget``, ``self_service``, ``group_sharing``). The plugin's
``__init__`` imports the modules, which registers them."""
