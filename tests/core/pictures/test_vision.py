"""The optional vision model (VISION_*): its sentence goes before the picture's text, over a real
loopback OpenAI-compatible server; when it fails the picture keeps its text alone."""

from __future__ import annotations

import base64

import pytest

from memory_core.pictures import vision
from memory_core.pictures.vision import NoDescriptions, VisionDescriber, build_describer
from memory_core.settings import MemorySettings
from tests.fakes import Answer, ScriptedLLM
from tests.picture_server import note_picture, picture_turn

GROUP, ALICE = 30003, 20002


@pytest.fixture(autouse=True)
def _no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vision, "VISION_MAX_RETRIES", 0)


def describer_for(server: ScriptedLLM) -> VisionDescriber:
    built = build_describer(
        MemorySettings(
            vision_base_url=server.base_url,
            vision_model="Qwen/Qwen2.5-VL-7B-Instruct",
        )
    )
    assert isinstance(built, VisionDescriber)
    return built


async def test_a_described_picture_carries_the_sentence_and_the_text(
    memory_factory, reader_factory, server
):
    vision = ScriptedLLM(lambda messages: Answer("一张白底黑字的快递取件通知。"))
    memory = await memory_factory()
    reader = reader_factory(memory, describer=describer_for(vision))
    try:
        turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
        job = await reader.start(turn, refs)
        stored = await memory.parts.writer.add_turn(turn, embed_later=True)
        assert job is not None and stored.turn is not None
        reader.follow(job, stored.turn)
        await reader.settled()
        async with memory.parts.database.pool.acquire() as conn:
            content = await conn.fetchval(
                "SELECT content FROM dialogues WHERE id = $1", stored.turn.id
            )
        assert content == (
            "帮我记一下[图片：一张白底黑字的快递取件通知；"
            "文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
        )
        [request] = vision.requests
        image = request[0]["content"][1]["image_url"]["url"]
        assert image == "data:image/png;base64," + base64.b64encode(note_picture()).decode()
    finally:
        vision.close()


async def test_a_failing_vision_model_leaves_the_text_alone(memory_factory, reader_factory, server):
    vision = ScriptedLLM(lambda messages: Answer(status=500))
    memory = await memory_factory()
    reader = reader_factory(memory, describer=describer_for(vision))
    try:
        turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
        job = await reader.start(turn, refs)
        stored = await memory.parts.writer.add_turn(turn, embed_later=True)
        assert job is not None and stored.turn is not None
        reader.follow(job, stored.turn)
        await reader.settled()
        async with memory.parts.database.pool.acquire() as conn:
            content = await conn.fetchval(
                "SELECT content FROM dialogues WHERE id = $1", stored.turn.id
            )
        assert content == "帮我记一下[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
        assert len(vision.requests) == 1
    finally:
        vision.close()


def test_no_vision_model_no_descriptions():
    assert isinstance(build_describer(MemorySettings()), NoDescriptions)
