"""What the bot's HTTP server lets in before NoneBot sees it: uvicorn's limits
(``server_limits``, passed by ``bot.py``) and the ASGI guards added to the app while the plugin
loads (``body_limit``, ``http_event_guard``, ``ws_frame_guard``, ``ws_access_guard``; what they
share: ``asgi_guard``)."""
