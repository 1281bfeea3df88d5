"""Self-service for every user: /我的记忆 (mymem), /忘记 <编号|词语>, /忘记我, /导出我的记忆,
/不记我 and /记我; group admins: /群记忆 开|关.

Anyone may see and delete what the bot keeps about them; deleting goes through the /forget
confirmation (``forget.ask_to_confirm``). Deleting an item takes what it came from too (the
turns, the bot's replies repeating them; for a word every turn, summary and cached answer of
this chat holding it: ``memory_core.personal.Named``), and the question says so first.
Memories are shown to their person as ``你…`` (``addressed``); the stored text is unchanged.
``/忘记`` alone (this chat) and the superuser targets (``/forget user <QQ号>`` …) keep their
meaning in ``forget.py``; a number or any other word after ``/忘记`` names items of the
person's own memory in this chat.
"""

from functools import partial
from typing import Any

from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    Bot,
    Message,
    MessageEvent,
    NetworkError,
)
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.adapters.onebot.v11.permission import GROUP_ADMIN, GROUP_OWNER
from nonebot.log import logger
from nonebot.permission import SUPERUSER

from memory_core import (
    DistilledMemory,
    ForgetPreview,
    ForgetScope,
    Forgotten,
    MemoryCoreError,
    MemoryTurn,
    Named,
    PersonalExport,
    addressed,
    discard_export,
    export_person,
    forget_named,
    known_about,
    opt_in,
    opt_out,
    preview_forget,
    switch_group_memory,
)

from ..intake import group_id_of
from ..messaging import send_text
from ..runtime import Runtime
from .common import DB_DOWN, chat_label, in_chat, reply, send_private_text
from .dispatch import plugin_command
from .forget import ask_to_confirm, confirmation_key, handle_forget

PAGE_SIZE = 10
MAX_LISTINGS = 1000
LINE_CHARS = 60
QUOTE_CHARS = 30  # a turn quoted in a question
QUOTED_TURNS = 8  # at most this many turns are quoted; the rest are counted
KIND_ZH = {"facts": "事实", "preferences": "偏好", "summary": "摘要"}
# First words after /forget that belong to the superuser targets of forget.py.
SUPERUSER_WORDS = frozenset({"user", "用户", "group", "群", "all", "全部", "所有"})

NOTHING_KNOWN = "我还没有记住关于你的事实或偏好。多聊几句，我会慢慢记住的。"
LIST_FIRST = "请先发送 /我的记忆 查看编号，再用 /忘记 <编号> 删除。"
MYMEM_USAGE = "用法：/我的记忆 [页码]（mymem）查看我记得的关于你的事实和偏好。"
MYMEM_SENT_PRIVATELY = "你在本群的记忆已私聊发给你（不在群里公开）。"
MYMEM_NOT_SENT = (
    "没能私聊发给你（可先加我为好友），为保护隐私不在群里列出。也可以私聊我发送 /我的记忆。"
)


