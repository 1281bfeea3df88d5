"""Self-service commands with nonebug: /我的记忆, /忘记 <编号|词语>, /忘记我.

Every test seeds other people's and other chats' memories too and checks they survive.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from nonebot.adapters.onebot.v11 import Adapter, Bot, MessageEvent, MessageSegment
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebug import App

from memory_core.answer_cache.store import PgAnswerCacheStore
from memory_core.distill.memory import DistilledKind, ExtractedMemory
from memory_core.models import ForgetScope
from tests.plugin.events import SELF_ID, message_payload, text_seg
from tests.plugin.test_commands import (
    ASK_IN_GROUP,
    GROUP,
    THEN,
    USER,
    answer_to,
    contents,
    event_of,
    run,
    seed,
    text,
    to_bot,
)

OTHER = 30001
DAY = datetime(2026, 11, 20, 4, tzinfo=timezone.utc)  # 12:00 in Asia/Shanghai
CONFIRM = "删除后无法恢复。请在 60 秒内回复“确认”，回复“取消”放弃。"
LOCAL_THEN = THEN.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%m-%d %H:%M")
FORGET_ME = (
    "确定要删除你在所有会话（私聊和所有群）中的全部记忆吗？"
    "包括对话、事实、偏好、摘要和缓存的回答。将删除你在所有会话中的记忆：{what}。" + CONFIRM
)
MYMEM_SENT = "你在本群的记忆已私聊发给你（不在群里公开）。"
LISTED_DOG = (
    "我记得关于你的 1 条（第 1/1 页，新的在前）：\n"
    "1. [事实 11-20] 你养了一条狗\n"
    "删除一条：/忘记 <编号> 或 /忘记 <词语>。"
)


async def remember(
    runtime: Any, content: str, *, kind: DistilledKind = "facts", user: int = USER,
    group: int | None = None, at: datetime = DAY,
) -> None:  # fmt: skip
    items = [ExtractedMemory(kind=kind, content=content)]
    await runtime.memory.parts.keeper.save(items, user, group, stated_at=at)


async def facts_of(runtime: Any, user: int, group: int | None) -> list[str]:
    found = []
    for kind in ("facts", "preferences"):
        found += await runtime.memory.parts.keeper.recall_by_type(user, group, kind)
    return sorted(m.content for m in found)


async def seed_others(runtime: Any) -> None:
    """What must survive: another user's private facts, and USER's facts in a group."""
    await remember(runtime, "用户是医生", user=OTHER)
    await remember(runtime, "用户在群里说自己是老师", group=GROUP)


async def others_untouched(runtime: Any) -> None:
    assert await facts_of(runtime, OTHER, None) == ["用户是医生"]
    assert await facts_of(runtime, USER, GROUP) == ["用户在群里说自己是老师"]


# ----------------------------------------------------------------------------- /我的记忆


async def test_mymem_lists_this_chats_facts_and_preferences_newest_first(app: App, runtime):
    await seed_others(runtime)
    await remember(runtime, "用户养了一条狗", at=DAY)
    await remember(runtime, "喜欢简短的回答", kind="preferences", at=DAY + timedelta(days=2))
    await remember(runtime, "用户住在杭州", at=DAY + timedelta(days=1))
    await run(
        app,
        (
            event_of("/我的记忆"),
            "我记得关于你的 3 条（第 1/1 页，新的在前）：\n"
            "1. [偏好 11-22] 喜欢简短的回答\n"
            "2. [事实 11-21] 你住在杭州\n"
            "3. [事实 11-20] 你养了一条狗\n"
            "删除一条：/忘记 <编号> 或 /忘记 <词语>。",
        ),
    )
    await others_untouched(runtime)


async def test_mymem_pages_ten_at_a_time_and_cuts_long_items(app: App, runtime):
    long_fact = "用户正在准备一场非常重要的考试，" * 6
    await remember(runtime, long_fact, at=DAY - timedelta(days=1))
    for n in range(1, 12):
        await remember(runtime, f"用户的第{n}号收藏是邮票", at=DAY + timedelta(hours=n))
    await run(
        app,
        (
            event_of("/mymem 2"),
            "我记得关于你的 12 条（第 2/2 页，新的在前）：\n"
            "11. [事实 11-20] 你的第1号收藏是邮票\n"
            "12. [事实 11-19] 你正在准备一场非常重要的考试，你正在准备一场非常重要的考试，"
            "你正在准备一场非常重要的考试…\n"
            "删除一条：/忘记 <编号> 或 /忘记 <词语>。",
        ),
    )
    first_page = "\n".join(
        ["我记得关于你的 12 条（第 1/2 页，新的在前）："]
        + [f"{12 - n}. [事实 11-20] 你的第{n}号收藏是邮票" for n in range(11, 1, -1)]
        + ["发送 /我的记忆 2 看下一页。", "删除一条：/忘记 <编号> 或 /忘记 <词语>。"]
    )
    await run(app, (event_of("/我的记忆"), first_page))
    assert all(len(line) <= 60 for line in first_page.splitlines())


async def test_mymem_with_nothing_known_says_so_kindly(app: App, runtime):
    await seed_others(runtime)
    await run(
        app, (event_of("/我的记忆"), "我还没有记住关于你的事实或偏好。多聊几句，我会慢慢记住的。")
    )


async def test_mymem_in_a_group_that_cannot_reach_the_member_privately_lists_nothing_there(
    app: App, runtime
):
    await remember(runtime, "用户的银行卡密码是778899", group=GROUP)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/我的记忆", group_id=GROUP)
        ctx.receive_event(bot, event)
        listing = (
            f"在群 {GROUP} 中我记得关于你的 1 条（第 1/1 页，新的在前）：\n"
            "1. [事实 11-20] 你的银行卡密码是778899\n"
            "删除一条：/忘记 <编号> 或 /忘记 <词语>。"
        )
        ctx.should_call_api(
            "send_private_msg",
            {"user_id": USER, "message": text(listing)},
            exception=ApiNotAvailable(),
        )
        ctx.should_call_send(
            event,
            MessageSegment.reply(event.message_id)
            + text(
                "没能私聊发给你（可先加我为好友），为保护隐私不在群里列出。"
                "也可以私聊我发送 /我的记忆。"
            ),
            {"message_id": 1},
        )


# ----------------------------------------------------------------------------- /忘记 <item>


async def test_forget_item_by_number_of_the_last_listing_after_confirmation(app: App, runtime):
    await seed_others(runtime)
    await remember(runtime, "用户养了一条狗", at=DAY)
    await remember(runtime, "用户住在杭州", at=DAY + timedelta(days=1))
    listing = (
        "我记得关于你的 2 条（第 1/1 页，新的在前）：\n"
        "1. [事实 11-21] 你住在杭州\n"
        "2. [事实 11-20] 你养了一条狗\n"
        "删除一条：/忘记 <编号> 或 /忘记 <词语>。"
    )
    await run(
        app,
        (event_of("/我的记忆"), listing),
        (event_of("/忘记 2"), f"确定要删除这 1 条记忆吗？\n· [事实] 你养了一条狗\n{CONFIRM}"),
        (event_of("确认"), "已删除“你养了一条狗”的记忆：事实 1 条。"),
    )
    assert await facts_of(runtime, USER, None) == ["用户住在杭州"]
    await others_untouched(runtime)


async def test_forget_item_number_needs_a_listing_and_cancel_keeps_it(app: App, runtime):
    await remember(runtime, "用户养了一条狗")
    await run(
        app,
        (event_of("/忘记 1"), "请先发送 /我的记忆 查看编号，再用 /忘记 <编号> 删除。"),
        (event_of("/我的记忆"), LISTED_DOG),
        (event_of("/忘记 5"), "没有第 5 条。请先发送 /我的记忆 查看编号，再用 /忘记 <编号> 删除。"),
        (event_of("/忘记 1"), f"确定要删除这 1 条记忆吗？\n· [事实] 你养了一条狗\n{CONFIRM}"),
        (event_of("取消"), "已取消，记忆保持不变。"),
    )
    assert await facts_of(runtime, USER, None) == ["用户养了一条狗"]


async def test_forget_by_word_names_every_match_and_deletes_them_all(app: App, runtime):
    await seed_others(runtime)
    await remember(runtime, "用户OTHER", user=OTHER)  # another person's match stays
    await remember(runtime, "用户的银行密码提示是生日", at=DAY)
    await remember(runtime, "用户的邮箱密码很长", at=DAY + timedelta(days=1))
    await remember(runtime, "用户住在杭州", at=DAY + timedelta(days=2))
    await remember(runtime, "用户的公司密码常换", group=GROUP)  # another chat's match stays
    await run(
        app,
        (
            event_of("/忘记 密码"),
            "确定要删除这 2 条记忆吗？\n"
            "· [事实] 你的邮箱密码很长\n"
            f"· [事实] 你的银行密码提示是生日\n{CONFIRM}",
        ),
        (event_of("确认"), "已删除包含“密码”的记忆：事实 2 条。"),
        (event_of("/忘记 护照"), "没有找到包含“护照”的记忆，什么也没有删。"),
    )
    assert await facts_of(runtime, USER, None) == ["用户住在杭州"]
    assert await facts_of(runtime, USER, GROUP) == ["用户在群里说自己是老师", "用户的公司密码常换"]
    assert await facts_of(runtime, OTHER, None) == ["用户OTHER", "用户是医生"]


async def test_forget_item_in_a_group_touches_only_that_groups_items(app: App, runtime):
    await remember(runtime, "用户养了一条狗")  # private: stays
    await remember(runtime, "用户在群里养了一条狗", group=GROUP)
    await run(
        app,
        (
            event_of("/忘记 狗", group_id=GROUP),
            f"确定要删除你在本群包含“狗”的 1 条记忆吗？{ASK_IN_GROUP}",  # the group reads it
        ),
        (to_bot("确认", group_id=GROUP), "已删除你在本群选中的记忆：事实 1 条。"),
    )
    assert await facts_of(runtime, USER, GROUP) == []
    assert await facts_of(runtime, USER, None) == ["用户养了一条狗"]


async def test_superuser_targets_and_bare_forget_keep_their_meaning(app: App, runtime):
    await remember(runtime, "用户养了一条狗")
    await run(
        app,
        (event_of("/forget user 30001"), "只有超级用户可以删除其他人、整个群或全部的记忆。"),
        (event_of("/忘记 全部"), "只有超级用户可以删除其他人、整个群或全部的记忆。"),
        (event_of("/忘记"), f"将删除你在私聊中的记忆：事实 1 条。{CONFIRM}"),
    )


# ----------------------------------------------------------------------------- /忘记我


async def test_forget_me_deletes_my_turns_memories_and_cached_answers_in_every_chat(
    app: App, runtime
):
    await seed(runtime)  # USER in GROUP, private and 40004; OTHER in GROUP
    await seed_others(runtime)
    await remember(runtime, "用户养了一条狗")
    cache = runtime.memory.parts.database.store(PgAnswerCacheStore)
    now = datetime.now(timezone.utc)
    for user, group in ((USER, None), (USER, 40004), (OTHER, GROUP)):
        await cache.upsert(
            scope="user", user_id=user, group_id=group, question=f"问题{user}{group}",
            question_norm=f"问题{user}{group}", answer="答", source="runtime", embedding=None,
            model=None, now=now, expires_at=None,
        )  # fmt: skip
    await run(
        app,
        (event_of("/忘记我"), FORGET_ME.format(what="对话 3 条、事实 2 条、缓存回答 2 条")),
        (
            event_of("确认"),
            "已删除你在所有会话中的记忆：对话 3 条、事实 2 条、缓存回答 2 条。",
        ),
    )
    for group in (None, GROUP, 40004):
        assert await contents(runtime, USER, group) == []
        assert await facts_of(runtime, USER, group) == []
    assert await contents(runtime, OTHER, GROUP) == ["我的鱼叫泡泡"]
    assert await facts_of(runtime, OTHER, None) == ["用户是医生"]
    scope = ForgetScope(user_id=OTHER)
    assert await cache.delete_scope(scope) == 1  # the other user's cached answer is still there


async def test_forget_me_with_a_space_is_the_same_and_with_more_words_a_search(app: App, runtime):
    await remember(runtime, "用户说我的猫很胖")
    await run(
        app,
        (event_of("/忘记 我"), FORGET_ME.format(what="事实 1 条")),
        (event_of("取消"), "已取消，记忆保持不变。"),
        (
            event_of("/忘记我的猫"),
            f"确定要删除这 1 条记忆吗？\n· [事实] 你说我的猫很胖\n{CONFIRM}",
        ),
    )


# ----------------------------------------------------------------------------- /导出我的记忆


class ExportFile:
    """Matches the ``file`` an upload is asked for: ``temporal-memory-<QQ>.json`` in a folder of
    its own under the data dir's exports, written when the client is asked (``seen``)."""

    name = f"temporal-memory-{USER}.json"

    def __init__(self, runtime: Any) -> None:
        self.exports = runtime.settings.memory_data_dir.resolve() / "exports"
        self.seen: list[Path] = []

    def __eq__(self, other: object) -> bool:
        path = Path(str(other))
        if path.parent.parent != self.exports or path.name != self.name or not path.is_file():
            return False
        self.seen.append(path)
        return True

    def gone(self) -> bool:
        """Every export seen, and its folder, removed after it was sent."""
        return bool(self.seen) and not any(p.exists() or p.parent.exists() for p in self.seen)


