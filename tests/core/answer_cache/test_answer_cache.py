"""The semantic answer cache on the embedded PostgreSQL: lookup order, refusals, forget,
expiry, preload, counters."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.answer_cache.cache import cache_threshold, refusal_reason
from memory_core.answer_cache.store import PgAnswerCacheStore
from memory_core.errors import ConfigError
from memory_core.lang.text import normalize_content
from memory_core.models import ForgetScope
from memory_core.resources import DEFAULTS_DIR
from memory_core.settings import LOCAL_EMBEDDING_MODEL
from memory_core.wiring import preload_answer_cache

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
GROUP_A, GROUP_B = 1001, 1002
DOCKER = "怎么安装Docker"


def preload_file(tmp_path, *pairs: tuple[str, str], extra: str = ""):
    """The operator's config folder holding a preload file of ``pairs``."""
    path = tmp_path / "answer_cache_preload.jsonl"
    lines = [json.dumps({"question": q, "answer": a}, ensure_ascii=False) for q, a in pairs]
    path.write_text("# comment\n\n" + "\n".join(lines) + "\n" + extra, encoding="utf-8")
    return tmp_path


@pytest.fixture
async def cached(memory_factory, tmp_path):
    path = preload_file(tmp_path, (DOCKER, "公共答案：apt install docker.io"))
    return await memory_factory(
        answer_cache_enabled=True,
        answer_cache_threshold=0.8,
        memory_config_dir=path,
    )


async def test_the_cache_is_off_by_default_and_then_does_nothing(memory_factory):
    memory = await memory_factory()
    assert not memory.parts.answer_cache.enabled
    assert await memory.parts.answer_cache.store(DOCKER, "答案", 1) is False
    assert await memory.parts.answer_cache.lookup(DOCKER, 1) is None
    assert "语义缓存：未开启" in (await memory.distilled_stats()).lines_zh()


async def test_lookup_order_is_user_exact_then_public_exact_then_semantic(cached):
    memory = cached
    assert await memory.parts.answer_cache.store(DOCKER, "你的答案", 1, now=T0)

    mine = await memory.parts.answer_cache.lookup(DOCKER + "？", 1, now=T0)
    assert (mine.answer, mine.level) == ("你的答案", "user_exact")
    public = await memory.parts.answer_cache.lookup(DOCKER, 2, now=T0)
    assert (public.answer, public.level) == ("公共答案：apt install docker.io", "public_exact")
    similar = await memory.parts.answer_cache.lookup(DOCKER + "呢", 2, now=T0)
    assert (similar.answer, similar.level) == ("公共答案：apt install docker.io", "semantic")
    assert similar.similarity >= 0.8


async def test_one_users_cached_answer_is_never_served_to_another(cached):
    memory = cached
    await memory.parts.answer_cache.store("如何配置Nginx反向代理", "仅给用户1的答案", 1, now=T0)
    assert (
        await memory.parts.answer_cache.lookup("如何配置Nginx反向代理", 1, now=T0)
    ).answer == "仅给用户1的答案"
    assert await memory.parts.answer_cache.lookup("如何配置Nginx反向代理", 2, now=T0) is None


async def test_a_users_cached_answer_is_served_only_in_the_chat_it_was_cached_in(cached):
    memory = cached
    question = "张伟的手机号13812345678怎么校验格式"
    private = "张伟的手机号13812345678是11位，以1开头，格式正确。"
    assert await memory.parts.answer_cache.store(question, private, 1, now=T0)

    # Neither the exact question nor a paraphrase reaches the same person's groups.
    for group in (GROUP_A, GROUP_B):
        assert await memory.parts.answer_cache.lookup(question, 1, group, now=T0) is None
        assert await memory.parts.answer_cache.lookup(question + "呢", 1, group, now=T0) is None
    mine = await memory.parts.answer_cache.lookup(question, 1, now=T0)
    assert (mine.answer, mine.level) == (private, "user_exact")
    near = await memory.parts.answer_cache.lookup(question + "呢", 1, now=T0)
    assert (near.answer, near.level) == (private, "semantic")

    # Cached again in a group, it is that group's own entry; the private one stays.
    assert await memory.parts.answer_cache.store(question, "群A的答案", 1, GROUP_A, now=T0)
    in_a = await memory.parts.answer_cache.lookup(question, 1, GROUP_A, now=T0)
    assert in_a.answer == "群A的答案"
    assert await memory.parts.answer_cache.lookup(question, 1, GROUP_B, now=T0) is None
    assert (await memory.parts.answer_cache.lookup(question, 1, now=T0)).answer == private
    # Public entries are served in every chat.
    for group in (None, GROUP_A, GROUP_B):
        found = await memory.parts.answer_cache.lookup(DOCKER, 1, group, now=T0)
        assert found.level == "public_exact"


