"""Commands: /帮助 (help), /forget (忘记), /memstat (记忆统计), /recall (回忆), /remember (记住).

Each runs before the chat matcher and blocks it (``command_dispatch``). Anyone may act on
their own session; touching another user, a whole group or everything takes a superuser, and
others get a clear refusal.
Forgetting names what will go and asks for a "确认" within ``CONFIRM_TIMEOUT`` seconds
(``handle_confirm`` says what counts as one). In a group only what is said to the bot answers
it: what members say to each other meanwhile gets no word about it (one quiet hint aside, for
the asker's unaddressed 确认).
"""

import dataclasses
import re
import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from nonebot import on_message
from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    Bot,
    Message,
    MessageEvent,
    MessageSegment,
    NetworkError,
)
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.adapters.onebot.v11.permission import GROUP_ADMIN, GROUP_OWNER
from nonebot.log import logger
from nonebot.matcher import Matcher
from nonebot.permission import SUPERUSER
from nonebot.rule import Rule
from nonebot.typing import T_State

from memory_core import (
    Connection,
    ForgetScope,
    Forgotten,
    MemoryCoreError,
    MemoryTurn,
    RecallListing,
    TurnInput,
    chat_calls_zh,
    connection_of,
    dashboard_zh,
    list_recall,
    relative_time_zh,
    split_reply,
    unavailable_dashboard_zh,
)

from .bot_accounts import serving_bot
from .command_dispatch import handler_for, plugin_command
from .command_help import help_text
from .intake import accepts, group_id_of, group_names, segments_of, sender_name
from .messaging import ANSWER_MESSAGES, at_most, quoted, send_answer, send_text
from .runtime import Runtime, RuntimeDep, get_runtime
from .segments import flatten_segments

CONFIRM_PRIORITY = 1
# Seconds a /forget waits for its 确认 (a setting until 2026-12-07 that no operator changed):
# time to read what will go, short enough that a 确认 said much later is not taken for it.
CONFIRM_TIMEOUT = 60.0
# Only these, said alone (punctuation, spaces and full-width forms aside), confirm a delete;
# a "好" or "嗯" is too often said to someone else, or to something else, to delete on.
CONFIRM_WORDS = frozenset({"确认", "确定"})
CONFIRM_ALL = "确认删除全部"
"""What a /forget all (every chat of every person) takes: a plain 确认 is not enough."""
# These cancel alone or at the start of a sentence ("算了，我再想想"); any other message
# drops the question as well, but then goes on to be handled as what it is.
CANCEL_WORDS = frozenset(
    {"取消", "算了", "不", "不了", "不要", "不用", "别", "别删", "否", "n", "no"}
)
CANCEL_OPENINGS = ("取消", "算了", "不了", "不要", "不用", "别删", "先不", "还是不", "cancel")
# A late answer to a /forget still gets a word (that it expired) for this long.
LATE_ANSWER_GRACE = 600.0

DB_DOWN = "记忆数据库暂时连不上，请稍后再试。"
FORGET_TOO_LATE = "确认已超时，未删除任何记忆。如仍要删除，请重新发送 /forget。"
FORGET_CANCELLED = "已取消，记忆保持不变。"
FORGET_DROPPED = "已取消删除：没有收到“{yes}”。"
FORGET_HINT_UNADDRESSED = "要删除的话请 @我 回复“{yes}”（或引用我的提问回复）。"
NOTHING_TO_CONFIRM = "现在没有待确认的删除。"
FORGET_DROPPED_ALL = f"已取消删除：删除全部要回复“{CONFIRM_ALL}”。如仍要删除，请重新发送命令。"
NOT_SUPERUSER = "只有超级用户可以{action}。"

FORGET_USAGE = (
    "用法：/forget（忘记）删除你在当前会话的记忆；"
    "超级用户可用 /forget user <QQ号>、/forget group <群号>、/forget all。"
)
RECALL_USAGE = (
    "用法：/recall <内容>（回忆）查看会被想起的记忆，加 --full 看完整上下文；"
    "超级用户可加 --user <QQ号>、--group <群号> 或 --private。"
)
REMEMBER_USAGE = "用法：/remember <内容>（记住）让我永久记住一条笔记。"


