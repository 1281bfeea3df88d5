"""Replies that show where a memory came from (``conversation.citation``): on the embedded
PostgreSQL, with the chat model a stand-in on loopback HTTP that cites the numbered memory line
holding what it was asked about, as a model following the system prompt's rule would."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit

import asyncpg
import pytest

from memory_core.conversation.citation import CITE_RULE, Citation, read_marks
from memory_core.conversation.engine import ConversationEngine, Delivery, Outcome
from memory_core.models import ForgetScope, RecalledMessage, TurnInput
from memory_core.providers.llm import build_openai_model
from memory_core.settings import ModelEndpoint
from tests.fakes import Answer, ScriptedLLM
from tests.tcp_proxy import SwitchableProxy, unix_socket_of

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
USER, OTHER, GROUP, SELF = 1, 2, 700, 10001
SECRET = "我的工位密码是8812"
SECRET_ID = 501
QUESTION = "我的工位密码是多少"
ANSWER = "你的工位密码是8812。"
NUMBERED = re.compile(r"^#(\d+) \[", re.MULTILINE)


def said(
    text: str,
    hours_ago: float,
    *,
    user: int = USER,
    group: int | None = None,
    role: str = "user",
    message_id: int | None = None,
) -> TurnInput:
    return TurnInput(
        user_id=user,
        group_id=group,
        self_id=SELF,
        role=role,  # type: ignore[arg-type]
        content=text,
        sender_name=("小明" if user == USER else "小红") if role == "user" else "小诗",
        message_id=message_id,
        created_at=NOW - timedelta(hours=hours_ago),
    )


def line_number(messages: list[dict[str, str]], needle: str) -> int | None:
    """The number the last message's memory block gives the line holding ``needle``."""
    for line in messages[-1]["content"].splitlines():
        found = NUMBERED.match(line)
        if found and needle in line:
            return int(found.group(1))
    return None


def citing(needle: str, *, held: threading.Event | None = None) -> Callable[..., Answer]:
    """A model that answers and names the line holding ``needle`` in the rule's marker."""

    def respond(messages: list[dict[str, str]]) -> Answer:
        number = line_number(messages, needle)
        marker = f"\n【引用#{number}】" if number is not None else ""
        return Answer(ANSWER + marker, held=held)

    return respond