@plugin_command("我的记忆", "mymem")
async def handle_mymem(bot: Bot, event: MessageEvent, args: Message, runtime: Runtime) -> None:
    word = args.extract_plain_text().strip()
    if word and not (word.isascii() and word.isdigit()):  # "²" is a digit int() refuses
        await reply(bot, event, runtime, MYMEM_USAGE)
        return
    page = max(int(word), 1) if word else 1
    try:
        memories = await known_about(runtime.memory.parts.keeper, event.user_id, group_id_of(event))
    except MemoryCoreError as exc:
        logger.warning(f"/我的记忆 failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN)
        return
    listings.remember(confirmation_key(event), memories)
    group_id = group_id_of(event)
    if group_id is None:
        await reply(bot, event, runtime, listing_text(memories, page, runtime))
        return
    # What the bot knows about a member is for that member, not for the whole group.
    text = listing_text(
        memories, page, runtime, where=in_chat(await chat_label(bot, group_id, runtime))
    )
    sent = await tell_privately(bot, event, runtime, text)
    await send_text(
        bot,
        event,
        MYMEM_SENT_PRIVATELY if sent else MYMEM_NOT_SENT,
        max_chars=runtime.settings.chat_reply_max_chars,
        quote=True,
    )


def listing_text(
    memories: list[DistilledMemory], page: int, runtime: Runtime, *, where: str = ""
) -> str:
    if not memories:
        return where + NOTHING_KNOWN if where else NOTHING_KNOWN
    pages = (len(memories) + PAGE_SIZE - 1) // PAGE_SIZE
    page = min(page, pages)
    first = (page - 1) * PAGE_SIZE
    lines = [f"{where}我记得关于你的 {len(memories)} 条（第 {page}/{pages} 页，新的在前）："]
    for number, memory in enumerate(memories[first : first + PAGE_SIZE], start=first + 1):
        lines.append(item_line(number, memory, runtime))
    if page < pages:
        lines.append(f"发送 /我的记忆 {page + 1} 看下一页。")
    lines.append("删除一条：/忘记 <编号> 或 /忘记 <词语>。")
    return "\n".join(lines)


def item_line(number: int, memory: DistilledMemory, runtime: Runtime) -> str:
    """``3. [事实 11-30] 你是老师``, cut with … to ``LINE_CHARS`` characters."""
    day = memory.last_confirmed.astimezone(runtime.memory.parts.tz).strftime("%m-%d")
    head = f"{number}. [{KIND_ZH.get(memory.kind, memory.kind)} {day}] "
    return head + shorten(addressed(memory.content), LINE_CHARS - len(head))


def shorten(text: str, room: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= room else text[: room - 1] + "…"


class Listings:
    """The last /我的记忆 of each person in each chat: what its numbers mean."""

    def __init__(self) -> None:
        self.shown: dict[tuple[Any, ...], list[DistilledMemory]] = {}

    def remember(self, key: tuple[Any, ...], memories: list[DistilledMemory]) -> None:
        self.shown.pop(key, None)
        self.shown[key] = memories
        while len(self.shown) > MAX_LISTINGS:  # the oldest listings go first
            del self.shown[next(iter(self.shown))]

    def get(self, key: tuple[Any, ...]) -> list[DistilledMemory] | None:
        return self.shown.get(key)


listings = Listings()


# ----------------------------------------------------------------------------- /忘记 <item>


def names_items(args: Message) -> bool:
    """``/忘记`` followed by something that is not a superuser target."""
    words = args.extract_plain_text().split()
    return bool(words) and words[0].lower() not in SUPERUSER_WORDS


@plugin_command("forget", "忘记")
async def handle_forget_words(
    bot: Bot, event: MessageEvent, args: Message, runtime: Runtime
) -> None:
    """/忘记 <编号|词语> here; /忘记 alone and the superuser targets in ``commands``."""
    if not names_items(args):
        await handle_forget(bot, event, args, runtime)
        return
    words = " ".join(args.extract_plain_text().split())
    if words == "我":
        await ask_forget_me(bot, event, runtime)
        return
    await ask_forget_items(bot, event, runtime, words)


async def ask_forget_items(bot: Bot, event: MessageEvent, runtime: Runtime, words: str) -> None:
    user_id, group_id = event.user_id, group_id_of(event)
    if is_number(words):
        shown = listings.get(confirmation_key(event))
        if shown is None:
            await reply(bot, event, runtime, LIST_FIRST)
            return
        # A listing holds a few hundred items; a 5,000-digit "number" is none of them (and
        # past what int() converts).
        number = int(words) if len(words) <= 6 else 0
        if not 1 <= number <= len(shown):
            await reply(bot, event, runtime, f"没有第 {shorten(words, 12)} 条。{LIST_FIRST}")
            return
        named = Named(user_id, group_id, (shown[number - 1].id,))
        description = f"“{shorten(addressed(shown[number - 1].content), QUOTE_CHARS)}”"
    else:
        named = Named(user_id, group_id, word=words)
        description = f"包含“{shorten(words, QUOTE_CHARS)}”"
    try:
        preview = await preview_forget(runtime.memory.parts.database, named)
    except MemoryCoreError as exc:
        logger.warning(f"/忘记 <编号|词语> failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN)
        return
    if not preview.memories and not preview.turns:
        if named.word is None:  # deleted meanwhile (another chat window, the console)
            await reply(bot, event, runtime, f"第 {words} 条已经不在了。{LIST_FIRST}")
        else:
            await reply(
                bot,
                event,
                runtime,
                f"没有找到包含“{shorten(words, QUOTE_CHARS)}”的记忆，什么也没有删。",
            )
        return

    async def delete(runtime: Runtime) -> Forgotten:
        # After this person's messages still being answered, so no reply holding it is
        # stored after the delete; meanwhile that reply quotes none of it.
        with runtime.engine.citations.forgetting(t.id for t in preview.turns):
            async with runtime.engine.session(user_id, group_id):
                parts = runtime.memory.parts
                return await forget_named(parts.database, parts.spool, named)

    if group_id is not None:
        # In a group the question and the answer name no memory: the whole group reads them.
        question = group_question(preview, words)
        await ask_to_confirm(
            bot, event, runtime, question, description="你在本群选中", action=delete
        )
        return
    question = forget_question(preview, runtime)
    await ask_to_confirm(bot, event, runtime, question, description=description, action=delete)


def is_number(words: str) -> bool:
    """An item number: ASCII digits only ("²" or "٣" is a word to look for, not a number)."""
    return words.isascii() and words.isdigit()


def preview_counts(preview: ForgetPreview, *, listed: bool = True) -> str:
    """``对话 2 条、机器人回复 1 条、事实 1 条``: what a delete would take, by kind, in the
    receipt's order (``commands.describe_forgotten``); without the facts and preferences when
    ``listed`` is false."""
    parts = [
        ("对话", len(preview.turns) - preview.bot_replies),
        ("机器人回复", preview.bot_replies),
        ("事实", preview.count("facts") if listed else 0),
        ("偏好", preview.count("preferences") if listed else 0),
        ("摘要", preview.count("summary")),
    ]
    return "、".join(f"{name} {count} 条" for name, count in parts if count)


def group_question(preview: ForgetPreview, words: str) -> str:
    """``确定要删除你在本群的第 2 条记忆吗？连同对话 1 条、机器人回复 1 条。``: counts only."""
    listed = preview.count("facts") + preview.count("preferences")
    if is_number(words):
        # Other facts drawn from the same turns go with them: counted, never named.
        others = f"另外 {listed - 1} 条记忆" if listed > 1 else ""
        return f"确定要删除你在本群的第 {int(words)} 条记忆吗？" + _along(preview, others)
    where = f"你在本群包含“{shorten(words, QUOTE_CHARS)}”的"
    if not listed:
        return f"确定要删除{where}内容吗？会删除{preview_counts(preview)}。"
    return f"确定要删除{where} {listed} 条记忆吗？" + _along(preview)


def _along(preview: ForgetPreview, first: str = "") -> str:
    rest = "、".join(p for p in (first, preview_counts(preview, listed=False)) if p)
    return f"连同{rest}。" if rest else ""


def forget_question(preview: ForgetPreview, runtime: Runtime) -> str:
    """The private question: the memories, the turns they came from (quoted short), and the
    count of each kind, before the confirmation's own words."""
    listed = [m for m in preview.memories if m.kind != "summary"]
    lines = [f"确定要删除这 {len(listed)} 条记忆吗？" if listed else "确定要删除这些内容吗？"]
    lines.extend(
        f"· [{KIND_ZH.get(m.kind, m.kind)}] {shorten(addressed(m.content), LINE_CHARS - 7)}"
        for m in listed[:PAGE_SIZE]
    )
    if len(listed) > PAGE_SIZE:
        lines.append(f"…… 共 {len(listed)} 条")
    if preview.turns:
        lines.append("连同这些对话：" if listed else "这些对话：")
        lines.extend(turn_quote(t, runtime) for t in preview.turns[:QUOTED_TURNS])
        if len(preview.turns) > QUOTED_TURNS:
            lines.append(f"…… 共 {len(preview.turns)} 条")
    summaries = preview.count("summary")
    if summaries:
        lines.append(f"以及提到它们的摘要 {summaries} 条。")
    if preview.turns or summaries:
        lines.append(f"一共：{preview_counts(preview)}。")
    return "\n".join(lines) + "\n"


def turn_quote(turn: MemoryTurn, runtime: Runtime) -> str:
    """``· 你：我对花生过敏`` (the bot's turns under its name), cut to ``QUOTE_CHARS``."""
    who = "你" if turn.role == "user" else runtime.bot_name
    return f"· {who}：{shorten(turn.content, QUOTE_CHARS)}"


# ----------------------------------------------------------------------------- /忘记我


@plugin_command("忘记我", "forgetme")
async def handle_forget_me(bot: Bot, event: MessageEvent, args: Message, runtime: Runtime) -> None:
    rest = " ".join(args.extract_plain_text().split())
    if rest:
        # "/忘记我的猫": the longest command wins, but this is a word to look for.
        await ask_forget_items(bot, event, runtime, "我" + rest)
        return
    await ask_forget_me(bot, event, runtime)


async def ask_forget_me(bot: Bot, event: MessageEvent, runtime: Runtime) -> None:
    await ask_to_confirm(
        bot,
        event,
        runtime,
        "确定要删除你在所有会话（私聊和所有群）中的全部记忆吗？"
        "包括对话、事实、偏好、摘要和缓存的回答。",
        description="你在所有会话中",
        scope=ForgetScope(user_id=event.user_id),
    )


# ----------------------------------------------------------------------------- /导出我的记忆

EXPORT_PREVIEW = 5
NOTHING_STORED = "我这里没有存任何关于你的内容，没有可导出的。"


@plugin_command("导出我的记忆", "exportmem")
async def handle_export(bot: Bot, event: MessageEvent, _args: Message, runtime: Runtime) -> None:
    try:
        export = await export_person(
            runtime.memory.parts.database, event.user_id, tz=runtime.memory.parts.tz
        )
    except MemoryCoreError as exc:
        logger.warning(f"/导出我的记忆 failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN)
        return
    if export.empty:
        await reply(bot, event, runtime, NOTHING_STORED)
        return
    if group_id_of(event) is not None:
        await reply(bot, event, runtime, "你的记忆不在群里发，我会私聊发给你。")
    summary = export_summary(export)
    # NapCat and go-cqhttp read ``file`` as a path on their machine: the bot's data dir.
    path = await export.write(runtime.settings.memory_data_dir.resolve() / "exports")
    try:
        await bot.call_api(
            "upload_private_file", user_id=event.user_id, file=str(path), name=path.name
        )
    except (ActionFailed, ApiNotAvailable, NetworkError) as exc:
        logger.info(f"upload_private_file did not work ({exc!r}); sending a text summary")
        text = export_preview(export, summary, runtime)
    else:
        text = f"已把你的记忆导出为文件 {path.name} 发给你：{summary}。"
    finally:
        discard_export(path)
    await tell_privately(bot, event, runtime, text)


def export_summary(export: PersonalExport) -> str:
    """``对话 12 条、事实 3 条、缓存回答 1 条``."""
    kinds = [m.kind for m in export.memories]
    parts = [
        ("对话", len(export.turns)),
        ("事实", kinds.count("facts")),
        ("偏好", kinds.count("preferences")),
        ("摘要", kinds.count("summary")),
        ("缓存回答", len(export.cached_answers)),
    ]
    return "、".join(f"{name} {count} 条" for name, count in parts if count)


def export_preview(export: PersonalExport, summary: str, runtime: Runtime) -> str:
    """The text fallback: the summary and the first few items of each part."""
    tz = runtime.memory.parts.tz
    lines = [f"你的 QQ 客户端收不了文件，这里是文字版（前 {EXPORT_PREVIEW} 条）：{summary}。"]
    if export.turns:
        lines.append("对话：")
        for turn in export.turns[:EXPORT_PREVIEW]:
            stamp = turn.created_at.astimezone(tz).strftime("%m-%d %H:%M")
            chat = "私聊" if turn.group_id is None else f"群{turn.group_id}"
            who = "你" if turn.role == "user" else runtime.bot_name
            head = f"· {stamp} {chat} {who}："
            lines.append(head + shorten(turn.content, LINE_CHARS - len(head)))
    if export.memories:
        lines.append("记忆：")
        for memory in export.memories[:EXPORT_PREVIEW]:
            head = f"· [{KIND_ZH.get(memory.kind, memory.kind)}] "
            lines.append(head + shorten(addressed(memory.content), LINE_CHARS - len(head)))
    if export.cached_answers:
        lines.append("缓存回答：")
        for cached in export.cached_answers[:EXPORT_PREVIEW]:
            lines.append(shorten(f"· {cached.question} → {cached.answer}", LINE_CHARS))
    return "\n".join(lines)


async def tell_privately(bot: Bot, event: MessageEvent, runtime: Runtime, text: str) -> bool:
    """Say ``text`` to the person in private (here, when this is a private chat); whether it
    got through."""
    if group_id_of(event) is None:
        await reply(bot, event, runtime, text)
        return True
    return await send_private_text(
        bot, event.user_id, text, max_chars=runtime.settings.chat_reply_max_chars
    )


# ----------------------------------------------------------------------------- /不记我, /记我

EVERYWHERE_WORDS = frozenset({"全部", "所有", "all"})
OPT_USAGE = "用法：/不记我（或 /不记我 全部）停止记录你；/记我（或 /记我 全部）恢复。"
STILL_OPTED_OUT = "你设置过所有会话都不记录，这里仍不会记录；发送 /记我 全部 全部恢复。"


def opt_scope(event: MessageEvent, words: str) -> tuple[bool, str, ForgetScope] | None:
    """``(everywhere, where, forget scope)`` of an opt-out command; ``None`` if not one."""
    group_id = group_id_of(event)
    if words in EVERYWHERE_WORDS:
        return True, "所有会话中", ForgetScope(user_id=event.user_id)
    if words:
        return None
    if group_id is None:
        return False, "私聊中", ForgetScope(user_id=event.user_id, private_only=True)
    return False, "本群", ForgetScope(user_id=event.user_id, group_id=group_id)


async def switch_recording(
    bot: Bot, event: MessageEvent, args: Message, runtime: Runtime, *, stop: bool
) -> None:
    """/不记我 (``stop``) and /记我: one shape, the same words after them, the same failure;
    only the core's call and what is said after it differ. Stopping offers to delete what is
    already kept (the /forget confirmation); resuming only says whether it took effect (an
    everywhere opt-out still holds a chat resumed alone)."""
    found = opt_scope(event, args.extract_plain_text().strip())
    if found is None:
        await reply(bot, event, runtime, OPT_USAGE)
        return
    everywhere, where, scope = found
    switch = opt_out if stop else opt_in
    try:
        changed = await switch(
            runtime.memory.parts.database, event.user_id, group_id_of(event), everywhere=everywhere
        )
    except MemoryCoreError as exc:
        logger.warning(f"/{'不记我' if stop else '记我'} failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN)
        return
    if not stop:
        await reply(
            bot,
            event,
            runtime,
            f"好的，我会重新记住你在{where}说的话。" if changed else STILL_OPTED_OUT,
        )
        return
    if not changed:
        await reply(bot, event, runtime, f"你在{where}已经是不记录状态。发送 /记我 恢复。")
        return
    stopped = f"好的，从现在起不再记录你在{where}说的话，也不会从中提炼记忆；发送 /记我 恢复。"
    await ask_to_confirm(
        bot,
        event,
        runtime,
        f"{stopped}\n已经记住的要一起删除吗？",
        description=f"你{where}" if where.startswith("所有") else f"你在{where}",
        scope=scope,
        nothing=stopped,
    )


plugin_command("不记我", "optout")(partial(switch_recording, stop=True))
plugin_command("记我", "optin")(partial(switch_recording, stop=False))


# ----------------------------------------------------------------------------- /群记忆

GROUP_SWITCH_WORDS = {
    "开": True,
    "开启": True,
    "on": True,
    "关": False,
    "关闭": False,
    "off": False,
}
GROUP_MEMORY_USAGE = "用法：/群记忆 关（groupmem off）不再记录本群任何人的消息；/群记忆 开 恢复。"
may_switch_group_memory = GROUP_ADMIN | GROUP_OWNER | SUPERUSER


async def read_group_switch(
    bot: Bot,
    event: MessageEvent,
    args: Message,
    runtime: Runtime,
    *,
    usage: str,
    refusal: str,
    word_required: bool,
) -> tuple[int, bool | None] | None:
    """The group and the word (开 ``True``, 关 ``False``, none ``None``: a question anyone in
    the group may ask) of a group admin's switch command such as /群记忆 关; ``None`` once the
    sender has been told ``usage`` (not in a group, an unknown word, or no word when
    ``word_required``) or ``refusal`` (a switch by someone other than the group's owner, an
    admin or a superuser)."""
    group_id = group_id_of(event)
    word = args.extract_plain_text().strip().lower()
    on = GROUP_SWITCH_WORDS.get(word)
    if group_id is None or (on is None and (word or word_required)):
        await reply(bot, event, runtime, usage)
        return None
    if on is not None and not await may_switch_group_memory(bot, event):
        await reply(bot, event, runtime, refusal)
        return None
    return group_id, on


@plugin_command("群记忆", "groupmem")
async def handle_group_memory(
    bot: Bot, event: MessageEvent, args: Message, runtime: Runtime
) -> None:
    switch = await read_group_switch(
        bot,
        event,
        args,
        runtime,
        usage=GROUP_MEMORY_USAGE + "（在群里由群主或管理员发送）",
        refusal="只有群主、管理员或超级用户可以开关本群的记忆。",
        word_required=True,
    )
    if switch is None:
        return
    group_id, on = switch
    assert on is not None  # the word is required
    try:
        changed = await switch_group_memory(runtime.memory.parts.database, group_id, on=on)
    except MemoryCoreError as exc:
        logger.warning(f"/群记忆 failed: {exc}")
        await reply(bot, event, runtime, DB_DOWN)
        return
    if not changed:
        text = f"本群的记忆本来就是{'开启' if on else '关闭'}的。"
    elif on:
        text = "已开启本群的记忆。"
    else:
        text = (
            "已关闭本群的记忆：从现在起不记录本群任何人的消息，我照常聊天。"
            "已有的记忆保留（各人可用 /忘记 删除）。发送 /群记忆 开 恢复。"
        )
    await reply(bot, event, runtime, text)
