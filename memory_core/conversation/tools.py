"""Memory as tools the chat model calls: ``search_memory`` and ``remember``.

With CHAT_TOOLS on (or auto, until the endpoint refuses tools once: ``providers.llm``) the
model may, before it answers, search the memory of the chat the message came from or keep a
note about the person speaking. Both are bound to that chat (:class:`ChatScope`): the model
names neither a user nor a group, so it cannot reach another chat; ``search_memory`` is
``Retriever.recall`` with the message's own user and group, so a shared group is searched
exactly as recall searches it (``recall.sharing``).

``search_memory`` lists only what ``/recall`` would show (``recall.listing.relevant_windows``:
a line that mentions the query or is close to it in meaning), and says ``没有找到`` when nothing
is: a list of unrelated lines reads to the model as an answer.

The bounds (``answer_with_tools``): at most ``MAX_TOOL_ROUNDS`` rounds of calls, then one last
call that must answer in text (``tool_choice: none``, the tools still in the request so the
prompt's prefix is unchanged). A model that still asks for tools there is asked once more
without any, the tools' results written into the message; if that fails too, the reply is a
short summary of what the tools found (``summary_of``), never an apology for answers in hand.
At most ``MAX_CALLS_PER_ROUND`` calls run in a round; each tool call gets ``TOOL_SECONDS`` at
most; the whole exchange runs inside the caller's reply deadline. A tool that fails, is too
slow, is unknown or gets arguments it cannot use answers the model with a tool message saying
so, never an exception.

``TOOL_DEFINITIONS`` is a constant: the same bytes in every request of every chat, which is
what lets a provider's prefix cache keep them with the system prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from ..distill.memory import ExtractedMemory, SaveOutcome, flatten
from ..errors import LLMError, MemoryCoreError
from ..lang.text import scrub
from ..lang.timefmt import format_absolute
from ..models import MemoryTurn, RecallResult, Role
from ..providers.chat_turn import ModelTurn, ToolCall
from ..providers.llm import ToolChatModel, strip_reasoning
from ..recall.listing import Relevance, relevant_windows
from ..recall.options import RecallOptions
from ..settings import MemorySettings
from ..storage.database_handle import Database
from ..storage.opt_outs import PgOptOutStore
from .preparation import JUST_BEFORE

log = logging.getLogger(__name__)

MAX_TOOL_ROUNDS = 2
# Calls run in one round; the rest are answered "not run" (every call needs its tool message).
MAX_CALLS_PER_ROUND = 3
TOOL_SECONDS = 5.0
SEARCH_TOP_N = 4
SEARCH_MAX_CHARS = 1500
REMEMBER_MAX_CHARS = 300
# A note the model keeps is as sure as what the person said plainly.
REMEMBER_CONFIDENCE = 0.9

_USER_WORDS = frozenset({"user", "me", "我", "用户", "对方"})
_BOT_WORDS = frozenset({"assistant", "bot", "你", "机器人", "助手"})

TOOL_DEFINITIONS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "search_memory",
            "description": (
                "在本聊天的历史对话中搜索与问题相关的内容（只含本聊天），返回带时间的原话。"
                "当前消息附带的记忆不够时使用。"
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "要找的内容，可含时间词"},
                    "since": {
                        "type": "string",
                        "description": "只找此时间之后的，如 2026-11-30 或 2026-11-30 18:00",
                    },
                    "until": {"type": "string", "description": "只找此时间之前的，格式同上"},
                    "speaker": {
                        "type": "string",
                        "description": (
                            "只找某人说的：user（对方）、assistant（你自己）或群成员昵称"
                        ),
                    },
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "remember",
            "description": (
                "把关于当前说话人的一条事实、偏好或约定长期记下：一句话，"
                "以“用户”称呼他，如“用户对花生过敏”。"
            ),
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "要记住的一句话"}},
                "required": ["text"],
            },
        },
    },
)


@dataclass(frozen=True)
class ChatScope:
    """The chat one message came from, to which its tools are bound: who speaks, where, and
    the time of the message (the search sees nothing from it on: not the message itself)."""

    user_id: int
    group_id: int | None
    before: datetime
    source_turn_id: int | None = None  # the stored message, the source of a remembered note


class ToolRecall(Protocol):
    """What ``search_memory`` reads (``Retriever`` is)."""

    @property
    def tz(self) -> ZoneInfo: ...

    async def recall(
        self, user_id: int, query: str, group_id: int | None = None, options: RecallOptions = ...
    ) -> RecallResult: ...


class NoteSaver(Protocol):
    """What ``remember`` writes through (``MemoryKeeper`` is one)."""

    async def save(
        self,
        items: Sequence[ExtractedMemory],
        user_id: int,
        group_id: int | None = None,
        *,
        source_turn_ids: Sequence[int] = (),
        stated_at: datetime | None = None,
    ) -> SaveOutcome: ...


class OptOuts(Protocol):
    """Who asked not to be remembered (``storage.opt_outs.PgOptOutStore``)."""

    async def opted_out(self, user_id: int, group_id: int | None) -> bool: ...


class StoredOptOuts:
    """``OptOuts`` read from the database at each call (the pool may come and go)."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def opted_out(self, user_id: int, group_id: int | None) -> bool:
        return await self._database.store(PgOptOutStore).opted_out(user_id, group_id)


