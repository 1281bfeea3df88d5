"""``open_memory`` takes an extractor like it takes an embedder: distilling with a chat model
in the test's own hands, with no LLM settings and no HTTP server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone

from memory_core import MemorySettings, TurnInput, open_memory
from memory_core.distill.extraction import Extractor, load_templates
from memory_core.distill.worker import ExtractionOff

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)


class AnsweringModel:
    """Answers the three extraction prompts; remembers what it was asked and whether it was
    closed (the memory closes the extractor it was given)."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.closed = False

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        if "关键事实" in prompt:
            return '[{"fact": "用户住在北京", "category": "personal_info", "confidence": 0.9}]'
        if "偏好和习惯" in prompt:
            return "[]"
        return '{"summary": "用户说了住处。", "key_topics": ["住处"], "action_items": []}'

    async def aclose(self) -> None:
        self.closed = True


async def test_an_injected_extractor_distils_with_no_model_configured(
    fresh_dsn, tmp_data_dir, hashing_embedder
):
    settings = MemorySettings(
        memory_dsn=fresh_dsn,
        memory_data_dir=tmp_data_dir,
        extraction_every_turns=1,
        extraction_settle_seconds=0,
    )
    assert not settings.extraction_endpoint.configured  # built from settings it would be off
    model = AnsweringModel()
    extractor = Extractor(model=model, templates=load_templates(settings), tz=settings.tz)
    memory = await open_memory(
        settings, embedder=hashing_embedder, extractor=extractor, maintenance_interval=None
    )
    try:
        assert not isinstance(memory.parts.extraction, ExtractionOff)
        for role, text, at in (("user", "我住在北京", T0), ("assistant", "好的", T0)):
            await memory.parts.writer.add_turn(
                TurnInput(user_id=1, role=role, content=text, created_at=at + timedelta(seconds=1))
            )
        assert await memory.parts.extraction.note_exchange(1, None, now=T0)
        assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=1)) == 1
        later = T0 + timedelta(hours=1)
        facts = await memory.parts.keeper.recall_by_type(1, None, "facts", now=later)
        assert [f.content for f in facts] == ["用户住在北京"]
        assert any("我住在北京" in prompt for prompt in model.prompts)
    finally:
        await memory.aclose()
    assert model.closed
