"""/recall (回忆): what the bot would remember of a query, as a short list or (``--full``) as
the prompt would get it; a superuser may look into another chat (``--user``, ``--group``,
``--private``), answered privately when asked in a group."""

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent
from nonebot.log import logger

from memory_core import MemoryCoreError, MemoryTurn, RecallListing, list_recall
from memory_core.console import relative_time_zh

from ..intake import group_id_of
from ..messaging import quoted
from ..runtime import Runtime
from .common import (
    DB_DOWN,
    NOT_SUPERUSER,
    chat_label,
    in_chat,
    is_superuser,
    reply,
    send_private_text,
)
from .dispatch import plugin_command

RECALL_USAGE = (
    "用法：/recall <内容>（回忆）查看会被想起的记忆，加 --full 看完整上下文；"
    "超级用户可加 --user <QQ号>、--group <群号> 或 --private。"
)
_FLAG = re.compile(r"(?<!\S)--(user|group)(?:=|\s+)(\d+)(?!\S)|(?<!\S)--(private|full)(?!\S)")
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
            # The lines the prompt would carry for the query, one a line around the words
            # that matched (nothing when none is about it); --full: the windows in full, less
            # what is not about the query.
            listing = await list_recall(
                runtime.memory.parts,
                user_id,
                request.query,
                group_id,
                now=now,
                full=request.full,
                skip=_asking_or_echo(event),
                max_tokens=runtime.engine.preparer.memory_tokens(group_id, now),
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