class BadArguments(ValueError):
    """The model's arguments cannot be used; the text goes back to it as the tool's answer."""


class MemoryTools:
    """Runs the model's tool calls against the memory, each bound to a ``ChatScope``."""

    def __init__(
        self,
        *,
        recall: ToolRecall,
        notes: NoteSaver,
        opt_outs: OptOuts,
        settings: MemorySettings,
        bot_name: str | None = None,
        tool_seconds: float = TOOL_SECONDS,
    ) -> None:
        """``settings``: the relevance floor and time words ``/recall`` uses (``Relevance``)."""
        self._recall = recall
        self._settings = settings
        self._notes = notes
        self._opt_outs = opt_outs
        self._tz = recall.tz
        self._bot_name = bot_name
        self._tool_seconds = tool_seconds

    async def run(self, call: ToolCall, scope: ChatScope) -> str:
        """The tool's answer to ``call`` as text for a tool message; never raises (but for
        cancellation): the arguments come from the model, so anything they break in is an
        answer to it, not a failed reply."""
        try:
            arguments = _arguments(call.arguments)
            if call.name == "search_memory":
                work = self._search(arguments, scope)
            elif call.name == "remember":
                work = self._remember(arguments, scope)
            else:
                return f"错误：没有名为 {call.name!r} 的工具，可用的是 search_memory 和 remember。"
            return await asyncio.wait_for(work, self._tool_seconds)
        except BadArguments as exc:
            return f"错误：参数不对（{exc}），请改正后再试，或直接回答。"
        except asyncio.TimeoutError:
            log.warning("tool %s took longer than %gs", call.name, self._tool_seconds)
            return "错误：记忆查询超时，请不用它直接回答。"
        except MemoryCoreError as exc:
            log.warning("tool %s failed: %s", call.name, exc)
            return "错误：记忆暂时不可用，请不用它直接回答。"
        except Exception as exc:  # the model's input reached code that did not expect it
            # One line: it is the model's mistake, answered; not the bot's failure. The class
            # only: an error's text can carry the arguments, i.e. what a person asked about.
            log.warning(
                "tool %s failed on the model's arguments: %s", call.name, type(exc).__name__
            )
            return "错误：这次工具调用失败了，请不用它直接回答。"

    async def _search(self, arguments: dict[str, Any], scope: ChatScope) -> str:
        query = _text(arguments, "query", required=True)
        since = self._moment(arguments, "since", end_of_day=False)
        until = self._moment(arguments, "until", end_of_day=True)
        speaker = _text(arguments, "speaker", required=False)
        # Recall sees turns up to ``now`` inclusive: the message itself (stored meanwhile) not.
        latest = scope.before - JUST_BEFORE
        now = latest if until is None else min(until, latest)
        if since is not None and since >= now:
            raise BadArguments("since 要早于 until 和当前消息")
        roles: tuple[Role, ...] | None = None
        name: str | None = None
        if speaker:
            folded = speaker.strip().lower()
            if folded in _USER_WORDS:
                roles = ("user",)
            elif folded in _BOT_WORDS or speaker == self._bot_name:
                roles = ("assistant",)
            else:
                roles, name = ("user",), speaker.strip()
        # A member named by nickname: more anchors are asked for, then theirs kept.
        top_n = SEARCH_TOP_N * 3 if name else SEARCH_TOP_N
        options = RecallOptions(top_n=top_n, now=now, roles=roles, since=since)
        found = await self._recall.recall(scope.user_id, query, scope.group_id, options)
        windows = found.windows
        if name is not None:
            windows = tuple(w for w in windows if _said_by(w, name))[:SEARCH_TOP_N]
        relevance = Relevance.of(query, self._settings, now)
        if relevance.words or relevance.span is not None or (since is None and until is None):
            # Only what /recall would list; a query of nothing but a range the model gave
            # (since/until with "聊了什么") keeps that range's turns.
            windows = relevant_windows(windows, relevance)
        turns = sorted({t.id: t for w in windows for t in w.turns}.values(), key=_time_order)
        # Windows widen each anchor by its neighbours; those outside the asked time go.
        turns = [
            t for t in turns if t.created_at <= now and (since is None or t.created_at >= since)
        ]
        if not turns:
            return "没有找到相关的记忆。"
        return self._listing(turns)

    def _listing(self, turns: Sequence[MemoryTurn]) -> str:
        lines = [f"找到 {len(turns)} 条（时间为 {self._tz.key}）："]
        used = len(lines[0])
        for turn in turns:
            who = (self._bot_name or "你") if turn.role == "assistant" else turn.sender_name
            who = who or "用户"
            line = f"[{format_absolute(turn.created_at, self._tz)}] {who}: {flatten(turn.content)}"
            if used + len(line) > SEARCH_MAX_CHARS:
                lines.append("……（其余略去）")
                break
            lines.append(line)
            used += len(line) + 1
        return "\n".join(lines)

    async def _remember(self, arguments: dict[str, Any], scope: ChatScope) -> str:
        text = flatten(_text(arguments, "text", required=True))
        if len(text) > REMEMBER_MAX_CHARS:
            raise BadArguments(f"text 最多 {REMEMBER_MAX_CHARS} 字")
        if await self._opt_outs.opted_out(scope.user_id, scope.group_id):
            return "没有记下：这位用户在本聊天关闭了记忆。请不要再尝试记住他的事。"
        outcome = await self._notes.save(
            [ExtractedMemory(kind="facts", content=text, score=REMEMBER_CONFIDENCE)],
            scope.user_id,
            scope.group_id,
            source_turn_ids=(scope.source_turn_id,) if scope.source_turn_id is not None else (),
            stated_at=scope.before,
        )
        if outcome.discarded:
            return "没有记下：这条消息刚被撤回或删除。"
        if outcome.added:
            return "已记下。"
        return "已记下（之前就记得类似的内容）。"

    def _moment(self, arguments: dict[str, Any], key: str, *, end_of_day: bool) -> datetime | None:
        """A time the model gave: a date (its start, or the next day's start for ``until``) or
        a date and time, on the wall clock of MEMORY_TIMEZONE unless it names an offset."""
        value = _text(arguments, key, required=False)
        if not value:
            return None
        value = value.strip().replace("/", "-")
        try:
            day = date.fromisoformat(value)
        except ValueError:
            pass
        else:
            start = datetime.combine(day, time(), self._tz)
            return start + timedelta(days=1) if end_of_day else start
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise BadArguments(f"{key} 不是日期或时间：{value[:40]!r}") from exc
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=self._tz)


