"""A question about a picture ("刚才那张图") brings its chat's latest pictures first."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

from memory_core.pictures.recall import names_a_picture
from memory_core.recall.options import RecallOptions
from tests.turns import said

GROUP = 30003
ALICE, BOB = 20002, 20003


def with_image(turn, *, sticker: bool = False):  # type: ignore[no-untyped-def]
    data = {"file": "x.png", "url": "http://127.0.0.1:9/x.png", "sub_type": 1 if sticker else 0}
    return dataclasses.replace(turn, raw_segments=[{"type": "image", "data": data}])


def test_which_questions_name_a_picture():
    for query in ("刚才那张图是什么", "上次那张截图里写了啥", "我发的照片呢", "这图什么意思"):
        assert names_a_picture(query), query
    for query in (
        "图书馆几点关门",
        "地图上怎么走",
        "今天吃什么",
        "帮我记一下[图片]",
        "[图片：文字 截图]",
    ):
        assert not names_a_picture(query), query


async def test_the_latest_pictures_of_the_chat_come_first(memory_factory):
    memory = await memory_factory()
    now = datetime.now(timezone.utc)
    at = now - timedelta(hours=3)
    await memory.parts.writer.add_turn(with_image(said(ALICE, "[图片]", at, GROUP)))  # older photo
    await memory.parts.writer.add_turn(
        with_image(said(ALICE, "看这个[图片]", at + timedelta(minutes=1), GROUP))
    )
    await memory.parts.writer.add_turn(
        with_image(said(ALICE, "[动画表情]", at + timedelta(minutes=2), GROUP), sticker=True)
    )
    for i in range(10):
        await memory.parts.writer.add_turn(
            said(ALICE, f"那张图说的事我们再聊聊第{i}次", at + timedelta(minutes=3 + i), GROUP)
        )
    # Bob's picture in the same group, later: another member's session.
    await memory.parts.writer.add_turn(
        with_image(said(BOB, "[图片]", at + timedelta(minutes=30), GROUP))
    )

    found = await memory.parts.retriever.recall(
        ALICE, "上次那张图是什么", GROUP, RecallOptions(top_n=2, window_size=0, now=now)
    )
    assert [t.content for t in found.turns] == ["[图片]", "看这个[图片]"]  # time order
    assert {t.user_id for t in found.turns} == {ALICE}

    plain = await memory.parts.retriever.recall(
        ALICE, "我们再聊聊", GROUP, RecallOptions(top_n=2, window_size=0, now=now)
    )
    assert all("图片" not in t.content for t in plain.turns)
