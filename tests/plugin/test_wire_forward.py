"""Forward WebSocket mode (``ONEBOT_WS_URLS``): the bot dials the OneBot implementation."""

from __future__ import annotations

import asyncio
import shutil
import time

from websockets.asyncio.server import ServerConnection, serve

from tests.plugin.events import SELF_ID, message_payload, text_seg
from tests.plugin.wire import OneBotPeer, StubLLM, sent_text, start_bot, stop_bot


async def test_forward_mode_dials_out_with_the_token_and_chats() -> None:
    llm = StubLLM(reply="正向连接也能聊。").start()
    connected: asyncio.Future[tuple[OneBotPeer, str | None]] = (
        asyncio.get_running_loop().create_future()
    )

    async def accept(conn: ServerConnection) -> None:
        assert conn.request is not None
        auth = conn.request.headers.get("Authorization")
        if not connected.done():
            connected.set_result((OneBotPeer.attach(conn), auth))
        await conn.wait_closed()

    async with serve(accept, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        bot = await start_bot(
            llm_url=llm.base_url, extra_env={"ONEBOT_WS_URLS": f'["ws://127.0.0.1:{port}"]'}
        )
        try:
            peer, auth = await asyncio.wait_for(connected, 30)
            assert auth == f"Bearer {bot.token}"
            # In forward mode the bot learns its QQ number from the lifecycle event.
            await peer.send_event(
                {
                    "time": int(time.time()),
                    "self_id": SELF_ID,
                    "post_type": "meta_event",
                    "meta_event_type": "lifecycle",
                    "sub_type": "connect",
                }
            )
            mark = len(peer.calls)
            await peer.send_event(message_payload([text_seg("正向模式你好")], user_id=20030))
            reply = await peer.wait_reply(user_id=20030, after=mark)
            assert sent_text(reply) == "正向连接也能聊。"
            await peer.close()
        finally:
            await stop_bot(bot)
            llm.stop()
            shutil.rmtree(bot.data_dir, ignore_errors=True)