def _time_order(turn: MemoryTurn) -> tuple[datetime, int]:
    return (turn.created_at, turn.id)


def _said_by(window: Any, name: str) -> bool:
    anchor = next((t for t in window.turns if t.id == window.anchor_id), None)
    return anchor is not None and (anchor.sender_name == name or str(anchor.user_id) == name)


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError as exc:
        raise BadArguments("arguments 不是有效的 JSON") from exc
    if not isinstance(value, dict):
        raise BadArguments("arguments 应是一个 JSON 对象")
    return value


def _text(arguments: Mapping[str, Any], key: str, *, required: bool) -> str:
    value = arguments.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise BadArguments(f"缺少 {key}")
        return ""
    if not isinstance(value, str):
        raise BadArguments(f"{key} 应是字符串")
    return scrub(value)


@dataclass(frozen=True)
class ToolAnswer:
    """The reply text and what it took: model calls made, tool calls run, tokens reported."""

    text: str
    model_calls: int
    tool_calls: int
    tokens: int


async def answer_with_tools(
    model: ToolChatModel,
    messages: Sequence[Mapping[str, Any]],
    tools: MemoryTools | None,
    scope: ChatScope,
    *,
    max_rounds: int = MAX_TOOL_ROUNDS,
) -> ToolAnswer:
    """The model's answer to ``messages``, letting it call ``tools`` for at most
    ``max_rounds`` rounds (``None`` or a model that does not offer tools: one plain call).
    ``LLMError`` when the model fails or ends with no text; the caller bounds the time."""
    offered = tools is not None and model.offers_tools
    history: list[Mapping[str, Any]] = list(messages)
    tool_calls = tokens = 0
    results: list[str] = []  # what the tools answered, in order
    for round_number in range(max_rounds + 1):
        last = round_number == max_rounds
        model_calls = round_number + 1
        turn: ModelTurn = await model.respond(
            history, tools=TOOL_DEFINITIONS if offered else None, final=last
        )
        tokens += turn.tokens
        text = strip_reasoning(turn.text)
        if not turn.tool_calls or not offered or last or tools is None:
            if not text and last and results:
                # Asked to answer, it asked for tools again: it gets what they gave, plainly.
                return await _answer_from_results(
                    model, messages, results, ToolAnswer("", model_calls, tool_calls, tokens)
                )
            if not text:
                raise LLMError(
                    f"chat model gave no text after {model_calls} call(s) "
                    f"(finish_reason={turn.finish_reason})"
                )
            return ToolAnswer(text, model_calls, tool_calls, tokens)
        history.append(
            {
                "role": "assistant",
                "content": turn.text or None,
                "tool_calls": [call.as_message_part() for call in turn.tool_calls],
            }
        )
        for index, call in enumerate(turn.tool_calls):
            if index < MAX_CALLS_PER_ROUND:
                tool_calls += 1
                result = await tools.run(call, scope)
            else:
                result = f"未执行：每轮最多调用 {MAX_CALLS_PER_ROUND} 次工具。"
            results.append(result)
            history.append({"role": "tool", "tool_call_id": call.id, "content": result})
        offered = model.offers_tools  # a refusal in this round turned them off
    raise AssertionError("unreachable")  # pragma: no cover