def export_file(runtime: Any) -> ExportFile:
    return ExportFile(runtime)


async def test_export_uploads_a_json_file_privately_and_removes_it(app: App, runtime):
    await seed(runtime)
    await remember(runtime, "用户养了一条狗")
    path = export_file(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/导出我的记忆")
        ctx.receive_event(bot, event)
        ctx.should_call_api(
            "upload_private_file",
            {"user_id": USER, "file": path, "name": path.name},
            None,
        )
        ctx.should_call_send(
            event,
            text(f"已把你的记忆导出为文件 {path.name} 发给你：对话 3 条、事实 1 条。"),
            {"message_id": 1},
        )
    assert path.gone()


async def test_export_falls_back_to_text_when_the_client_cannot_upload(app: App, runtime):
    await seed(runtime)
    await remember(runtime, "用户养了一条狗")
    path = export_file(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/exportmem")
        ctx.receive_event(bot, event)
        ctx.should_call_api(
            "upload_private_file",
            {"user_id": USER, "file": path, "name": path.name},
            exception=ApiNotAvailable(),
        )
        ctx.should_call_send(
            event,
            text(
                "你的 QQ 客户端收不了文件，这里是文字版（前 5 条）：对话 3 条、事实 1 条。\n"
                "对话：\n"
                f"· {LOCAL_THEN} 群{GROUP} 你：我的猫叫咪咪\n"
                f"· {LOCAL_THEN} 私聊 你：我的狗叫旺财\n"
                f"· {LOCAL_THEN} 群40004 你：我的鸟叫啾啾\n"
                "记忆：\n"
                "· [事实] 你养了一条狗"
            ),
            {"message_id": 1},
        )
    assert path.gone()


async def test_export_asked_in_a_group_is_sent_privately(app: App, runtime):
    await remember(runtime, "用户在群里养了一条狗", group=GROUP)
    path = export_file(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/导出我的记忆", group_id=GROUP)
        ctx.receive_event(bot, event)
        answer = answer_to(event, "你的记忆不在群里发，我会私聊发给你。")
        ctx.should_call_send(event, answer, {"message_id": 1})
        ctx.should_call_api(
            "upload_private_file",
            {"user_id": USER, "file": path, "name": path.name},
            None,
        )
        ctx.should_call_api(
            "send_private_msg",
            {
                "user_id": USER,
                "message": text(f"已把你的记忆导出为文件 {path.name} 发给你：事实 1 条。"),
            },
            {"message_id": 2},
        )


async def test_export_with_nothing_stored_says_so(app: App, runtime):
    await seed_others(runtime)
    await run(
        app,
        (event_of("/导出我的记忆", user_id=40005), "我这里没有存任何关于你的内容，没有可导出的。"),
    )


# ----------------------------------------------------------------------------- /不记我, /记我

OPTED_OUT_PRIVATE = (
    "好的，从现在起不再记录你在私聊中说的话，也不会从中提炼记忆；发送 /记我 恢复。\n"
    f"已经记住的要一起删除吗？将删除你在私聊中的记忆：对话 1 条。{CONFIRM}"
)


async def chat(app: App, event: Any, answer: str | None = "好的") -> None:
    await run(app, (event, answer))


async def test_opted_out_private_chat_is_answered_but_nothing_kept_until_opt_in(
    app: App, runtime, model
):
    await seed(runtime)
    await run(
        app,
        (event_of("/不记我"), OPTED_OUT_PRIVATE),
        (event_of("取消"), "已取消，记忆保持不变。"),
        (event_of("/不记我"), "你在私聊中已经是不记录状态。发送 /记我 恢复。"),
    )
    await chat(app, event_of("我的新手机是小米"))
    assert model.prompts  # still answered by the model
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]  # kept what existed
    # The passive group recorder still keeps this person's group messages.
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    await chat(app, event_of("群里说一句", group_id=GROUP), None)
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪", "群里说一句"]

    await run(app, (event_of("/记我"), "好的，我会重新记住你在私聊中说的话。"))
    await chat(app, event_of("我的新手机是华为"))
    assert await contents(runtime, USER, None) == ["我的狗叫旺财", "我的新手机是华为", "好的"]


async def test_opt_out_everywhere_offers_to_forget_me_and_stops_the_group_recorder(
    app: App, runtime
):
    await seed(runtime)
    await run(
        app,
        (
            event_of("/不记我 全部"),
            "好的，从现在起不再记录你在所有会话中说的话，也不会从中提炼记忆；发送 /记我 恢复。\n"
            f"已经记住的要一起删除吗？将删除你所有会话中的记忆：对话 3 条。{CONFIRM}",
        ),
        (event_of("确认"), "已删除你所有会话中的记忆：对话 3 条。"),
    )
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    await chat(app, event_of("群里说一句", group_id=GROUP), None)
    await chat(app, event_of("群里另一个人说一句", user_id=OTHER, group_id=GROUP), None)
    assert await contents(runtime, USER, GROUP) == []
    assert await contents(runtime, OTHER, GROUP) == ["我的鱼叫泡泡", "群里另一个人说一句"]
    await run(
        app,
        (
            event_of("/记我", group_id=GROUP),
            "你设置过所有会话都不记录，这里仍不会记录；发送 /记我 全部 全部恢复。",
        ),
        (event_of("/记我 全部"), "好的，我会重新记住你在所有会话中说的话。"),
    )
    await chat(app, event_of("群里再说一句", group_id=GROUP), None)
    assert await contents(runtime, USER, GROUP) == ["群里再说一句"]


# ----------------------------------------------------------------------------- /群记忆


def group_event(value: str, role: str, *, user_id: int = USER) -> Any:
    payload = message_payload([text_seg(value)], user_id=user_id, group_id=GROUP)
    payload["sender"]["role"] = role
    event = Adapter.json_to_event(payload)
    assert isinstance(event, MessageEvent)
    return event


async def test_group_admin_switches_memory_off_for_everyone_in_that_group_only(app: App, runtime):
    await seed(runtime)
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    await run(
        app,
        (
            group_event("/群记忆 关", "member"),
            "只有群主、管理员或超级用户可以开关本群的记忆。",
        ),
        (
            group_event("/群记忆 关", "admin"),
            "已关闭本群的记忆：从现在起不记录本群任何人的消息，我照常聊天。"
            "已有的记忆保留（各人可用 /忘记 删除）。发送 /群记忆 开 恢复。",
        ),
        (group_event("/groupmem off", "owner"), "本群的记忆本来就是关闭的。"),
        (group_event("群里说一句", "member"), None),
        (group_event("另一个人说一句", "member", user_id=OTHER), None),
        (event_of("在另一个群说", group_id=40004), None),
    )
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪"]
    assert await contents(runtime, OTHER, GROUP) == ["我的鱼叫泡泡"]
    assert await contents(runtime, USER, 40004) == ["我的鸟叫啾啾", "在另一个群说"]
    await run(
        app,
        (group_event("/群记忆 开", "owner"), "已开启本群的记忆。"),
        (group_event("群里再说一句", "member"), None),
    )
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪", "群里再说一句"]


# ----------------------------------------------------------------------------- what a delete takes

PEANUT_CHAT = [  # USER's private chat, oldest first
    ("user", "我对花生过敏"),
    ("assistant", "好的，记住了"),
    ("user", "我住在杭州"),
    ("assistant", "杭州不错"),
    ("user", "推荐点零食"),
    ("assistant", "你对花生过敏，推荐海苔吧"),
]


async def peanut_chat(runtime: Any, group: int | None = None) -> dict[str, int]:
    """PEANUT_CHAT stored in the chat, with a fact citing its first turn, a fact citing the
    third and a summary of the whole batch; the turn ids by text."""
    from memory_core.models import TurnInput

    ids = {}
    for n, (role, content) in enumerate(PEANUT_CHAT):
        stored = await runtime.memory.parts.writer.add_turn(
            TurnInput(user_id=USER, group_id=group, role=role, content=content,
                      created_at=THEN + timedelta(minutes=n))
        )  # fmt: skip
        ids[content] = stored.turn.id
    batch = list(ids.values())
    for item in (
        ExtractedMemory("facts", "用户对花生过敏", source_turn_ids=(ids["我对花生过敏"],)),
        ExtractedMemory("facts", "用户住在杭州", source_turn_ids=(ids["我住在杭州"],)),
        ExtractedMemory("summary", "用户说自己对花生过敏，住在杭州。"),
    ):
        await runtime.memory.parts.keeper.save(
            [item], USER, group, source_turn_ids=batch, stated_at=THEN
        )
    return ids


async def holding(runtime: Any, word: str) -> list[str]:
    """What of USER's private chat still holds ``word``: turns, memories, export lines."""
    from memory_core.personal import export_person

    export = (
        await export_person(runtime.memory.parts.database, USER, tz=runtime.memory.parts.tz)
    ).as_json()
    found = [t["content"] for t in export["turns"] if t["chat"] == "private"]
    found += [m["content"] for m in export["memories"] if m["chat"] == "private"]
    found += [c["question"] + c["answer"] for c in export["cached_answers"]]
    return [text for text in found if word in text]


async def test_forget_a_word_takes_every_turn_echo_fact_and_summary_holding_it(
    app: App, runtime, model
):
    await seed_others(runtime)
    await peanut_chat(runtime)
    await run(
        app,
        (
            event_of("/忘记 花生"),
            "确定要删除这 1 条记忆吗？\n"
            "· [事实] 你对花生过敏\n"
            "连同这些对话：\n"
            "· 你：我对花生过敏\n"
            "· 小诗：好的，记住了\n"
            "· 小诗：你对花生过敏，推荐海苔吧\n"
            "以及提到它们的摘要 1 条。\n"
            f"一共：对话 1 条、机器人回复 2 条、事实 1 条、摘要 1 条。\n{CONFIRM}",
        ),
        (
            event_of("确认"),
            "已删除包含“花生”的记忆：对话 1 条、机器人回复 2 条、事实 1 条、摘要 1 条。",
        ),
    )
    assert await holding(runtime, "花生") == []
    assert await contents(runtime, USER, None) == ["我住在杭州", "杭州不错", "推荐点零食"]
    assert await facts_of(runtime, USER, None) == ["用户住在杭州"]
    await others_untouched(runtime)
    await run(app, (event_of("还有什么零食"), "好的"))  # the next prompt holds none of it
    assert "花生" not in model.text() and "杭州" in model.text()


async def test_forget_by_number_in_a_group_counts_the_turns_it_takes_and_names_none(
    app: App, runtime
):
    await peanut_chat(runtime, group=GROUP)
    listing_sent = {"message_id": 1}
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/我的记忆", group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_api("send_private_msg", {"user_id": USER, "message": text(
            f"在群 {GROUP} 中我记得关于你的 2 条（第 1/1 页，新的在前）：\n"
            f"1. [事实 {THEN.astimezone(ZoneInfo('Asia/Shanghai')):%m-%d}] 你住在杭州\n"
            f"2. [事实 {THEN.astimezone(ZoneInfo('Asia/Shanghai')):%m-%d}] 你对花生过敏\n"
            "删除一条：/忘记 <编号> 或 /忘记 <词语>。")}, listing_sent)  # fmt: skip
        ctx.should_call_send(
            event, MessageSegment.reply(event.message_id) + text(MYMEM_SENT), listing_sent
        )
    await run(
        app,
        (
            event_of("/忘记 2", group_id=GROUP),
            "确定要删除你在本群的第 2 条记忆吗？连同对话 1 条、机器人回复 2 条、摘要 1 条。"
            + ASK_IN_GROUP,
        ),
        (
            to_bot("确认", group_id=GROUP),
            "已删除你在本群选中的记忆：对话 1 条、机器人回复 2 条、事实 1 条、摘要 1 条。",
        ),
    )
    assert await contents(runtime, USER, GROUP) == ["我住在杭州", "杭州不错", "推荐点零食"]
    assert await facts_of(runtime, USER, GROUP) == ["用户住在杭州"]


