"""Each distilled item keeps the turns it was drawn from: the lines the model cites.

A scripted loopback model answers the numbered conversation; a 撤回 (or a delete) of one turn
then takes only the items that cite it. Items without usable citations keep the batch rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memory_core.models import RecalledMessage, TurnInput
from tests.core.distill.test_extraction import conversation_of, llm_settings, prompt_kind
from tests.fakes import Answer, ScriptedLLM

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
SAID = {  # what the user says -> the fact the model draws from it
    "我住在北京": "用户住在北京",
    "我在杭州上班": "用户在杭州上班",
    "我养了一只猫叫年糕": "用户养了一只猫叫年糕",
}
MESSAGE_IDS = (601, 602, 603)


def line_of(conversation: str, text: str) -> int:
    """The number the prompt gives the line where the user said ``text``."""
    found = re.search(rf"^\[(\d+)\] \[[^\]]+\] 用户: {re.escape(text)}$", conversation, re.M)
    assert found, conversation
    return int(found.group(1))


class Citing:
    """Answers the facts prompt with one fact per statement; ``cite(line)`` is what the
    answer puts in ``sources`` (``None``: the field is left out), except for the statements in
    ``cited_well``, which cite their own line."""

    def __init__(self, cite: Callable[[int], Any], cited_well: tuple[str, ...] = ()) -> None:
        self.cite = cite
        self.cited_well = cited_well

    def __call__(self, messages: list[dict[str, str]]) -> Answer:
        prompt = messages[-1]["content"]
        kind = prompt_kind(prompt)
        said = conversation_of(prompt)
        if kind == "summary":
            return Answer('{"summary": "用户聊了住处、工作和猫。", "key_topics": ["住处"]}')
        if kind == "preferences":
            return Answer("[]")
        facts = []
        for text, fact in SAID.items():
            if text in said:
                item: dict[str, Any] = {"fact": fact, "category": "personal_info"}
                line = line_of(said, text)
                cited = [line] if text in self.cited_well else self.cite(line)
                if cited is not None:
                    item["sources"] = cited
                facts.append(item)
        return Answer(json.dumps(facts, ensure_ascii=False))


@pytest.fixture
def servers():
    started: list[ScriptedLLM] = []

    def start(cite: Callable[[int], Any], cited_well: tuple[str, ...] = ()) -> ScriptedLLM:
        server = ScriptedLLM(Citing(cite, cited_well))
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def settings_for(server: ScriptedLLM) -> dict[str, Any]:
    holder = type("Holder", (), {"server": server})()
    return llm_settings(holder, extraction_every_turns=3)


async def three_statements(memory) -> dict[str, int]:
    """Three exchanges of user 1 (a batch of six turns); the user turns' ids by text."""
    ids = {}
    for n, (text, message_id) in enumerate(zip(SAID, MESSAGE_IDS, strict=True)):
        at = T0 + timedelta(minutes=n)
        stored = await memory.parts.writer.add_turn(
            TurnInput(user_id=1, role="user", content=text, created_at=at, message_id=message_id)
        )
        await memory.parts.writer.add_turn(
            TurnInput(
                user_id=1, role="assistant", content="好的。", created_at=at + timedelta(seconds=5)
            )
        )
        await memory.parts.extraction.note_exchange(1, None, now=at + timedelta(seconds=5))
        ids[text] = stored.turn.id
    return ids


async def facts_now(memory) -> dict[str, tuple[int, ...]]:
    found = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(hours=1))
    return {f.content: f.source_turn_ids for f in found}


async def summaries(memory) -> list[str]:
    found = await memory.parts.keeper.recall_by_type(
        1, None, "summary", now=T0 + timedelta(hours=1)
    )
    return [s.content for s in found]