RESULTS_NOTE = (
    "\n\n（以下是你刚才查记忆得到的结果，不是对方说的话。请据此直接回答上面的消息，不要再查。）\n"
)
SUMMARY_MAX_CHARS = 600


async def _answer_from_results(
    model: ToolChatModel,
    messages: Sequence[Mapping[str, Any]],
    results: Sequence[str],
    spent: ToolAnswer,
) -> ToolAnswer:
    """One more call without tools, the tools' ``results`` written after the message (no tool
    messages: a request without tools may not carry them); ``summary_of`` the results when
    that call fails or gives no text. ``spent``: the calls and tokens so far."""
    calls = spent.model_calls + 1
    try:
        turn = await model.respond(_with_results(messages, results), tools=None)
    except LLMError as exc:
        log.warning("the chat model failed on the tools' results; answering with them: %s", exc)
        return dataclasses.replace(spent, text=summary_of(results), model_calls=calls)
    text = strip_reasoning(turn.text)
    if not text:
        text = summary_of(results)
    return ToolAnswer(text, calls, spent.tool_calls, spent.tokens + turn.tokens)


def _with_results(
    messages: Sequence[Mapping[str, Any]], results: Sequence[str]
) -> list[Mapping[str, Any]]:
    """``messages`` with the tools' results appended to the last one (the person's message),
    so the roles still alternate as every provider wants."""
    note = RESULTS_NOTE + "\n\n".join(results)
    *before, last = messages
    content = last.get("content")
    if isinstance(content, str):
        return [*before, {**last, "content": content + note}]
    if isinstance(content, list):
        return [*before, {**last, "content": [*content, {"type": "text", "text": note}]}]
    return [*messages, {"role": "user", "content": note.strip()}]


def summary_of(results: Sequence[str]) -> str:
    """A short Chinese reply from the tools' results alone: the lines ``search_memory`` found
    (at most ``SUMMARY_MAX_CHARS``), or that a note was kept, or that nothing was found."""
    found: list[str] = []
    for result in results:
        found.extend(line for line in result.splitlines() if line.startswith("["))
    found = list(dict.fromkeys(found))
    if found:
        lines = ["我翻了一下记忆，找到这些："]
        used = len(lines[0])
        for line in found:
            if used + len(line) > SUMMARY_MAX_CHARS:
                break
            lines.append(line)
            used += len(line) + 1
        return "\n".join(lines)
    if any(result.startswith("已记下") for result in results):
        return "好的，我记下了。"
    return "我翻了一下记忆，没有找到相关的内容。"
