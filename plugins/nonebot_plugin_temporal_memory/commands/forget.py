"""/forget (忘记) and the confirmation every delete waits for.

Anyone may forget their own session; another user, a whole group or everything takes a
superuser, and others get a clear refusal.
Forgetting names what will go and asks for a "确认" within ``CONFIRM_TIMEOUT`` seconds
(``handle_confirm`` says what counts as one). In a group only what is said to the bot answers
it: what members say to each other meanwhile gets no word about it (one quiet hint aside, for
the asker's unaddressed 确认).
"""

import time
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from nonebot import on_message
from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent
from nonebot.log import logger
from nonebot.matcher import Matcher
from nonebot.rule import Rule
from nonebot.typing import T_State

from memory_core import ForgetScope, Forgotten, MemoryCoreError

from ..bot_accounts import serving_bot
from ..intake import accepts, group_id_of
from ..runtime import Runtime, RuntimeDep, get_runtime
from .common import DB_DOWN, NOT_SUPERUSER, is_superuser, reply
from .dispatch import handler_for

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
FORGET_TOO_LATE = "确认已超时，未删除任何记忆。如仍要删除，请重新发送 /forget。"
FORGET_CANCELLED = "已取消，记忆保持不变。"
FORGET_DROPPED = "已取消删除：没有收到“{yes}”。"
FORGET_HINT_UNADDRESSED = "要删除的话请 @我 回复“{yes}”（或引用我的提问回复）。"
NOTHING_TO_CONFIRM = "现在没有待确认的删除。"
FORGET_DROPPED_ALL = f"已取消删除：删除全部要回复“{CONFIRM_ALL}”。如仍要删除，请重新发送命令。"

FORGET_USAGE = (
    "用法：/forget（忘记）删除你在当前会话的记忆；"
    "超级用户可用 /forget user <QQ号>、/forget group <群号>、/forget all。"
)


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