async def test_the_prompt_numbers_every_conversation_line(memory_factory, servers):
    server = servers(lambda line: [line])
    memory = await memory_factory(**settings_for(server))
    await three_statements(memory)
    await memory.parts.extraction.run_once(T0 + timedelta(minutes=10))
    prompt = next(p for p in server.prompt_texts() if prompt_kind(p) == "facts")
    lines = conversation_of(prompt).strip().split("\n\n")[0].splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [f"[{n}]" for n in range(1, 7)]
    assert "sources" in prompt


async def test_a_recall_of_one_message_of_a_three_message_batch_keeps_the_other_two_facts(
    memory_factory, servers
):
    memory = await memory_factory(**settings_for(servers(lambda line: [line])))
    ids = await three_statements(memory)
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=10)) == 1
    assert await facts_now(memory) == {SAID[text]: (ids[text],) for text in SAID}

    forgotten = await memory.parts.forgetting.delete_message(
        RecalledMessage(None, 602, user_id=1)
    )  # 撤回

    assert forgotten is not None and forgotten.facts == 1
    assert await facts_now(memory) == {
        "用户住在北京": (ids["我住在北京"],),
        "用户养了一只猫叫年糕": (ids["我养了一只猫叫年糕"],),
    }
    # The summary speaks of the whole batch, the withdrawn line included: it goes.
    assert await summaries(memory) == []


async def test_a_model_answer_without_sources_keeps_the_batch_rule(memory_factory, servers):
    # One fact of the batch cites its line, the other two leave ``sources`` out.
    server = servers(lambda line: None, cited_well=("我住在北京",))
    memory = await memory_factory(**settings_for(server))
    ids = await three_statements(memory)
    await memory.parts.extraction.run_once(T0 + timedelta(minutes=10))
    facts = await facts_now(memory)
    assert facts["用户住在北京"] == (ids["我住在北京"],)
    assert len(facts["用户在杭州上班"]) == len(facts["用户养了一只猫叫年糕"]) == 6  # the batch

    await memory.parts.forgetting.delete_message(
        RecalledMessage(None, 602, user_id=1)
    )  # 撤回 of 杭州
    assert await facts_now(memory) == {"用户住在北京": (ids["我住在北京"],)}


@pytest.mark.parametrize(
    "garbled",
    [
        lambda line: [line + 40],  # past the last line
        lambda line: [0],
        lambda line: [line, -1],  # one good, one bad: none trusted
        lambda line: ["第二行"],
        lambda line: [line + 0.5],
        lambda line: [True],
        lambda line: {"line": line},
        lambda line: [],
        lambda line: list(range(1, 80)),
    ],
    ids=["out-of-range", "zero", "mixed", "words", "fraction", "bool", "object", "empty", "many"],
)
async def test_bad_source_numbers_are_harmless_and_keep_the_batch_rule(
    memory_factory, servers, garbled
):
    server = servers(garbled, cited_well=("我住在北京",))
    memory = await memory_factory(**settings_for(server))
    ids = await three_statements(memory)
    report = await memory.parts.extraction.extract_session(1, None, now=T0 + timedelta(minutes=10))
    assert report is not None and report.rejected == () and report.saved.added == 4
    facts = await facts_now(memory)
    assert facts["用户住在北京"] == (ids["我住在北京"],)
    assert len(facts["用户在杭州上班"]) == len(facts["用户养了一只猫叫年糕"]) == 6
    await memory.parts.forgetting.delete_message(
        RecalledMessage(None, 603, user_id=1)
    )  # 撤回 of the cat
    assert await facts_now(memory) == {"用户住在北京": (ids["我住在北京"],)}


async def test_cited_sources_as_strings_name_their_lines(memory_factory, servers):
    memory = await memory_factory(**settings_for(servers(lambda line: [f"[{line}]", str(line)])))
    ids = await three_statements(memory)
    await memory.parts.extraction.run_once(T0 + timedelta(minutes=10))
    assert await facts_now(memory) == {SAID[text]: (ids[text],) for text in SAID}