async def reply(bot: Bot, event: MessageEvent, runtime: Runtime, text: str) -> None:
    """A command's answer: at most two messages, quoting the command in a group (so the
    member who asked sees it is theirs)."""
    await send_answer(bot, event, text, max_chars=runtime.settings.chat_reply_max_chars)


async def is_superuser(bot: Bot, event: MessageEvent) -> bool:
    return bool(await SUPERUSER(bot, event))


async def chat_label(bot: Bot, group_id: int | None, runtime: Runtime) -> str:
    """How an answer names a chat: ``私聊``, ``群“周会群”`` (its name from the QQ client,
    cached), or ``群 30001`` when the name is unknown or looking it up is off."""
    if group_id is None:
        return "私聊"
    name = None
    if runtime.config.bot_resolve_group_names:
        name = await group_names.name(bot, group_id)
    return f"群“{name}”" if name else f"群 {group_id}"


def in_chat(label: str) -> str:
    """``在私聊中``, ``在群“周会群”中``, ``在群 30001 中`` (a space after a number)."""
    return f"在{label} 中" if label[-1:].isdigit() else f"在{label}中"


# ----------------------------------------------------------------------------- /帮助


@plugin_command("帮助", "help", "菜单", "记忆帮助")
async def handle_help(bot: Bot, event: MessageEvent, _args: Message, runtime: Runtime) -> None:
    """The commands this person may use here (``command_help``)."""
    in_group = group_id_of(event) is not None
    text = help_text(
        in_group=in_group,
        group_admin=in_group and bool(await (GROUP_ADMIN | GROUP_OWNER)(bot, event)),
        superuser=await is_superuser(bot, event),
    )
    await reply(bot, event, runtime, text)


# ----------------------------------------------------------------------------- confirmations


@dataclass
class PendingForget:
    """A /forget waiting for its "确认": of a ``scope`` (``Forgetting.forget``) or, for
    the self-service deletes, whatever ``action`` deletes. ``yes`` is the word it waits for
    (``确认``, which ``确定`` also answers, or ``CONFIRM_ALL``)."""

    scope: ForgetScope | None
    description: str
    deadline: float
    own_session: bool = False
    action: Callable[[Runtime], Awaitable[Forgotten]] | None = None
    yes: str = "确认"
    hinted: bool = False  # the asker's unaddressed 确认 got its one hint

    def confirmed_by(self, word: str) -> bool:
        """Whether ``word`` (``answer_word``) is the answer that deletes."""
        if self.yes == "确认":
            return word in CONFIRM_WORDS or word == CONFIRM_ALL
        return word == self.yes


@dataclass
class Confirmations:
    """Pending /forget requests, one per person per chat. Each is valid until its deadline;
    an answer that comes later, within ``LATE_ANSWER_GRACE``, is told it came too late."""

    pending: dict[tuple[Any, ...], PendingForget] = field(default_factory=dict)

    def ask(self, key: tuple[Any, ...], request: PendingForget) -> None:
        now = time.monotonic()
        self.pending = {
            k: p for k, p in self.pending.items() if p.deadline + LATE_ANSWER_GRACE > now
        }
        self.pending[key] = request

    def waiting(self, key: tuple[Any, ...]) -> bool:
        """A request in this chat that a message may still refer to (on time or late)."""
        request = self.pending.get(key)
        return request is not None and request.deadline + LATE_ANSWER_GRACE > time.monotonic()

    def on_time(self, key: tuple[Any, ...]) -> PendingForget | None:
        """The request in this chat, if it is still on time; it stays pending."""
        request = self.pending.get(key)
        return request if request is not None and request.deadline > time.monotonic() else None

    def take(self, key: tuple[Any, ...]) -> tuple[PendingForget | None, bool]:
        """The request and whether it is still on time; either way it is settled."""
        request = self.pending.pop(key, None)
        return request, request is not None and request.deadline > time.monotonic()


confirmations = Confirmations()


def confirmation_key(event: MessageEvent) -> tuple[Any, ...]:
    return (event.self_id, group_id_of(event), event.user_id)