TIME_OR_PERSONAL = [
    "今天天气怎么样",
    "明天会下雨吗",
    "现在几点了",
    "刚才说的是什么",
    "最近有什么新闻",
    "周末去哪玩",
    "我叫什么名字",
    "我的生日是哪天",
    "推荐适合我们的餐厅",
    "What's my name",
    "what time is it now",
    "weather tomorrow?",
    "他是谁",
    "上次聊到哪了",
    "你还记得吗",
]


@pytest.mark.parametrize("question", TIME_OR_PERSONAL)
async def test_a_time_dependent_or_personal_question_is_never_served_even_if_cached(
    cached, question
):
    memory = cached
    # Put the exact question in the cache behind the guard's back, public and for the user.
    store = memory.parts.database.store(PgAnswerCacheStore)
    vector = await memory.parts.embedder.embed_query(normalize_content(question))
    for scope, user in (("public", None), ("user", 1)):
        await store.upsert(
            scope=scope,
            user_id=user,
            group_id=None,
            question=question,
            question_norm=normalize_content(question),
            answer="过时或属于别人的答案",
            source="runtime",
            embedding=vector,
            model=memory.parts.embedder.model,
            now=T0,
            expires_at=None,
        )
    assert await memory.parts.answer_cache.lookup(question, 1, now=T0) is None
    assert await memory.parts.answer_cache.store(question, "答案", 1, now=T0) is False
    assert refusal_reason(question) is not None


async def test_a_question_that_recalled_personal_memory_is_not_served_or_stored(cached):
    memory = cached
    assert await memory.parts.answer_cache.lookup(DOCKER, 1, personal=True, now=T0) is None
    assert (
        await memory.parts.answer_cache.store("如何配置Nginx", "答案", 1, personal=True, now=T0)
        is False
    )
    assert await memory.parts.answer_cache.lookup("如何配置Nginx", 1, now=T0) is None


async def test_a_semantic_hit_needs_the_same_numbers(memory_factory, tmp_path):
    path = preload_file(tmp_path, ("HTTP 404 是什么意思", "找不到页面"))
    memory = await memory_factory(
        answer_cache_enabled=True, answer_cache_threshold=0.3, memory_config_dir=path
    )
    assert (
        await memory.parts.answer_cache.lookup("HTTP 404 是啥意思", 1, now=T0)
    ).answer == "找不到页面"
    assert await memory.parts.answer_cache.lookup("HTTP 500 是什么意思", 1, now=T0) is None


async def test_forget_deletes_the_users_cached_answers_and_keeps_public_ones(cached):
    memory = cached
    await memory.parts.answer_cache.store("如何配置Nginx", "群A里的答案", 1, GROUP_A, now=T0)
    await memory.parts.answer_cache.store("如何学习Rust", "群B里的答案", 1, GROUP_B, now=T0)
    await memory.parts.answer_cache.store("如何写单元测试", "用户2的答案", 2, GROUP_A, now=T0)

    await memory.parts.forgetting.forget(ForgetScope(user_id=1, group_id=GROUP_A))
    assert await memory.parts.answer_cache.lookup("如何配置Nginx", 1, GROUP_A, now=T0) is None
    rust = await memory.parts.answer_cache.lookup("如何学习Rust", 1, GROUP_B, now=T0)
    assert rust.answer == "群B里的答案"
    await memory.parts.forgetting.forget(ForgetScope(user_id=1))
    assert await memory.parts.answer_cache.lookup("如何学习Rust", 1, GROUP_B, now=T0) is None
    assert (
        await memory.parts.answer_cache.lookup("如何写单元测试", 2, GROUP_A, now=T0)
    ).answer == "用户2的答案"
    assert (await memory.parts.answer_cache.lookup(DOCKER, 1, now=T0)).level == "public_exact"
    await memory.parts.forgetting.forget(ForgetScope(everything=True))
    assert await memory.parts.answer_cache.lookup("如何写单元测试", 2, GROUP_A, now=T0) is None
    assert (await memory.parts.answer_cache.lookup(DOCKER, 2, now=T0)).level == "public_exact"