async def test_a_fact_drawn_from_a_whole_batch_names_its_turns_short_before_it_asks(
    app: App, runtime
):
    from memory_core.models import TurnInput

    batch = []
    for n in range(10):
        role = "user" if n % 2 == 0 else "assistant"
        content = f"第{n}句话，" + "很长很长的内容" * 6 if n == 0 else f"第{n}句话"
        stored = await runtime.memory.parts.writer.add_turn(
            TurnInput(user_id=USER, role=role, content=content,
                      created_at=THEN + timedelta(minutes=n))
        )  # fmt: skip
        batch.append(stored.turn.id)
    # A row stored before facts cited their lines: its sources are the whole batch.
    await runtime.memory.parts.keeper.save(
        [ExtractedMemory("facts", "用户说了很多话")], USER, source_turn_ids=batch, stated_at=THEN
    )
    day = THEN.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%m-%d")
    listing = (
        f"我记得关于你的 1 条（第 1/1 页，新的在前）：\n1. [事实 {day}] 你说了很多话\n"
        "删除一条：/忘记 <编号> 或 /忘记 <词语>。"
    )
    await run(app, (event_of("/我的记忆"), listing))
    question = (
        "确定要删除这 1 条记忆吗？\n"
        "· [事实] 你说了很多话\n"
        "连同这些对话：\n"
        "· 你：第0句话，很长很长的内容很长很长的内容很长很长的内容很长很…\n"
        + "".join(f"· {'你' if n % 2 == 0 else '小诗'}：第{n}句话\n" for n in range(1, 8))
        + "…… 共 10 条\n"
        f"一共：对话 5 条、机器人回复 5 条、事实 1 条。\n{CONFIRM}"
    )
    await run(
        app,
        (event_of("/忘记 1"), question),
        (event_of("确认"), "已删除“你说了很多话”的记忆：对话 5 条、机器人回复 5 条、事实 1 条。"),
    )
    assert await contents(runtime, USER, None) == []