class Outbox:
    """The ``send`` callback: what was sent and what it was told to quote."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Citation | None]] = []

    async def __call__(self, text: str, *, cited: Citation | None = None) -> Delivery:
        self.sent.append((text, cited))
        return Delivery(text=text, message_id=9000 + len(self.sent))


class Chat:
    def __init__(self, memory, server: ScriptedLLM) -> None:
        endpoint = ModelEndpoint("LLM", server.base_url, None, "stub-chat", 30.0)
        self.model = build_openai_model(endpoint, max_retries=0, max_tokens=None, temperature=None)
        self.engine = ConversationEngine(
            parts=memory.parts,
            chat_model=self.model,
            bot_name="小诗",
            clock=lambda: NOW,
        )
        self.memory = memory
        self.server = server
        self.outbox = Outbox()

    async def ask(self, text: str = QUESTION, *, user: int = USER, group: int | None = None):
        turn = said(text, 0, user=user, group=group, message_id=900 + len(self.outbox.sent))
        return await self.engine.converse(turn, self.outbox)


@pytest.fixture
async def chat_for(memory_factory):
    opened: list[Chat] = []

    async def make(responder: Callable[..., Answer], **settings) -> Chat:
        memory = await memory_factory(**settings)
        await memory.parts.writer.add_turn(said("今天天气不错", 50, message_id=500))
        await memory.parts.writer.add_turn(said(SECRET, 48, message_id=SECRET_ID))
        await memory.parts.writer.add_turn(
            said("好的，记住啦", 48, role="assistant", message_id=502)
        )
        chat = Chat(memory, ScriptedLLM(responder))
        opened.append(chat)
        return chat

    yield make
    for chat in opened:
        await chat.model.aclose()
        chat.server.close()


async def test_a_reply_resting_on_a_memory_quotes_that_message_and_the_marker_never_leaves(
    chat_for,
):
    chat = await chat_for(citing(SECRET))
    result = await chat.ask()
    assert result.outcome is Outcome.REPLIED
    assert result.cited is not None and result.cited.message_id == SECRET_ID
    assert result.cited.turn.content == SECRET
    [(text, cited)] = chat.outbox.sent
    assert (text, cited) == (ANSWER, result.cited)
    # Neither the person nor the memory (the stored reply) ever holds the marker.
    assert result.reply_turn is not None and result.reply_turn.content == ANSWER
    # The rule is in the system prompt, the numbers only in the last message.
    [prompt] = chat.server.requests
    assert CITE_RULE in prompt[0]["content"] and not NUMBERED.search(prompt[0]["content"])
    assert NUMBERED.search(prompt[-1]["content"])


async def test_nothing_is_quoted_when_the_model_cites_nothing(chat_for):
    chat = await chat_for(lambda messages: Answer(ANSWER))
    result = await chat.ask()
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]


async def test_a_number_the_prompt_did_not_show_is_not_quoted_and_its_marker_goes(chat_for):
    chat = await chat_for(lambda messages: Answer(f"{ANSWER}\n【引用#97】"))
    result = await chat.ask()
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]


async def test_a_memory_forgotten_while_the_model_thinks_is_not_quoted(chat_for):
    held = threading.Event()
    chat = await chat_for(citing(SECRET, held=held))
    asking = asyncio.ensure_future(chat.ask())
    for _ in range(600):  # bounded: until the prompt (showing the memory) is with the model
        if chat.server.requests:
            break
        await asyncio.sleep(0.1)
    assert line_number(chat.server.requests[0], SECRET) is not None
    # A delete that does not wait for the session (the console, /忘记我, an operator's /forget).
    forgotten = await chat.memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=SELF, message_id=SECRET_ID, user_id=USER)
    )
    assert forgotten is not None and forgotten.dialogues >= 1
    held.set()
    result = await asking
    assert result.outcome is Outcome.REPLIED
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]


async def test_a_message_being_recalled_is_not_quoted_before_its_delete_comes(chat_for):
    chat = await chat_for(citing(SECRET))
    recalled = RecalledMessage(self_id=SELF, message_id=SECRET_ID, user_id=USER)
    with chat.engine.citations.retracting(recalled):  # the 撤回 waits for the session
        result = await chat.ask()
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]
    again = await chat.ask("再说一次我的工位密码")
    assert again.cited is not None and again.cited.message_id == SECRET_ID


async def test_a_turn_being_forgotten_is_not_quoted_before_its_delete_comes(chat_for):
    chat = await chat_for(citing("我的车牌是沪A12345"))
    stored = await chat.memory.parts.writer.add_turn(said("我的车牌是沪A12345", 30, message_id=503))
    assert stored.turn is not None
    with chat.engine.citations.forgetting([stored.turn.id]):  # a /忘记 waits for the session
        result = await chat.ask("我的车牌是多少")
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]
    again = await chat.ask("再说一次我的车牌")
    assert again.cited is not None and again.cited.message_id == 503


async def test_a_turn_without_a_qq_message_id_is_not_quoted(chat_for):
    chat = await chat_for(citing("我的车牌是沪A12345"))
    # As MCP's remember or an import stores it: no QQ message to quote.
    await chat.memory.parts.writer.add_turn(said("我的车牌是沪A12345", 30))
    result = await chat.ask("我的车牌是多少")
    assert line_number(chat.server.requests[-1], "沪A12345") is not None
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]


async def test_in_a_group_nothing_is_numbered_or_asked_for_unless_set(chat_for):
    chat = await chat_for(citing("我在群里的工位是B12"))
    await chat.memory.parts.writer.add_turn(
        said("我在群里的工位是B12", 30, group=GROUP, message_id=601)
    )
    result = await chat.ask("我的工位在哪", group=GROUP)
    [prompt] = chat.server.requests
    assert CITE_RULE not in prompt[0]["content"]
    assert "我在群里的工位是B12" in prompt[-1]["content"]
    assert not NUMBERED.search(prompt[-1]["content"])
    assert result.cited is None


async def test_in_a_group_set_to_cite_the_members_own_message_is_quoted(chat_for):
    chat = await chat_for(citing("我在群里的工位是B12"), chat_cite_in_groups=True)
    await chat.memory.parts.writer.add_turn(
        said("我在群里的工位是B12", 30, group=GROUP, message_id=601)
    )
    result = await chat.ask("我的工位在哪", group=GROUP)
    assert CITE_RULE in chat.server.requests[0][0]["content"]
    assert result.cited is not None and result.cited.message_id == 601


async def test_another_members_line_in_a_shared_group_is_never_quoted(chat_for):
    chat = await chat_for(
        citing("小红的工位是C7"), chat_cite_in_groups=True, memory_shared_groups=[GROUP]
    )
    await chat.memory.parts.writer.add_turn(
        said("小红的工位是C7", 30, user=OTHER, group=GROUP, message_id=602)
    )
    result = await chat.ask("小红的工位在哪", group=GROUP)
    # The other member's line is in the prompt, numbered, and cited: still not quoted.
    assert line_number(chat.server.requests[0], "小红的工位是C7") is not None
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]


@pytest.mark.parametrize(
    ("answer", "text", "numbers"),
    [
        ("是8812。\n【引用#2】", "是8812。", (2,)),
        ("是8812。【引用#2#5】", "是8812。", (2, 5)),
        ("是8812 [引用: 2, 5]", "是8812", (2, 5)),
        ("是8812\n【引用＃3、＃1】", "是8812", (3, 1)),
        ("是8812\n【记忆 #3", "是8812", (3,)),
        ("（来源：#4）你说过", "你说过", (4,)),
        ("你说过，引用#7", "你说过，", (7,)),
        ("记得，是8812\n#3 #1", "记得，是8812", (3, 1)),
        ("好的\n【引用】", "好的", ()),
        ("【引用#2】", "", (2,)),
        # Prose that only mentions the words stays as written.
        ("你好（引用鲁迅的话）", "你好（引用鲁迅的话）", ()),
        ("我的记忆里有3条", "我的记忆里有3条", ()),
        ("（记忆 20 年前的事）", "（记忆 20 年前的事）", ()),
        ("第#1名是你", "第#1名是你", ()),
    ],
)
def test_markers_strict_or_malformed_are_taken_out_and_prose_stays(answer, text, numbers):
    marked = read_marks(answer)
    assert (marked.text, marked.numbers) == (text, numbers)


# A whole-chat /忘记 (a group scope) and a person's /忘记我 (a user scope) do not wait for the
# sessions they take: a reply under way in one of them must still not quote what they delete.
GROUP_LINE = "我在群里的工位是B12"


async def model_has_the_prompt(chat: Chat) -> None:
    for _ in range(600):  # bounded: until the prompt (showing the memory) is with the model
        if chat.server.requests:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the model never got the prompt")


async def waiting_on_a_lock(dsn: str, statement: str) -> None:
    """Until a session of the database waits for a lock running ``statement``."""
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(600):  # bounded wait for the forget to reach its DELETE
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE $1",
                f"{statement}%",
            )
            if waiting:
                return
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
    raise AssertionError(f"no {statement} ever waited for the lock")


async def test_a_whole_chat_forget_in_flight_is_not_quoted_by_a_reply_under_way(
    chat_for, fresh_dsn
):
    held = threading.Event()
    chat = await chat_for(citing(GROUP_LINE, held=held), chat_cite_in_groups=True)
    await chat.memory.parts.writer.add_turn(said(GROUP_LINE, 30, group=GROUP, message_id=601))
    asking = asyncio.ensure_future(chat.ask("我的工位在哪", group=GROUP))
    await model_has_the_prompt(chat)
    assert line_number(chat.server.requests[0], GROUP_LINE) is not None
    # Another transaction holds the turn's row: the confirmed forget stops in its DELETE,
    # in flight (its delete not committed, the turn still readable), while the model answers.
    blocker = await asyncpg.connect(fresh_dsn)
    try:
        locking = blocker.transaction()
        await locking.start()
        await blocker.execute("SELECT id FROM dialogues WHERE qq_message_id = 601 FOR UPDATE")
        forgetting = asyncio.ensure_future(
            chat.memory.parts.forgetting.forget(ForgetScope(group_id=GROUP))
        )
        await waiting_on_a_lock(fresh_dsn, "DELETE FROM dialogues")
        held.set()
        result = await asking
        await locking.rollback()
    finally:
        await blocker.close()
    forgotten = await forgetting
    assert result.outcome is Outcome.REPLIED
    assert result.cited is None and chat.outbox.sent == [(ANSWER, None)]
    assert forgotten.dialogues >= 1


async def test_a_persons_forget_confirmed_while_a_quote_is_sent_deletes_after_it(chat_for):
    chat = await chat_for(citing(GROUP_LINE), chat_cite_in_groups=True)
    await chat.memory.parts.writer.add_turn(said(GROUP_LINE, 30, group=GROUP, message_id=601))
    sending, may_send = asyncio.Event(), asyncio.Event()
    outbox = chat.outbox

    async def slow_send(text: str, *, cited: Citation | None = None) -> Delivery:
        sending.set()
        await may_send.wait()
        return await outbox(text, cited=cited)

    turn = said("我的工位在哪", 0, group=GROUP, message_id=990)
    asking = asyncio.ensure_future(chat.engine.converse(turn, slow_send))
    await asyncio.wait_for(sending.wait(), 300)  # a bound against a stuck test only
    # /忘记我 from the person's private chat: it holds that session, not the group's.
    forgetting = asyncio.ensure_future(
        chat.memory.parts.forgetting.forget(ForgetScope(user_id=USER))
    )
    # Given seconds to run ahead of the send (it needs milliseconds), it waits for the send.
    # (A bound on how long the test looks, not a timing the code must meet.)
    await asyncio.wait({forgetting}, timeout=3)
    async with chat.memory.parts.database.pool.acquire() as conn:
        kept = await conn.fetchval("SELECT count(*) FROM dialogues WHERE qq_message_id = 601")
    assert kept == 1 and not forgetting.done()  # the quote on its way went first
    may_send.set()
    result = await asking
    assert result.cited is not None and result.cited.message_id == 601
    assert (await forgetting).dialogues >= 1
    again = await chat.ask("再说一次我的工位", group=GROUP)
    assert again.cited is None


async def test_a_forget_deferred_by_an_outage_is_not_quoted_before_its_flush(chat_for, fresh_dsn):
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))
    await proxy.start()
    try:
        dsn = proxy.dsn(urlsplit(fresh_dsn).path.lstrip("/"))
        chat = await chat_for(citing(SECRET), memory_dsn=dsn)
        await proxy.stop()
        forgotten = await chat.memory.parts.forgetting.forget(ForgetScope(user_id=USER))
        assert forgotten.deferred
        await proxy.start()
        # Back before any flush: the turn is still stored, and still not quoted.
        result = await chat.ask()
        assert result.outcome is Outcome.REPLIED
        assert result.cited is None and chat.outbox.sent[-1] == (ANSWER, None)
        await chat.memory.parts.forgetting.flush_spool()
        async with chat.memory.parts.database.pool.acquire() as conn:
            assert (
                await conn.fetchval("SELECT count(*) FROM dialogues WHERE content = $1", SECRET)
                == 0
            )
    finally:
        await proxy.stop()


async def test_a_forget_deferred_before_a_restart_is_not_quoted_before_its_flush(
    chat_for, fresh_dsn
):
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))
    await proxy.start()
    try:
        dsn = proxy.dsn(urlsplit(fresh_dsn).path.lstrip("/"))
        chat = await chat_for(citing(SECRET), memory_dsn=dsn)
        await proxy.stop()
        assert (await chat.memory.parts.forgetting.forget(ForgetScope(user_id=USER))).deferred
        await proxy.start()
        # The bot started again on the same data directory; the request waits in its spool.
        restarted = await chat_for(citing(SECRET), memory_dsn=dsn)
        assert restarted.memory.parts.spool.waiting_forgets() == [ForgetScope(user_id=USER)]
        result = await restarted.ask()
        assert result.outcome is Outcome.REPLIED
        assert line_number(restarted.server.requests[0], SECRET) is not None  # still stored
        assert result.cited is None and restarted.outbox.sent == [(ANSWER, None)]
    finally:
        await proxy.stop()
