"""Memory as tools for the chat model, stream-only providers and the group budget, through
the engine on the embedded PostgreSQL with a real loopback stand-in model over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memory_core.conversation.budget import RESTING_NOTICE
from memory_core.conversation.engine import ConversationEngine, Delivery, Outcome
from memory_core.models import TurnInput
from memory_core.personal import known_about, opt_out
from memory_core.providers import llm as llm_module
from memory_core.providers.llm import OpenAIChatModel, build_chat_model
from tests.tool_llm import Reply, ToolLLM, tool_messages

HOURS_AGO = timedelta(hours=3)


class Outbox:
    def __init__(self) -> None:
        self.sent: list[str] = []

    async def __call__(self, text: str) -> Delivery | None:
        self.sent.append(text)
        return Delivery(text=text, message_id=8000 + len(self.sent))


def said(text: str, *, user: int, group: int | None, at: datetime | None = None) -> TurnInput:
    return TurnInput(
        user_id=user,
        group_id=group,
        self_id=10001,
        role="user",
        content=text,
        sender_name=f"成员{user}",
        created_at=at,
    )


def searching(query: str, answer: str = "我查到了。") -> Callable[[dict[str, Any]], Reply]:
    """A model that calls search_memory once, then answers (and answers plainly without tools)."""

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("tools") and not tool_messages(body):
            return Reply(
                content=None, tool_calls=(("search_memory", json.dumps({"query": query})),)
            )
        return Reply(content=answer)

    return respond


@pytest.fixture
async def llm() -> AsyncIterator[ToolLLM]:
    server = ToolLLM(lambda body: Reply(content="好的"))
    yield server
    server.stop()


@pytest.fixture
async def open_chat(memory_factory, llm, monkeypatch):
    monkeypatch.setattr(llm_module, "LLM_MAX_RETRIES", 0)  # a scripted failure is final
    models: list[OpenAIChatModel] = []

    async def factory(**overrides: Any) -> ConversationEngine:
        settings: dict[str, Any] = {
            "llm_base_url": llm.base_url,
            "llm_model": "stand-in",
            "chat_slow_notice_after": 0,
            **overrides,
        }
        memory = await memory_factory(**settings)
        model = build_chat_model(memory.parts.settings)
        assert model is not None
        models.append(model)
        engine = ConversationEngine(
            parts=memory.parts, chat_model=model, bot_name="小诗", usage=model.usage
        )
        engine.memory = memory  # type: ignore[attr-defined]  # for the test's own reads
        return engine

    yield factory
    for model in models:
        await model.aclose()


# ---------------------------------------------------------------- scope


async def test_search_memory_sees_only_its_own_chat_in_two_groups(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]
    then = datetime.now(timezone.utc) - HOURS_AGO
    await memory.parts.writer.add_turn(said("我的暗号是青蛙跳", user=1, group=100, at=then))
    await memory.parts.writer.add_turn(said("我的暗号是白鹭飞", user=1, group=200, at=then))
    await memory.parts.writer.add_turn(said("我的暗号是老虎吼", user=2, group=100, at=then))
    await memory.parts.writer.add_turn(said("我的暗号是海豚游", user=1, group=None, at=then))
    llm.responder = searching("暗号")
    outbox = Outbox()
    result = await engine.converse(said("我的暗号是什么", user=1, group=100), outbox)
    assert result.outcome is Outcome.REPLIED and outbox.sent == ["我查到了。"]
    [found] = tool_messages(llm.bodies[-1])
    assert "青蛙跳" in found
    for other in ("白鹭飞", "老虎吼", "海豚游"):
        assert other not in found
    llm.bodies.clear()
    await engine.converse(said("我的暗号是什么", user=1, group=200), Outbox())
    [found] = tool_messages(llm.bodies[-1])
    assert "白鹭飞" in found and "青蛙跳" not in found and "海豚游" not in found


async def test_search_memory_in_a_shared_group_reaches_the_members_as_recall_does(open_chat, llm):
    engine = await open_chat(memory_shared_groups="300")
    memory = engine.memory  # type: ignore[attr-defined]
    then = datetime.now(timezone.utc) - HOURS_AGO
    await memory.parts.writer.add_turn(said("群的暗号是大象", user=2, group=300, at=then))
    await memory.parts.writer.add_turn(said("群的暗号是长颈鹿", user=2, group=400, at=then))
    llm.responder = searching("暗号")
    await engine.converse(said("群的暗号是什么", user=1, group=300), Outbox())
    [found] = tool_messages(llm.bodies[-1])
    assert "大象" in found and "长颈鹿" not in found
    await engine.converse(said("群的暗号是什么", user=1, group=400), Outbox())
    [found] = tool_messages(llm.bodies[-1])
    assert "长颈鹿" not in found  # group 400 is not shared: another member's words stay theirs


async def test_search_memory_finds_nothing_for_an_unrelated_query_with_the_bundled_model(
    open_chat, llm, local
):
    engine = await open_chat(embedder=local)
    memory = engine.memory  # type: ignore[attr-defined]
    then = datetime.now(timezone.utc) - HOURS_AGO
    lines = ["我的猫叫咪咪", "今天中午吃了牛肉面", "周会改到周四下午三点", "我对花生过敏"]
    for i, text in enumerate(lines * 4):
        await memory.parts.writer.add_turn(
            said(text, user=1, group=None, at=then + timedelta(minutes=i))
        )
    llm.responder = searching("工位密码")
    await engine.converse(said("我的工位密码是多少", user=1, group=None), Outbox())
    [found] = tool_messages(llm.bodies[-1])
    assert found == "没有找到相关的记忆。"
    llm.bodies.clear()
    llm.responder = searching("猫的名字")
    await engine.converse(said("我的猫叫什么", user=1, group=None), Outbox())
    [found] = tool_messages(llm.bodies[-1])
    assert "咪咪" in found  # with its window, as /recall --full shows it


async def test_search_memory_since_until_and_speaker_narrow_the_search(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]
    now = datetime.now(timezone.utc)
    await memory.parts.writer.add_turn(
        said("旅行去了杭州", user=1, group=None, at=now - timedelta(days=20))
    )
    await memory.parts.writer.add_turn(
        said("旅行去了成都", user=1, group=None, at=now - timedelta(days=2))
    )
    since = (now - timedelta(days=5)).astimezone(memory.parts.tz).date().isoformat()

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("tools") and not tool_messages(body):
            arguments = {"query": "旅行", "since": since, "speaker": "user"}
            return Reply(content=None, tool_calls=(("search_memory", json.dumps(arguments)),))
        return Reply(content="好")

    llm.responder = respond
    await engine.converse(said("我最近去哪旅行了", user=1, group=None), Outbox())
    [found] = tool_messages(llm.bodies[-1])
    assert "成都" in found and "杭州" not in found


# ---------------------------------------------------------------- bounds


async def test_bad_arguments_and_an_unknown_tool_become_tool_messages(open_chat, llm):
    engine = await open_chat()

    def respond(body: dict[str, Any]) -> Reply:
        if not tool_messages(body):
            calls = (("search_memory", "{not json"), ("delete_everything", "{}"))
            return Reply(content=None, tool_calls=calls)
        if len(tool_messages(body)) == 2:
            return Reply(content=None, tool_calls=(("search_memory", json.dumps({"q": 1})),))
        return Reply(content="抱歉，我直接回答：不知道。")

    llm.responder = respond
    outbox = Outbox()
    result = await engine.converse(said("你记得吗", user=1, group=None), outbox)
    assert result.outcome is Outcome.REPLIED
    assert outbox.sent == ["抱歉，我直接回答：不知道。"]
    bad_json, unknown, missing = tool_messages(llm.bodies[-1])
    assert "JSON" in bad_json
    assert "delete_everything" in unknown
    assert "缺少 query" in missing


async def test_a_model_that_keeps_calling_gets_a_final_call_without_tools(open_chat, llm):
    engine = await open_chat()

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("tool_choice") == "none":
            return Reply(content="不查了，直接说吧。")
        return Reply(content=None, tool_calls=(("search_memory", json.dumps({"query": "x"})),))

    llm.responder = respond
    outbox = Outbox()
    result = await engine.converse(said("随便聊聊", user=1, group=None), outbox)
    assert result.outcome is Outcome.REPLIED and outbox.sent == ["不查了，直接说吧。"]
    assert len(llm.bodies) == 3  # two tool rounds, then the answer
    # The last call still carries the same tools (the prompt's prefix), but forbids them.
    assert llm.bodies[-1]["tools"] == llm.bodies[0]["tools"]


async def test_calls_past_the_round_limit_are_answered_but_not_run(open_chat, llm):
    engine = await open_chat()

    def respond(body: dict[str, Any]) -> Reply:
        if not tool_messages(body):
            calls = tuple(("search_memory", json.dumps({"query": f"第{n}"})) for n in range(5))
            return Reply(content=None, tool_calls=calls)
        return Reply(content="好")

    llm.responder = respond
    assert (
        await engine.converse(said("查", user=1, group=None), Outbox())
    ).outcome is Outcome.REPLIED
    answers = tool_messages(llm.bodies[-1])
    assert len(answers) == 5  # every call id has its tool message
    assert [a.startswith("未执行") for a in answers] == [False] * 3 + [True] * 2


def asking_three_times(query: str) -> Callable[[dict[str, Any]], Reply]:
    """A model that asks for ``search_memory`` whenever tools are in the request (even when
    told to answer), and without tools answers with what the message carries after its own
    text (the tools' results, if it was given them)."""

    def respond(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            return Reply(
                content=None, tool_calls=(("search_memory", json.dumps({"query": query})),)
            )
        last = body["messages"][-1]["content"]
        return Reply(content="查到了：青蛙跳。" if "青蛙跳" in last else "没查到。")

    return respond


async def test_a_model_asking_for_a_third_round_answers_from_what_the_tools_found(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]
    then = datetime.now(timezone.utc) - HOURS_AGO
    await memory.parts.writer.add_turn(said("我的暗号是青蛙跳", user=1, group=None, at=then))
    llm.responder = asking_three_times("暗号")
    outbox = Outbox()
    result = await engine.converse(said("我的暗号是什么", user=1, group=None), outbox)
    assert result.outcome is Outcome.REPLIED and outbox.sent == ["查到了：青蛙跳。"]
    assert len(llm.bodies) == 4  # two tool rounds, the refused last call, one without tools
    final = llm.bodies[-1]
    assert "tools" not in final and not tool_messages(final)
    assert "青蛙跳" in final["messages"][-1]["content"]
    assert final["messages"][-1]["role"] == "user"


async def test_a_model_failing_on_the_tools_results_replies_with_a_summary_of_them(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]
    then = datetime.now(timezone.utc) - HOURS_AGO
    await memory.parts.writer.add_turn(said("我的暗号是青蛙跳", user=1, group=None, at=then))

    def failing_after(query: str) -> Callable[[dict[str, Any]], Reply]:
        def respond(body: dict[str, Any]) -> Reply:
            if body.get("tools"):
                call = ("search_memory", json.dumps({"query": query}))
                return Reply(content=None, tool_calls=(call,))
            return Reply(status=500, error="overloaded")

        return respond

    llm.responder = failing_after("暗号")
    outbox = Outbox()
    result = await engine.converse(said("我的暗号是什么", user=1, group=None), outbox)
    assert result.outcome is Outcome.REPLIED
    [answer] = outbox.sent
    assert answer.startswith("我翻了一下记忆，找到这些：") and "我的暗号是青蛙跳" in answer
    # Nothing found: it says so, instead of an apology.
    llm.responder = failing_after("潜水艇")
    outbox = Outbox()
    result = await engine.converse(said("潜水艇呢", user=1, group=None), outbox)
    assert result.outcome is Outcome.REPLIED
    assert outbox.sent == ["我翻了一下记忆，没有找到相关的内容。"]


async def test_tool_definitions_and_system_prompt_are_byte_identical_across_calls(open_chat, llm):
    engine = await open_chat()
    llm.responder = searching("猫")
    for text in ("我的猫叫咪咪", "它几岁了", "它喜欢吃什么"):
        await engine.converse(said(text, user=1, group=100), Outbox())
    await engine.converse(said("你好", user=2, group=500), Outbox())
    tools = {json.dumps(b["tools"], ensure_ascii=False) for b in llm.bodies}
    assert len(tools) == 1
    first_calls = [b for b in llm.bodies if not tool_messages(b)]
    systems = {b["messages"][0]["content"] for b in first_calls[:3]}
    assert len(systems) == 1


# ---------------------------------------------------------------- remember


async def test_remember_keeps_a_fact_of_that_person_in_that_chat(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]

    def respond(body: dict[str, Any]) -> Reply:
        if not tool_messages(body):
            arguments = json.dumps({"text": "用户对花生过敏"}, ensure_ascii=False)
            return Reply(content=None, tool_calls=(("remember", arguments),))
        return Reply(content="记住了")

    llm.responder = respond
    await engine.converse(said("我对花生过敏，记住哦", user=1, group=100), Outbox())
    assert tool_messages(llm.bodies[-1]) == ["已记下。"]
    facts = await known_about(memory.parts.keeper, 1, 100)
    assert [m.content for m in facts] == ["用户对花生过敏"]
    assert await known_about(memory.parts.keeper, 1, None) == []
    assert await known_about(memory.parts.keeper, 1, 200) == []
    # The fact reaches the next prompt of that chat as a distilled line.
    llm.responder = lambda body: Reply(content="不能吃")
    await engine.converse(said("我能吃花生吗", user=1, group=100), Outbox())
    assert "事实: 用户对花生过敏" in llm.bodies[-1]["messages"][-1]["content"]


async def test_remember_refuses_a_person_who_opted_out(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]
    await opt_out(memory.parts.database, 1, 100)

    def respond(body: dict[str, Any]) -> Reply:
        if not tool_messages(body):
            arguments = json.dumps({"text": "成员1住在上海"}, ensure_ascii=False)
            return Reply(content=None, tool_calls=(("remember", arguments),))
        return Reply(content="好")

    llm.responder = respond
    await engine.converse(said("我住在上海", user=1, group=100), Outbox())
    [answer] = tool_messages(llm.bodies[-1])
    assert answer.startswith("没有记下")
    assert await known_about(memory.parts.keeper, 1, 100) == []


# ---------------------------------------------------------------- providers


async def test_a_provider_that_refuses_tools_is_asked_without_them_from_then_on(open_chat, llm):
    engine = await open_chat()

    def respond(body: dict[str, Any]) -> Reply:
        if "tools" in body:
            return Reply(
                status=400, error="registry.ollama.ai/library/gemma does not support tools"
            )
        return Reply(content="没有工具也能回答")

    llm.responder = respond
    outbox = Outbox()
    first = await engine.converse(said("你好", user=1, group=None), outbox)
    assert first.outcome is Outcome.REPLIED and outbox.sent == ["没有工具也能回答"]
    assert ["tools" in b for b in llm.bodies] == [True, False]
    second = await engine.converse(said("再问一次", user=1, group=None), outbox)
    assert second.outcome is Outcome.REPLIED
    assert ["tools" in b for b in llm.bodies] == [True, False, False]


async def test_chat_tools_off_offers_no_tools(open_chat, llm):
    engine = await open_chat(chat_tools="off")
    await engine.converse(said("你好", user=1, group=None), Outbox())
    assert "tools" not in llm.bodies[-1]


async def test_a_stream_only_provider_is_streamed_with_its_tool_call_deltas(open_chat, llm):
    engine = await open_chat()
    memory = engine.memory  # type: ignore[attr-defined]
    then = datetime.now(timezone.utc) - HOURS_AGO
    await memory.parts.writer.add_turn(said("我的暗号是青蛙跳", user=1, group=None, at=then))
    searching_reply = searching("暗号", answer="暗号是青蛙跳哦")

    def respond(body: dict[str, Any]) -> Reply:
        if not body.get("stream"):
            return Reply(
                status=400,
                error="This model only support stream mode, please enable the stream parameter "
                "to access the model.",
            )
        return searching_reply(body)

    llm.responder = respond
    outbox = Outbox()
    result = await engine.converse(said("我的暗号是什么", user=1, group=None), outbox)
    assert result.outcome is Outcome.REPLIED and outbox.sent == ["暗号是青蛙跳哦"]
    assert [bool(b.get("stream")) for b in llm.bodies] == [False, True, True]
    [found] = tool_messages(llm.bodies[-1])
    assert "青蛙跳" in found  # the arguments came in four-character deltas
    await engine.converse(said("谢谢", user=1, group=None), outbox)
    assert len(llm.bodies) == 5  # learnt once: no second refused call
    assert all(b["stream"] is True for b in llm.bodies[3:])


# ---------------------------------------------------------------- budget


async def test_a_group_past_its_daily_budget_rests_once_then_stays_quiet(open_chat, llm):
    engine = await open_chat(chat_group_daily_tokens=1000)
    usage = {"prompt_tokens": 400, "completion_tokens": 50, "total_tokens": 450}
    llm.responder = lambda body: Reply(content="好的", usage=usage)
    outbox = Outbox()
    now = datetime.now(timezone.utc)
    outcomes = []
    for n in range(5):
        result = await engine.converse(said(f"第{n}条", user=1, group=100), outbox)
        outcomes.append(result.outcome)
    assert outcomes == [Outcome.REPLIED] * 3 + [Outcome.RESTING] * 2
    assert outbox.sent == ["好的"] * 3 + [RESTING_NOTICE]
    # 450, 900 (past 80 %: the third reply is asked without tools), then 1350: spent.
    assert ["tools" in b for b in llm.bodies] == [True, True, False]
    # The resting messages are still stored.
    stored = await engine.memory.parts.retriever.recent_turns(
        1, 100, limit=20, since=now - HOURS_AGO
    )  # type: ignore[attr-defined]
    assert "第4条" in [t.content for t in stored]
    # Another group and a private chat are not held back.
    assert (
        await engine.converse(said("你好", user=1, group=101), outbox)
    ).outcome is Outcome.REPLIED
    assert (
        await engine.converse(said("你好", user=1, group=None), outbox)
    ).outcome is Outcome.REPLIED
    # The next day in MEMORY_TIMEZONE the group is answered again.
    tomorrow = now + timedelta(days=1)
    again = await engine.converse(said("早上好", user=1, group=100, at=tomorrow), outbox)
    assert again.outcome is Outcome.REPLIED


async def test_the_memory_block_is_smaller_with_tools_and_the_debugger_sees_the_same(open_chat):
    tokens = {}
    for mode in ("off", "auto"):
        engine = await open_chat(chat_tools=mode, memory_max_tokens=400)
        memory = engine.memory  # type: ignore[attr-defined]
        then = datetime.now(timezone.utc) - timedelta(days=2)
        for n in range(30):
            text = f"关于旅行的第{n}件事：我们去了很多地方，看了山和海，吃了很多好吃的东西。"
            await memory.parts.writer.add_turn(
                said(text, user=1, group=None, at=then + timedelta(minutes=n))
            )
        turn = said("旅行的事你还记得吗", user=1, group=None, at=datetime.now(timezone.utc))
        tail = await engine.preparer.read_tail(turn, datetime.now(timezone.utc))
        prepared = await engine.preparer.prepare(
            turn, tail, datetime.now(timezone.utc), touch=False
        )
        assert prepared.context is not None
        tokens[mode] = prepared.context.tokens
    assert 300 < tokens["off"] <= 400
    assert 0 < tokens["auto"] <= 200


async def test_chat_tools_on_keeps_offering_them_after_a_refusal(open_chat, llm):
    engine = await open_chat(chat_tools="on")

    def respond(body: dict[str, Any]) -> Reply:
        if "tools" in body:
            return Reply(status=400, error="deepseek-reasoner does not support Function Calling")
        return Reply(content="好")

    llm.responder = respond
    for text in ("一", "二"):
        result = await engine.converse(said(text, user=1, group=None), Outbox())
        assert result.outcome is Outcome.REPLIED
    assert ["tools" in b for b in llm.bodies] == [True, False, True, False]