async def test_in_a_group_other_facts_drawn_from_the_same_turn_are_counted_not_named(
    app: App, runtime
):
    ids = await peanut_chat(runtime, group=GROUP)
    await runtime.memory.parts.keeper.save(
        [ExtractedMemory("facts", "用户不能吃花生酱", source_turn_ids=(ids["我对花生过敏"],))],
        USER, GROUP, source_turn_ids=list(ids.values()), stated_at=THEN - timedelta(days=1),
    )  # fmt: skip
    from memory_core.personal import known_about
    from nonebot_plugin_temporal_memory.commands.self_service import listings

    shown = await known_about(runtime.memory.parts.keeper, USER, GROUP)
    assert [m.content for m in shown] == ["用户住在杭州", "用户对花生过敏", "用户不能吃花生酱"]
    listings.remember((SELF_ID, GROUP, USER), shown)
    await run(
        app,
        (
            event_of("/忘记 2", group_id=GROUP),
            "确定要删除你在本群的第 2 条记忆吗？"
            "连同另外 1 条记忆、对话 1 条、机器人回复 2 条、摘要 1 条。" + ASK_IN_GROUP,
        ),
        (
            to_bot("确认", group_id=GROUP),
            "已删除你在本群选中的记忆：对话 1 条、机器人回复 2 条、事实 2 条、摘要 1 条。",
        ),
    )
    assert await facts_of(runtime, USER, GROUP) == ["用户住在杭州"]


async def test_forget_odd_digits_and_huge_numbers_get_one_short_answer(app: App, runtime):
    await remember(runtime, "用户养了一条狗")
    await run(app, (event_of("/我的记忆"), LISTED_DOG))
    await run(
        app,
        (
            event_of("/忘记 " + "9" * 5000),
            "内容太长（5000 字），请控制在 500 字以内。",  # refused before any handler reads it
        ),
        (event_of("/忘记 ²"), "没有找到包含“²”的记忆，什么也没有删。"),  # a word, not a number
        (
            event_of("/我的记忆 ²"),
            "用法：/我的记忆 [页码]（mymem）查看我记得的关于你的事实和偏好。",
        ),
        (event_of("/我的记忆 " + "9" * 400), LISTED_DOG),  # past the end: the last page
    )
    assert await facts_of(runtime, USER, None) == ["用户养了一条狗"]
