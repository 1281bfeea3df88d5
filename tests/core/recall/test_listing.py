"""What /recall lists (``recall.listing``): only turns and facts about the query, each once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memory_core.distill.memory import ExtractedMemory
from memory_core.lang.keywords import query_words
from memory_core.recall.listing import excerpt, list_recall, mentions
from memory_core.settings import BUNDLED_MODEL_RECALL_FLOOR, MemorySettings
from tests.turns import said

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
GROUP = 300
CHAT = [
    ("user", "周会改到周四下午三点"),
    ("assistant", "好的，周会改到周四下午三点，我记住了。"),
    ("user", "我的猫叫咪咪"),
    ("assistant", "咪咪这个名字真可爱！"),
    ("user", "我对花生过敏"),
    ("user", "今天中午吃了牛肉面"),
    ("user", "我女儿下个月过生日"),
]


async def chatted(memory, lines=CHAT, *, days_ago: float = 3):  # type: ignore[no-untyped-def]
    at = NOW - timedelta(days=days_ago)
    await memory.parts.writer.add_dialogues(
        [
            said(1, text, at + timedelta(minutes=i), GROUP, role=role)
            for i, (role, text) in enumerate(lines)
        ]
    )


def texts(listing) -> list[str]:  # type: ignore[no-untyped-def]
    return [t.content for t in listing.turns]


def test_a_word_of_the_query_must_be_said_not_one_of_its_bigrams() -> None:
    def said_in(query: str, text: str) -> bool:
        return mentions(query_words(query), text)

    assert said_in("周会", "周会改到周四下午三点")
    assert said_in("猫叫什么", "我的猫叫咪咪")  # 什么 is a question word
    assert said_in("鱼", "我的鱼叫泡泡")
    assert said_in("订单 ORD-123456", "单号 ord123456")
    assert said_in("的周会", "周会改到周四")  # what 昨天的周会 leaves once its time is read
    assert said_in("的士", "打了个的士") and not said_in("我们的", "我的猫叫咪咪")
    assert not said_in("潜水艇", "昨天去潜水了")
    assert not said_in("我的猫", "我的狗叫旺财")
    assert not said_in("什么", "我的猫叫咪咪")  # nothing left to look for
    assert not said_in("ORD-123456", "words 99")


async def test_the_bundled_model_lists_nothing_for_words_never_said(memory_factory, local):
    memory = await memory_factory(embedder=local)
    assert memory.parts.settings.recall_floor == BUNDLED_MODEL_RECALL_FLOOR
    await chatted(memory)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户对花生过敏")], 1, GROUP, stated_at=NOW
    )
    for query in ("潜水艇", "量子计算", "火车票"):
        listing = await list_recall(memory.parts, 1, query, GROUP, now=NOW, items=5)
        assert listing.empty, (query, texts(listing), listing.facts)
        assert listing.turns == () and listing.facts == ()
    # Looking is not using: the fact's use count, which ranks it for the prompt, is unchanged.
    [fact] = await memory.parts.keeper.recall_by_type(1, GROUP, "facts", now=NOW)
    assert fact.access_count == 0


async def test_the_bundled_model_finds_a_said_word_and_a_meaning_above_its_floor(
    memory_factory, local
):
    memory = await memory_factory(embedder=local)
    await chatted(memory)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户对花生过敏")], 1, GROUP, stated_at=NOW
    )
    found = await list_recall(memory.parts, 1, "周会", GROUP, now=NOW, items=5)
    assert sorted(texts(found)) == [
        "周会改到周四下午三点",
        "好的，周会改到周四下午三点，我记住了。",
    ]
    assert found.facts == ()
    # No word in common: found by meaning (cosines 0.91, 0.92 and 0.91, measured), and
    # nothing unrelated is.
    assert texts(await list_recall(memory.parts, 1, "孩子生日", GROUP, now=NOW, items=5)) == [
        "我女儿下个月过生日"
    ]
    cat = await list_recall(memory.parts, 1, "猫咪", GROUP, now=NOW, items=5)
    assert sorted(texts(cat)) == ["咪咪这个名字真可爱！", "我的猫叫咪咪"]  # both about the cat
    allergy = await list_recall(memory.parts, 1, "坚果过敏", GROUP, now=NOW, items=5)
    assert texts(allergy) == ["我对花生过敏"]
    assert [h.memory.content for h in allergy.facts] == ["用户对花生过敏"]


async def test_meaning_alone_counts_from_the_configured_floor(memory_factory):
    # The test embedder's cosine of "咪咪猫" to "我的猫叫咪咪" is 0.32 (one bigram of two and
    # of five shared), to "咪咪这个名字真可爱！" 0.24; neither holds the query's word.
    settings = {"memory_dsn": None}
    assert MemorySettings(**settings, embedding_model="other/model").recall_floor is None
    for floor, expected in ((0.3, ["我的猫叫咪咪"]), (0.5, [])):
        memory = await memory_factory(memory_recall_floor=floor)
        await chatted(memory)
        listing = await list_recall(memory.parts, 1, "咪咪猫", GROUP, now=NOW, items=5)
        assert texts(listing) == expected, floor
        await memory.aclose()


async def test_the_same_words_are_listed_once_the_best_placed_one(memory_factory):
    memory = await memory_factory()
    await chatted(
        memory,
        [
            ("user", "周会几点？"),
            ("user", "周会几点?"),
            ("assistant", "周会几点？"),
            ("user", "周会 几点？"),
        ],
    )
    listing = await list_recall(memory.parts, 1, "周会", GROUP, now=NOW, items=5)
    assert len(listing.turns) == 2  # "周会几点？" in any width, and "周会 几点？"
    assert {t.content for t in listing.turns} <= {"周会几点？", "周会几点?", "周会 几点？"}


async def test_skipped_turns_are_left_out_of_the_list_and_the_full_view(memory_factory):
    memory = await memory_factory()
    await chatted(memory, [("user", "周会改到周四下午三点"), ("user", "/recall 周会")])

    def skip(turn):  # type: ignore[no-untyped-def]
        return turn.content.startswith("/recall")

    listing = await list_recall(memory.parts, 1, "周会", GROUP, now=NOW, items=5, skip=skip)
    assert texts(listing) == ["周会改到周四下午三点"]
    full = await list_recall(memory.parts, 1, "周会", GROUP, now=NOW, items=5, full=True, skip=skip)
    assert full.windows is not None
    assert [t.content for t in full.windows.turns] == ["周会改到周四下午三点"]


async def test_a_question_about_a_time_lists_what_was_said_then(memory_factory):
    memory = await memory_factory()
    await chatted(memory, [("user", "下午去银行办卡")], days_ago=1)
    await chatted(memory, [("user", "周末去爬山")], days_ago=4)
    listing = await list_recall(memory.parts, 1, "昨天聊了什么", GROUP, now=NOW, items=5)
    assert texts(listing) == ["下午去银行办卡"]


def test_a_listed_line_is_cut_around_the_match_and_keeps_its_digits_whole() -> None:
    text = (
        "我刚刚拿到快递通知了，菜鸟驿站那边说东西到了，取件码4-2-1187，记得下班前去拿，不然要退回"
    )
    cut = excerpt(text, query_words("取件码是多少"), 30)
    assert "取件码4-2-1187" in cut and cut.startswith("…") and len(cut) <= 30
    # A run the window would split and no match touches is left out, not cut in two.
    cut = excerpt(text, query_words("快递"), 30)
    assert cut.endswith("取件码…") and "4-2" not in cut
    # No match: the line's start, as before.
    assert excerpt(text, query_words("潜水艇"), 30).startswith("我刚刚拿到快递")
    assert excerpt("短句", query_words("短句"), 30) == "短句"