def answer_word(text: str) -> str:
    """The message as one word: full-width forms folded (NFKC), lower case, and spaces,
    punctuation and symbols left out ("确认！" and " 确定。" are "确认" and "确定")."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return "".join(c for c in folded if unicodedata.category(c)[0] not in "PSZC")


def answer_kind(text: str) -> str | None:
    """``"yes"`` (a 确认 or 确定), ``"no"`` or ``None`` for the reply to a /forget question.
    ``确认删除全部`` is ``"all"``: only a /forget all takes it, and takes nothing less."""
    word = answer_word(text)
    if word in CONFIRM_WORDS:
        return "yes"
    if word == CONFIRM_ALL:
        return "all"
    if word in CANCEL_WORDS or word.startswith(CANCEL_OPENINGS):
        return "no"
    return None


def is_addressed(event: MessageEvent, state: T_State) -> bool:
    """Said to the bot: a private message, or in a group an @, a reply or its name first, or
    one of its commands."""
    return group_id_of(event) is None or event.is_tome() or handler_for(state) is not None


async def answers_pending_forget(event: MessageEvent, state: T_State) -> bool:
    """Rule: any message from someone whose /forget question is waiting in this chat, or a
    lone 确认 said to the bot, in a chat we serve (one checker, the cheap tests first: each
    checker of a rule is a task of its own). ``handle_confirm`` decides whether it answers
    the question."""
    if not (confirmations.waiting(confirmation_key(event)) or says_yes_to_the_bot(event, state)):
        return False
    return accepts(event, get_runtime())


def says_yes_to_the_bot(event: MessageEvent, state: T_State) -> bool:
    return is_addressed(event, state) and answer_kind(event.get_plaintext()) in ("yes", "all")


# Not blocking by default: a message that does not answer the question goes on to the
# commands and the chat (``handle_confirm`` stops it when it was the answer).
confirm = on_message(rule=Rule(answers_pending_forget), priority=CONFIRM_PRIORITY, block=False)


async def ask_to_confirm(
    bot: Bot,
    event: MessageEvent,
    runtime: Runtime,
    question: str,
    *,
    description: str,
    scope: ForgetScope | None = None,
    own_session: bool = False,
    action: Callable[[Runtime], Awaitable[Forgotten]] | None = None,
    yes: str = "确认",
    nothing: str | None = None,
) -> None:
    """Ask ``question`` and wait for ``yes`` (``handle_confirm``) before deleting: ``scope``
    through ``Forgetting.forget``, or whatever ``action`` deletes.

    A ``scope`` is counted first, and the question names what will go by kind and count;
    when nothing would, the person is told so (``nothing``, or that nothing is stored) and
    nothing is asked."""
    timeout = CONFIRM_TIMEOUT
    what = ""
    if scope is not None:
        counted = await count_scope(event, runtime, scope, own_session=own_session)
        if counted is not None and not counted.total:
            text = nothing or f"{description}没有可删除的记忆，什么也没有删。"
            await reply(bot, event, runtime, text)
            return
        what = (
            f"将删除{description}的记忆：{describe_forgotten(counted)}。"
            if counted is not None
            else f"将删除{description}的全部记忆（数据库暂时连不上，数不出条数）。"
        )
    confirmations.ask(
        confirmation_key(event),
        PendingForget(
            scope=scope,
            description=description,
            deadline=time.monotonic() + timeout,
            own_session=own_session,
            action=action,
            yes=yes,
        ),
    )
    how = "回复" if group_id_of(event) is None else " @我 或引用这条消息回复"
    await reply(
        bot,
        event,
        runtime,
        f"{question}{what}删除后无法恢复。请在 {timeout:g} 秒内{how}“{yes}”，回复“取消”放弃。",
    )


async def count_scope(
    event: MessageEvent, runtime: Runtime, scope: ForgetScope, *, own_session: bool
) -> Forgotten | None:
    """What forgetting ``scope`` would delete now; ``None`` when the database cannot say."""
    try:
        if own_session:
            # After this person's messages still being answered, as the forget itself waits.
            async with runtime.engine.session(event.user_id, group_id_of(event)):
                return await runtime.memory.parts.forgetting.count_forget(scope)
        return await runtime.memory.parts.forgetting.count_forget(scope)
    except MemoryCoreError as exc:
        logger.warning(f"counting a /forget failed: {exc}")
        return None


def describe_forgotten(forgotten: Forgotten) -> str:
    """``对话 12 条、事实 3 条、…`` naming only the kinds that had something (the bot's
    replies apart, where the delete counted them)."""
    parts = [
        (forgotten.dialogues - forgotten.bot_replies, "对话"),
        (forgotten.bot_replies, "机器人回复"),
        (forgotten.facts, "事实"),
        (forgotten.preferences, "偏好"),
        (forgotten.summaries, "摘要"),
        (forgotten.cached_answers, "缓存回答"),
    ]
    return "、".join(f"{name} {count} 条" for count, name in parts if count)


def answered(matcher: Matcher) -> None:
    """The message answered the question: no command or chat sees it."""
    matcher.block = True  # what ``Matcher.stop_propagation`` does (it is untyped)


@confirm.handle()
async def handle_confirm(
    bot: Bot, event: MessageEvent, state: T_State, matcher: Matcher, runtime: RuntimeDep
) -> None:
    """The next message said to the bot by someone asked to confirm, in that chat: a delete
    only on the exact word; any other drops the question (said once) and, unless it was an
    answer to it, goes on to be handled as usual. A lone 确认 with no question open is told
    so and goes no further."""
    async with serving_bot(bot, runtime):
        await _confirm(bot, event, matcher, runtime, addressed=is_addressed(event, state))


async def _confirm(
    bot: Bot, event: MessageEvent, matcher: Matcher, runtime: Runtime, *, addressed: bool
) -> None:
    key = confirmation_key(event)
    kind = answer_kind(event.get_plaintext())
    if not addressed:
        # Said to the group, not to the bot: it neither answers nor drops the question, and
        # gets no word about it, except the asker's first 确认, which gets one hint. It goes
        # on to be recorded like any group message.
        request = confirmations.on_time(key)
        if request is not None and kind in ("yes", "all") and not request.hinted:
            request.hinted = True
            await reply(bot, event, runtime, FORGET_HINT_UNADDRESSED.format(yes=request.yes))
        return
    request, on_time = confirmations.take(key)
    if request is None:
        # A lone 确认 with nothing asked: the chat model must not answer "好的，已确认" as if
        # something had been deleted.
        answered(matcher)
        await reply(bot, event, runtime, NOTHING_TO_CONFIRM)
        return
    if not on_time:
        if kind is not None:
            answered(matcher)
            await reply(bot, event, runtime, FORGET_TOO_LATE)
        return  # a late unrelated message: the question has expired, nothing to say
    if request.confirmed_by(answer_word(event.get_plaintext())):
        answered(matcher)
        await forget_now(bot, event, runtime, request)
        return
    if kind is not None:
        # An answer, but not the one that deletes: no, or a plain 确认 to a /forget all.
        answered(matcher)
        text = FORGET_CANCELLED if kind == "no" else FORGET_DROPPED_ALL
        await reply(bot, event, runtime, text)
        return
    # Not an answer: the question goes, and the message is handled as what it is (chat or a
    # command), not swallowed.
    await reply(bot, event, runtime, FORGET_DROPPED.format(yes=request.yes))


async def forget_now(
    bot: Bot, event: MessageEvent, runtime: Runtime, request: PendingForget
) -> None:
    """Delete what ``request`` names and say what went."""
    scope = request.scope
    try:
        if request.action is not None:
            forgotten = await request.action(runtime)
        elif scope is None:  # ask_to_confirm sets a scope or an action
            raise AssertionError("a /forget without a scope or an action")
        elif request.own_session:
            # After this person's messages still being answered, so none survives the forget.
            async with runtime.engine.session(event.user_id, group_id_of(event)):
                forgotten = await runtime.memory.parts.forgetting.forget(scope)
        else:
            forgotten = await runtime.memory.parts.forgetting.forget(scope)
    except MemoryCoreError as exc:
        logger.warning(f"/forget failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN + "这次没有删除任何记忆。")
        return
    # The scope, not its Chinese description: the log is for the operator, in English.
    logger.info(f"/forget by {event.user_id}: scope {request.scope}, {forgotten}")
    if forgotten.deferred:
        spooled = f"已删除暂存的对话 {forgotten.dialogues} 条；" if forgotten.dialogues else ""
        text = (
            f"记忆数据库暂时连不上：{spooled}"
            f"{request.description}已保存的记忆会在数据库恢复后自动删除。"
        )
    elif not forgotten.total:
        text = f"{request.description}没有可删除的记忆，什么也没有删。"
    else:
        text = f"已删除{request.description}的记忆：{describe_forgotten(forgotten)}。"
    await reply(bot, event, runtime, text)


# ----------------------------------------------------------------------------- /forget


def _own_scope(event: MessageEvent) -> tuple[ForgetScope, str]:
    group_id = group_id_of(event)
    if group_id is None:
        return ForgetScope(user_id=event.user_id, private_only=True), "你在私聊中"
    return ForgetScope(user_id=event.user_id, group_id=group_id), "你在本群"


def parse_forget_target(words: list[str]) -> tuple[ForgetScope, str] | None:
    """Superuser targets: ``user <qq>``, ``group <gid>``, ``all``; ``None`` if not one."""
    if len(words) == 1 and words[0].lower() in {"all", "全部", "所有"}:
        return ForgetScope(everything=True), "所有人"
    if len(words) == 2 and words[1].isdigit():
        kind, number = words[0].lower(), int(words[1])
        if kind in {"user", "用户"}:
            return ForgetScope(user_id=number), f"用户 {number} 在所有会话中"
        if kind in {"group", "群"}:
            return ForgetScope(group_id=number), f"群 {number} 中所有人"
    return None


async def handle_forget(bot: Bot, event: MessageEvent, args: Message, runtime: Runtime) -> None:
    """/forget alone (this chat) or with a superuser target; ``self_service`` registers the
    command and sends other words (items of the person's memory) elsewhere."""
    words = args.extract_plain_text().split()
    own_session = not words
    if own_session:
        scope, description = _own_scope(event)
    else:
        target = parse_forget_target(words)
        if target is None:
            await reply(bot, event, runtime, FORGET_USAGE)
            return
        if not await is_superuser(bot, event):
            action = "删除其他人、整个群或全部的记忆"
            await reply(bot, event, runtime, NOT_SUPERUSER.format(action=action))
            return
        scope, description = target
    await ask_to_confirm(
        bot,
        event,
        runtime,
        "",
        description=description,
        scope=scope,
        own_session=own_session,
        yes=CONFIRM_ALL if scope.everything else "确认",
    )


# ----------------------------------------------------------------------------- /memstat


MEMSTAT_SENT_PRIVATELY = "记忆统计已私聊发给你。"
MEMSTAT_NOT_SENT = "记忆统计没能私聊发给你（可先加机器人为好友），为保护数据不在群里公布。"


def bot_connection(runtime: Runtime, *, now: datetime) -> Connection:
    connection = connection_of(
        runtime.memory.parts,
        chat_model=runtime.settings.llm_model if runtime.chat_model is not None else None,
        uptime=now - runtime.started_at,
    )
    return dataclasses.replace(connection, chat_calls=chat_calls_zh(runtime.chat_model))


def now_utc() -> datetime:
    """The clock of /memstat's title and uptime (tests stop it)."""
    return datetime.now(timezone.utc)


async def memstat_text(runtime: Runtime) -> str:
    now = now_utc()
    tz = runtime.memory.parts.tz
    connection = bot_connection(runtime, now=now)
    try:
        stats = await runtime.memory.stats(now)
        distilled = await runtime.memory.distilled_stats(now)
    except MemoryCoreError as exc:
        logger.warning(f"/memstat failed: {exc}")
        return unavailable_dashboard_zh(connection, now=now, tz=tz)
    return dashboard_zh(stats, distilled, connection, now=now, tz=tz)


async def send_private_text(bot: Bot, user_id: int, text: str, *, max_chars: int) -> bool:
    """Send ``text`` to ``user_id`` in a private chat, in at most ``ANSWER_MESSAGES``
    messages (a command's answer); ``False`` if any piece failed."""
    for piece in at_most(split_reply(text, max_chars), ANSWER_MESSAGES, max_chars):
        try:
            await bot.send_private_msg(user_id=user_id, message=Message(MessageSegment.text(piece)))
        except (ActionFailed, NetworkError, ApiNotAvailable) as exc:
            logger.warning(f"sending privately to user {user_id} failed: {exc!r}")
            return False
    return True


@plugin_command("memstat", "记忆统计")
async def handle_memstat(bot: Bot, event: MessageEvent, _args: Message, runtime: Runtime) -> None:
    if not await is_superuser(bot, event):
        await reply(bot, event, runtime, NOT_SUPERUSER.format(action="查看记忆统计"))
        return
    text = await memstat_text(runtime)
    if group_id_of(event) is None:
        await reply(bot, event, runtime, text)
        return
    # The operator's figures (model, totals of every chat) are not for every group member.
    max_chars = runtime.settings.chat_reply_max_chars
    sent = await send_private_text(bot, event.user_id, text, max_chars=max_chars)
    note = MEMSTAT_SENT_PRIVATELY if sent else MEMSTAT_NOT_SENT
    await send_text(bot, event, note, max_chars=max_chars, quote=True)


# ----------------------------------------------------------------------------- /recall

_FLAG = re.compile(r"(?<!\S)--(user|group)(?:=|\s+)(\d+)(?!\S)|(?<!\S)--(private|full)(?!\S)")
RECALL_ITEMS = 5
RECALL_SENT_PRIVATELY = "其他会话的记忆已私聊发给你（不在群里公开）。"
RECALL_NOT_SENT = "没能私聊发给你（可先加我为好友），其他会话的记忆不在群里公开。"
RECALL_LINE_CHARS = 60
# A stored /recall (with any command start, after an @ of the bot) and the bot's answer to one.
_RECALL_COMMAND = re.compile(r"\s*(?:@\S+\s*)?[/／、!！]\s*(?:recall|回忆)", re.I)
_RECALL_ANSWER = re.compile(r"(?:与“.*”相关的(?:记忆|对话)|在.*中没有找到与“)", re.S)


@dataclass(frozen=True)
class RecallRequest:
    query: str
    user_id: int | None = None
    group_id: int | None = None
    private: bool = False
    full: bool = False

    @property
    def has_flags(self) -> bool:
        return self.user_id is not None or self.group_id is not None or self.private


def parse_recall_args(text: str) -> RecallRequest:
    """``--user N``, ``--group N``, ``--private`` and ``--full`` anywhere; the rest is the
    query."""
    user_id: int | None = None
    group_id: int | None = None
    private = full = False
    for match in _FLAG.finditer(text):
        if match.group(3) == "private":
            private = True
        elif match.group(3) == "full":
            full = True
        elif match.group(1) == "user":
            user_id = int(match.group(2))
        else:
            group_id = int(match.group(2))
    query = " ".join(_FLAG.sub(" ", text).split())
    return RecallRequest(
        query=query, user_id=user_id, group_id=group_id, private=private, full=full
    )


@plugin_command("recall", "回忆")
async def handle_recall(bot: Bot, event: MessageEvent, args: Message, runtime: Runtime) -> None:
    request = parse_recall_args(args.extract_plain_text())
    if not request.query:
        await reply(bot, event, runtime, RECALL_USAGE)
        return
    if request.has_flags and not await is_superuser(bot, event):
        await reply(bot, event, runtime, NOT_SUPERUSER.format(action="查看其他会话的记忆"))
        return
    user_id = request.user_id if request.user_id is not None else event.user_id
    if request.group_id is not None:
        group_id: int | None = request.group_id
    elif request.private:
        group_id = None
    else:
        group_id = group_id_of(event)
    try:
        # Inside the session: the messages sent before this command are stored by now, and
        # their embeddings (made in the background) are waited for, a few seconds at most.
        async with runtime.engine.session(user_id, group_id):
            await runtime.memory.parts.writer.settle_embeddings(
                runtime.settings.embedding_store_deadline
            )
            now = datetime.now(timezone.utc)
            # The short list: the best relevant anchors alone; --full: what the prompt would
            # get, less what is not about the query.
            listing = await list_recall(
                runtime.memory.parts,
                user_id,
                request.query,
                group_id,
                now=now,
                items=RECALL_ITEMS,
                full=request.full,
                skip=_asking_or_echo(event),
            )
    except MemoryCoreError as exc:
        logger.warning(f"/recall failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN)
        return
    where = await chat_label(bot, group_id, runtime)
    if user_id != event.user_id:
        where += f" · 用户 {user_id}"
    asked = quoted(request.query)
    # Another chat's memory (a superuser's --user / --group / --private) asked in a group
    # is not for that group: it goes to the superuser privately.
    elsewhere = group_id_of(event) is not None and (
        user_id != event.user_id or group_id != group_id_of(event)
    )
    if listing.empty:
        text = f"{in_chat(where)}没有找到与{asked}相关的记忆。"
        await _answer_recall(bot, event, runtime, text, privately=elsewhere)
        return
    if listing.windows is not None:
        block = runtime.memory.parts.context_builder.format_block(
            listing.windows, now, asker=user_id
        )
        lines = [f"与{asked}相关的对话（{where}，完整）："]
        if block.text:
            lines.append(block.text)
    else:
        speaker = "你" if user_id == event.user_id else "TA"
        lines = [_one_line("", f"与{asked}相关的记忆（{where}）：")]
        for turn in listing.turns:
            who = runtime.bot_name if turn.role == "assistant" else speaker
            if turn.role == "user" and turn.user_id != user_id:  # a shared group's other member
                who = turn.sender_name or f"QQ {turn.user_id}"
            when = relative_time_zh(turn.created_at, now, runtime.memory.parts.tz)
            lines.append(_matched_line(f"· {when} {who}：", turn.content, listing))
    if listing.facts:
        lines.append("事实（会提供给模型）：")
        lines.extend(_matched_line("· ", hit.memory.content, listing) for hit in listing.facts)
    if listing.windows is None:
        lines.append("加 --full 查看带上下文的完整记忆。")
    await _answer_recall(bot, event, runtime, "\n".join(lines), privately=elsewhere)


async def _answer_recall(
    bot: Bot, event: MessageEvent, runtime: Runtime, text: str, *, privately: bool
) -> None:
    """The answer, in at most two messages: in the chat, or to the asker privately (and a
    note in the group saying so)."""
    if not privately:
        await reply(bot, event, runtime, text)
        return
    max_chars = runtime.settings.chat_reply_max_chars
    sent = await send_private_text(bot, event.user_id, text, max_chars=max_chars)
    await reply(bot, event, runtime, RECALL_SENT_PRIVATELY if sent else RECALL_NOT_SENT)


def _asking_or_echo(event: MessageEvent) -> Callable[[MemoryTurn], bool]:
    """Turns that are no memory of anything: this /recall message itself (when it was stored),
    a stored /recall command, and the bot's stored answers to one."""

    def skip(turn: MemoryTurn) -> bool:
        if turn.role == "user":
            asked_here = turn.message_id == event.message_id and turn.user_id == event.user_id
            return asked_here or _RECALL_COMMAND.match(turn.content) is not None
        return _RECALL_ANSWER.match(turn.content) is not None

    return skip


def _one_line(head: str, text: str) -> str:
    """``head`` and ``text`` on one line of at most ``RECALL_LINE_CHARS`` characters."""
    text = " ".join(text.split())
    room = RECALL_LINE_CHARS - len(head)
    if len(text) > room:
        text = text[: room - 1] + "…"
    return head + text


def _matched_line(head: str, text: str, listing: RecallListing) -> str:
    """``head`` and the part of ``text`` around the query's words, in about
    ``RECALL_LINE_CHARS`` characters: the digits asked for are kept, not the line's start."""
    return head + listing.excerpt(text, RECALL_LINE_CHARS - len(head))


# ----------------------------------------------------------------------------- /remember


@plugin_command("remember", "记住")
async def handle_remember(bot: Bot, event: MessageEvent, args: Message, runtime: Runtime) -> None:
    note = flatten_segments(segments_of(args), self_id=event.self_id, self_name=runtime.bot_name)
    if not note:
        await reply(bot, event, runtime, REMEMBER_USAGE)
        return
    outcome = await runtime.engine.record(
        TurnInput(
            user_id=event.user_id,
            group_id=group_id_of(event),
            self_id=int(bot.self_id),
            role="user",
            content=note,
            sender_name=sender_name(event),
            message_id=event.message_id,
            raw_segments=segments_of(args),
        )
    )
    if outcome is None or (outcome.turn is None and not outcome.spooled):
        await reply(bot, event, runtime, "没能记下这条笔记，请稍后再试。")
    elif outcome.spooled:
        await reply(bot, event, runtime, "记住了（数据库暂时连不上，笔记已暂存，恢复后自动写入）。")
    else:
        await reply(bot, event, runtime, "记住了，这条会一直保留。")
