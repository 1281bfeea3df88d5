"""The optional reranker (``RERANK_*``) against a real ``/rerank`` server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from memory_core.errors import ConfigError
from memory_core.models import TurnInput
from memory_core.providers.rerank import build_reranker
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings
from tests.fakes import Loopback, json_response

SH = timezone(timedelta(hours=8))
NOW = datetime(2024, 1, 15, 10, 0, tzinfo=SH)
MODEL = "BAAI/bge-reranker-v2-m3"


@dataclass
class RerankServer:
    """Scores a document by whether it contains ``favourite``; or fails; or, with ``hung``,
    answers nothing until ``released`` is set (the fixture sets it when the test is over), so a
    recall that came back cannot have had an answer, however slow the machine."""

    favourite: str = ""
    status: int = 200
    hung: bool = False
    released: threading.Event = field(default_factory=threading.Event)
    extra_results: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    answered: int = 0
    url: str = ""

    async def respond(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/rerank":
            return json_response(404, {})
        payload = json.loads(request.content)
        self.requests.append(payload)
        if self.hung:
            await asyncio.to_thread(self.released.wait, 300)  # a bound against a stuck test
        self.answered += 1
        if self.status != 200:
            return json_response(
                self.status, {"error": {"message": f"stand-in says {self.status}"}}
            )
        results = [
            {"index": i, "relevance_score": 0.9 if self.favourite in doc else 0.1 / (i + 1)}
            for i, doc in enumerate(payload["documents"])
        ]
        return json_response(200, {"results": results + self.extra_results})


@pytest.fixture
def rerank_server() -> Iterator[RerankServer]:
    """The stand-in on a real loopback socket: the reranker is built from settings."""
    stub = RerankServer()
    served = Loopback(stub.respond)
    stub.url = f"{served.origin}/v1"
    yield stub
    stub.released.set()
    served.close()


def said(text: str, minutes_ago: float, user: int = 1, group: int | None = None) -> TurnInput:
    return TurnInput(
        user_id=user,
        group_id=group,
        role="user",
        content=text,
        created_at=NOW - timedelta(minutes=minutes_ago),
    )


MINE = [
    said("体检的结果下周才出来", 300),
    said("周末去看电影，看的是科幻片", 200),
    said("医院体检要空腹去，早上不能吃饭", 100),
    said("晚饭吃了火锅，有点辣", 50),
]


async def open_with_reranker(memory_factory, server: RerankServer, **overrides: Any):
    values: dict[str, Any] = dict(
        rerank_base_url=server.url,
        rerank_model=MODEL,
        # Far longer than a loopback answer takes on a loaded machine: the answering tests
        # must not fall back to the fused order because a timer ran out first.
        rerank_deadline=30.0,
    )
    values.update(overrides)
    return await memory_factory(**values)


def anchor_texts(result) -> list[str]:
    contents = {t.id: t.content for t in result.turns}
    return [contents[w.anchor_id] for w in result.windows]


async def fused_order(memory_factory, query: str, top_n: int) -> list[str]:
    """MINE stored once, and the order recall gives without a reranker."""
    plain = await memory_factory()
    await plain.parts.writer.add_dialogues(MINE)
    return anchor_texts(
        await plain.parts.retriever.recall(
            1, query, options=RecallOptions(top_n=top_n, window_size=0, now=NOW)
        )
    )


async def test_the_reranker_reorders_the_fused_candidates(memory_factory, rerank_server):
    fused = await fused_order(memory_factory, "体检", top_n=4)
    assert len(fused) == 4
    rerank_server.favourite = fused[-1]  # the stand-in prefers the fused order's last
    memory = await open_with_reranker(memory_factory, rerank_server)

    result = await memory.parts.retriever.recall(
        1, "体检", options=RecallOptions(top_n=4, window_size=0, now=NOW)
    )

    assert anchor_texts(result)[0] == fused[-1]
    (request,) = rerank_server.requests
    assert request["model"] == MODEL
    assert request["query"] == "体检"
    assert request["top_n"] == len(request["documents"])
    assert sorted(request["documents"]) == sorted(fused)


async def test_reranking_never_brings_in_another_sessions_turns(memory_factory, rerank_server):
    rerank_server.favourite = "体检"
    # Indices the reranker was never sent must not turn into results.
    rerank_server.extra_results = [
        {"index": 99, "relevance_score": 5.0},
        {"index": -1, "relevance_score": 5.0},
    ]
    memory = await open_with_reranker(memory_factory, rerank_server)
    others = [said(f"体检中心的体检套餐 {i}", 10 + i, user=2 + i) for i in range(30)]
    others += [said(f"群里在说体检的事 {i}", 5 + i, user=1, group=700) for i in range(30)]
    await memory.parts.writer.add_dialogues(MINE + others)

    result = await memory.parts.retriever.recall(
        1, "体检", options=RecallOptions(top_n=4, window_size=1, now=NOW)
    )

    assert result.turns
    assert {t.session_key for t in result.turns} == {"1"}
    sent = {doc for request in rerank_server.requests for doc in request["documents"]}
    assert sent <= {turn.content for turn in MINE}


@pytest.mark.parametrize("failure", ["hung", "HTTP 500"])
async def test_a_failing_reranker_leaves_the_fused_order_within_its_deadline(
    memory_factory, rerank_server, caplog, failure
):
    fused = await fused_order(memory_factory, "体检", top_n=3)
    if failure == "hung":
        rerank_server.hung = True
    else:
        rerank_server.status = 500
    memory = await open_with_reranker(memory_factory, rerank_server, rerank_deadline=0.5)
    caplog.set_level(logging.WARNING, logger="memory_core.recall.retriever")
    results = []
    for _ in range(2):
        results.append(
            await asyncio.wait_for(
                memory.parts.retriever.recall(
                    1, "体检", options=RecallOptions(top_n=3, window_size=0, now=NOW)
                ),
                120,  # a recall waiting for the hung stand-in fails here instead of hanging
            )
        )

    # Both recalls came back without the stand-in's answer: the deadline, not a reply, ended
    # the wait (the hung stand-in answers nothing before the test is over).
    assert len(rerank_server.requests) >= 1
    if failure == "hung":
        assert rerank_server.answered == 0
    assert [anchor_texts(result) for result in results] == [fused, fused]
    warnings = [r for r in caplog.records if "reranker failed" in r.getMessage()]
    assert len(warnings) == 1  # logged once for the outage, not once a recall


def test_no_reranker_is_built_without_a_model_and_a_bad_url_is_named():
    assert build_reranker(MemorySettings()) is None
    with pytest.raises(ConfigError, match="RERANK_BASE_URL"):
        build_reranker(MemorySettings(rerank_model=MODEL, rerank_base_url="ftp://nowhere"))


async def test_the_debugger_shows_the_rerankers_score_of_each_candidate(
    memory_factory, rerank_server
):
    from memory_core.console import trace_recall

    rerank_server.favourite = "空腹"
    memory = await open_with_reranker(memory_factory, rerank_server)
    await memory.parts.writer.add_dialogues(MINE)

    trace = await trace_recall(memory.parts, user_id=1, group_id=None, message="体检", now=NOW)

    scores = {c.turn.content: c.rerank for c in trace.candidates if c.turn is not None}
    assert scores["医院体检要空腹去，早上不能吃饭"] == pytest.approx(0.9)
    assert trace.candidates[0].turn is not None and "空腹" in trace.candidates[0].turn.content
    assert all(s is not None and s < 0.9 for t, s in scores.items() if "空腹" not in t)
