"""Pictures over the real wire: ``bot.py`` as a subprocess, a NapCat-like peer on a real
WebSocket, a loopback server for the picture and one for the chat model. A screenshot sent with
"帮我记一下" is read into its turn; asked later, the memory brings back what it said; in another
group it does not; 撤回 takes it away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.picture_server import PictureServer, note_picture
from tests.plugin.events import SELF_ID, message_payload, recall_payload, text_seg
from tests.plugin.wire import OneBotPeer, StubLLM, chatting_bot, sent_text

GROUP_A, GROUP_B = 30003, 40004
ALICE = 20002


def all_text(prompt: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in prompt)


@pytest.fixture(scope="module")
async def wire() -> AsyncIterator[tuple[StubLLM, OneBotPeer, PictureServer]]:
    pictures = PictureServer({"/note.png": note_picture()})
    # The reply waits for its picture as long as reading takes here: no test races a timer.
    # The picture server is on loopback, which only an operator's allowed host may be.
    env = {"MEMORY_IMAGE_REPLY_WAIT": "30", "MEMORY_IMAGE_ALLOWED_HOSTS": '["127.0.0.1"]'}
    try:
        async with chatting_bot(
            StubLLM().start(), extra_env=env, said_may_be_logged=True
        ) as running:
            yield running.llm, running.peer, pictures
    finally:
        pictures.close()


async def say(peer: OneBotPeer, segments: list[dict[str, Any]], **kwargs: Any) -> str:
    mark = len(peer.calls)
    await peer.send_event(message_payload(segments, **kwargs))
    call = await peer.wait_reply(
        user_id=kwargs["user_id"], group_id=kwargs.get("group_id"), after=mark
    )
    return sent_text(call)


async def test_a_screenshot_is_read_recalled_in_its_group_only_and_gone_after_recall(wire):
    llm, peer, pictures = wire
    image = {
        "type": "image",
        "data": {
            "summary": "",
            "file": "6B4DE3DFD1BD271E3297859D41C530F5.jpg",
            "sub_type": 0,
            "url": pictures.url("/note.png"),
            "file_size": str(len(note_picture())),
        },
    }
    at = {"type": "at", "data": {"qq": str(SELF_ID)}}
    await say(
        peer,
        [at, text_seg(" 帮我记一下"), image],
        user_id=ALICE,
        group_id=GROUP_A,
        message_id=9001,
        sent_at=time.time() - 3600,  # an hour ago: past short-term memory
    )
    said = llm.last_prompt_for("帮我记一下[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]")
    assert said, "the reply did not see the picture's text"

    await say(
        peer,
        [at, text_seg(" 我之前发的那张图上取件码是多少？(A)")],
        user_id=ALICE,
        group_id=GROUP_A,
    )
    assert "8848" in all_text(llm.last_prompt_for("取件码是多少？(A)"))
    await say(
        peer,
        [at, text_seg(" 我之前发的那张图上取件码是多少？(B)")],
        user_id=ALICE,
        group_id=GROUP_B,
    )
    assert "8848" not in all_text(llm.last_prompt_for("取件码是多少？(B)"))

    assert "8848" in await say(peer, [text_seg("/recall 取件码")], user_id=ALICE, group_id=GROUP_A)
    await peer.send_event(recall_payload(9001, user_id=ALICE, group_id=GROUP_A))
    for _ in range(300):  # at least 60 s, not a timing check: until the notice is handled
        left = await say(peer, [text_seg("/recall 取件码")], user_id=ALICE, group_id=GROUP_A)
        if "8848" not in left:
            break
        await asyncio.sleep(0.2)
    assert "8848" not in left
    await say(
        peer,
        [at, text_seg(" 我之前发的那张图上取件码是多少？(撤回后)")],
        user_id=ALICE,
        group_id=GROUP_A,
    )
    assert "8848" not in all_text(llm.last_prompt_for("取件码是多少？(撤回后)"))