async def test_entries_expire_after_the_ttl_and_maintenance_removes_them(memory_factory):
    memory = await memory_factory(answer_cache_enabled=True)  # a week (wiring.ANSWER_CACHE_TTL)
    await memory.parts.answer_cache.store("如何配置Nginx", "答案", 1, now=T0)
    assert await memory.parts.answer_cache.lookup("如何配置Nginx", 1, now=T0 + timedelta(hours=167))
    assert (
        await memory.parts.answer_cache.lookup("如何配置Nginx", 1, now=T0 + timedelta(hours=169))
        is None
    )
    await memory.maintain_distilled(now=T0 + timedelta(hours=170))
    assert await memory.parts.answer_cache.entry_counts(T0) == {"public": 4}  # the shipped preload


async def test_hit_rates_are_counted_by_level_for_memstat(cached):
    memory = cached
    await memory.parts.answer_cache.store(DOCKER, "你的答案", 1, now=T0)
    await memory.parts.answer_cache.lookup(DOCKER, 1, now=T0)  # user exact
    await memory.parts.answer_cache.lookup(DOCKER, 2, now=T0)  # public exact
    await memory.parts.answer_cache.lookup(DOCKER + "呢", 2, now=T0)  # semantic
    await memory.parts.answer_cache.lookup("完全无关的问题", 2, now=T0)  # miss
    await memory.parts.answer_cache.lookup("今天天气怎么样", 2, now=T0)  # refused
    stats = await memory.distilled_stats(now=T0)
    assert stats.cache_hits() == {"user_exact": 1, "public_exact": 1, "semantic": 1}
    assert stats.cache_hit_rate == pytest.approx(3 / 4)
    assert stats.lines_zh()[-2:] == [
        "语义缓存：公共 1 条，用户 1 条",
        "缓存命中率：75.0%（用户精确 1，公共精确 1，语义 1，未命中 1，不可缓存 1）",
    ]


async def test_preload_skips_time_dependent_questions_and_drops_removed_entries(
    memory_factory, tmp_path
):
    path = preload_file(
        tmp_path, (DOCKER, "答案一"), ("今天星期几", "不该缓存"), ("什么是RAG", "检索增强")
    )
    memory = await memory_factory(answer_cache_enabled=True, memory_config_dir=path)
    assert await memory.parts.answer_cache.entry_counts() == {"public": 2}
    preload_file(tmp_path, (DOCKER, "答案二"))
    assert await preload_answer_cache(memory.parts) == 1
    assert (await memory.parts.answer_cache.lookup(DOCKER, 1)).answer == "答案二"
    assert await memory.parts.answer_cache.lookup("什么是RAG", 1) is None


async def test_a_malformed_preload_line_is_named_and_does_not_stop_start_up(
    memory_factory, tmp_path, caplog
):
    path = preload_file(tmp_path, (DOCKER, "答案"), extra='{"question": "缺答案"}\n')
    memory = await memory_factory(answer_cache_enabled=True, memory_config_dir=path)
    assert any("preload.jsonl:4" in r.message for r in caplog.records)
    with pytest.raises(ConfigError, match=r"preload.jsonl:4"):
        await preload_answer_cache(memory.parts)


async def test_the_shipped_preload_example_loads(memory_factory):
    memory = await memory_factory(answer_cache_enabled=True)
    assert await memory.parts.answer_cache.entry_counts() == {"public": 4}
    lines = (DEFAULTS_DIR / "answer_cache_preload.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum(1 for line in lines if line.startswith("{")) == 4


def test_cache_thresholds_are_per_model_with_the_setting_winning():
    assert cache_threshold(LOCAL_EMBEDDING_MODEL) == 0.97
    assert cache_threshold("someone/unknown") == 0.95
    assert cache_threshold(LOCAL_EMBEDDING_MODEL, 0.9) == 0.9
