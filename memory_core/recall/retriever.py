"""Session-scoped recall: vector and keyword channels, time ranges, fusion, windows.
Callers reach it as ``memory.parts.retriever``; ranking maths lives in ``ranking.py``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..dialogue.index_store import PgVectorIndexStore
from ..dialogue.recall_store import (
    AnchorCandidate,
    AnchorFilters,
    KeywordCandidate,
    PgRecallStore,
    RecallScope,
)
from ..dialogue.vector_index import VectorIndex
from ..errors import EmbeddingError, RerankError
from ..lang.keywords import required_phrases, weighted_conversation_terms
from ..lang.names import asked_about, named_speakers, without_names
from ..lang.text import scrub
from ..lang.timerange import TimeQuery, analyse_query
from ..models import MemoryTurn, RecallResult, generate_session_key
from ..pictures.recall import latest_pictures, names_a_picture
from ..providers.embedding import Embedder
from ..providers.rerank import ApiReranker
from ..settings import LOCAL_EMBEDDING_MODEL, MemorySettings, RetrievalMode
from ..stages import stage
from ..storage.database_handle import Database
from .fusion import FUSIONS, FusionRecipe, KeywordEvidence
from .options import DEFAULT_RECALL, RecallOptions
from .ranking import (
    ANCHOR_FLOOR,
    NO_FLOOR,
    Channel,
    DecayPolicy,
    RankedAnchor,
    TimeScope,
    assemble_windows,
    decay_for_match,
    decayed_order,
    evidence_windows,
    fuse_channels,
    merge_time_candidates,
    rank_anchors,
)
from .sharing import GroupSharing
from .statements import statements_first

log = logging.getLogger(__name__)

CANDIDATES_PER_ANCHOR = 4
MIN_CANDIDATES = 20
# The participants a query may name are the sender names on the scope's last this many turns.
SPEAKER_SCAN_TURNS = 2_000
# The fusion's constants, settings until 2026-12-07 that no operator changed. Decay: older than
# a week weighs less, down to 0.97 with a 30-day half-life (0.9 let yesterday's chatter beat a
# month-old fact; bench/RESULTS.md, "Time-decay floor"), and only between near ties: when the
# best two cosines differ by less than 0.005 (measured for the local e5 model on every public
# set, bench/RESULTS.md, "Decay that knows a clear match"; None = decay always).
DECAY = DecayPolicy(after_days=7.0, half_life_days=30.0, min_weight=0.97)
DECAY_TIE_MARGIN: float | None = 0.005
# Reciprocal-rank fusion's k, the common 60; the keyword and time lists count as much as the
# vector list (the recipes weigh the keyword list per query, recall.fusion).
RRF_K = 60.0
# Both channels fused by plain reciprocal rank (settings until 2026-12-07): hybrid is the
# measured best, and no other recipe of recall.fusion won out of sample (bench/RESULTS.md,
# "Decision: the default stays rrf"); a bench or a test picks another per recall
# (RecallOptions.mode, RecallOptions.fusion).
RETRIEVAL_MODE: RetrievalMode = "hybrid"
DEFAULT_FUSION = "rrf"
KEYWORD_WEIGHT = 1.0
TIME_WEIGHT = 1.0
# The fused anchors a reranker reorders: a setting until 2026-12-07 that no operator changed;
# the rerank call's time grows with it and its deadline (RERANK_DEADLINE) bounds the wait.
RERANK_CANDIDATES = 20
_NO_VECTOR = object()  # recall in vector mode without a query vector: nothing to do


def _last_lines(context: Sequence[str], count: int) -> list[str]:
    lines = [line.strip() for line in context if isinstance(line, str) and line.strip()]
    return [scrub(line) for line in lines[-count:]] if count > 0 else []


def conversational_query(message: str, earlier: Sequence[str]) -> str:
    """The text embedded for a message said after ``earlier`` (oldest first): those lines,
    then the message, one a line — the message alone when there is nothing before it. An
    elliptic message ("那家店叫什么来着") gets its topic from the lines before it."""
    return "\n".join([*earlier, message]) if earlier else message


def _keyword_order(
    hits: Sequence[KeywordCandidate], now: datetime, decay: DecayPolicy
) -> list[AnchorCandidate]:
    """A keyword list's hits as candidates, by score times decay."""
    return decayed_order(
        [AnchorCandidate(h.id, h.created_at, h.similarity or 0.0) for h in hits],
        [h.score for h in hits],
        now=now,
        decay=decay,
    )


@dataclass(frozen=True)
class _Asked:
    """What one recall's query asks, read once for every channel (``Retriever._asked``)."""

    scope: RecallScope
    now: datetime
    mode: RetrievalMode
    when: TimeQuery | None
    about: tuple[str, ...]  # the speakers the query asks about (``lang.names``)
    search_text: str
    filters: AnchorFilters
    since: datetime | None
    vector: np.ndarray | None
    weighted: tuple[tuple[str, float], ...]  # keyword terms and their weights
    size: int  # the session's live turns


@dataclass(frozen=True)
class _Found:
    """Each channel's candidate list by name, and how many each was asked for."""

    lists: dict[str, list[Any]]
    limit: int


class Retriever:
    """Finds a session's anchors and their windows, through the recall store of the moment."""

    def __init__(
        self,
        *,
        settings: MemorySettings,
        database: Database,
        embedder: Embedder,
        vector_index: VectorIndex,
        reranker: ApiReranker | None = None,
        sharing: GroupSharing | None = None,
    ) -> None:
        """``sharing``: which groups recall across their members (``recall.sharing``); without
        it every group recalls only the asker's own session."""
        self.settings = settings
        self._database = database
        self.reranker = reranker
        self.sharing = sharing
        self._rerank_failing = False  # the reranker's last call failed (logged once)
        self.vector_index = vector_index
        self.tz = settings.tz
        self.embedder = embedder
        self.embedding_model = embedder.model
        self.embedding_dim = embedder.dim
        self._decay = DECAY
        # The floor's cosine gap was measured for the bundled model only: another model's
        # cosines spread differently, and the prompt then spends on every anchor.
        self._anchor_floor = ANCHOR_FLOOR if embedder.model == LOCAL_EMBEDDING_MODEL else NO_FLOOR

    async def recall(
        self,
        user_id: int,
        query: str,
        group_id: int | None = None,
        options: RecallOptions = DEFAULT_RECALL,
        *,
        shared: bool | None = None,
    ) -> RecallResult:
        """Top-N anchors of this session by meaning, keywords and time, each widened by
        ±window turns: the channels' candidate lists (``_search``), their fusion
        (``_fuse``, by the recipe of ``options.fusion``), then the windows (``_assemble``).

        ``options`` (``recall.options.RecallOptions``) says how. Only this session's live
        turns (not expired, not after ``now``) are considered. ``mode`` (default: the setting)
        picks the channels: ``vector`` (meaning), ``keyword`` (terms, see
        ``memory_core.lang.keywords``) or ``hybrid`` (both, reciprocal rank fusion by the
        recipe ``fusion``, see ``recall.fusion``).
        A time expression in the query (昨天, 上周三, 刚才…, see ``memory_core.lang.timerange``)
        adds that range's turns as candidates, or keeps only them when the query asks nothing
        else (and the range holds a turn; else the best matches anywhere); ``time_aware=False``
        ignores it. ``roles`` limits anchors to those roles and
        ``keywords`` to turns containing every one of them (windows stay whole).
        ``shared`` (a shared group, ``recall.sharing``; by default as ``sharing`` says):
        anchors come from every member's session of the group, each window from its anchor's
        own session.
        If the query cannot be embedded, hybrid recall falls back to keywords and vector
        recall returns nothing (logged); it is never an error.

        ``context``: the session's lines before the query, oldest first (the short-term
        memory). With ``MEMORY_QUERY_CONTEXT_TURNS`` > 0 the last that many join the query
        (see ``conversational_query``); time words are still read from the query alone.
        """
        store = self._database.store(PgRecallStore)  # one pool for the whole recall
        now = options.now or datetime.now(timezone.utc)
        top_n = self.settings.memory_top_n if options.top_n is None else options.top_n
        window = options.window_size
        window = self.settings.memory_window_size if window is None else window
        query = scrub(query) if isinstance(query, str) else ""
        if top_n <= 0 or not query.strip():
            return RecallResult(query=query)
        if shared is None:
            shared = self.sharing is not None and await self.sharing.shared(group_id)
        scope = RecallScope(generate_session_key(user_id, group_id), group_id if shared else None)
        asked = await self._asked(store, scope, query, options, now)
        if asked is None:
            return RecallResult(query=query)
        # With neither top_n nor window given, the prompt's recall: the text top_n anchors
        # ±window would give, spent on anchors first (``evidence_windows``); the candidate
        # lists are those of top_n anchors, so the head of the ranking is as before.
        evidence = options.top_n is None and options.window_size is None
        found = await self._search(store, asked, top_n)
        ranked = self._fuse(asked, found, options.fusion or FUSIONS[DEFAULT_FUSION])
        # Statements over questions and echoes (recall.statements): the head's turns read once.
        ranked = await statements_first(self._database, ranked, head=found.limit)
        rerank_scores: tuple[tuple[int, float], ...] = ()
        if self.reranker is not None and len(ranked) > 1:
            ranked, rerank_scores = await self._reranked(
                store, scope, asked.search_text, ranked, now
            )
        if names_a_picture(query) and not options.keywords and not options.roles:
            ranked = await self._pictures_first(scope, ranked, now)
        with stage("recall_windows"):
            if evidence:
                result = await self._spend(store, scope, query, ranked, top_n, window, now, options)
            else:
                result = await self._assemble(store, scope, query, ranked, top_n, window, now)
        return dataclasses.replace(
            result, search_text=asked.search_text, rerank_scores=rerank_scores
        )

    async def _asked(
        self,
        store: PgRecallStore,
        scope: RecallScope,
        query: str,
        options: RecallOptions,
        now: datetime,
    ) -> _Asked | None:
        """What ``query`` asks, read once for every channel; None when a vector recall has no
        query vector (nothing to search)."""
        mode = options.mode or RETRIEVAL_MODE
        when, text, earlier, _ = self._query_parts(query, options, now)
        # A participant the message names is who, not what (lang.names): the name leaves the
        # text searched (both channels) and that speaker's turns join the fusion below.
        named = await self._named_speakers(store, scope, text, now)
        about = asked_about(text, named)  # not only addressed ("小诗，……")
        topic = without_names(text, named) if named else text
        if not topic.strip():  # nothing but a name ("小明?"): it is all there is to search by
            topic = text
        search_text = conversational_query(topic, earlier)
        filters = AnchorFilters(
            roles=options.roles or None,
            phrases=tuple(required_phrases(options.keywords)) if options.keywords else None,
            start=options.since,
        )
        # One text, the message with its earlier lines, every term alike: weighing the message
        # above its context lost out of sample (bench/RESULTS.md, "Recall out of sample").
        # The query's embedding and the session's size are independent: fetch both at once.
        embedded, size = await asyncio.gather(
            self._embed_for_recall(search_text, mode), store.session_size(scope)
        )
        if embedded is _NO_VECTOR:
            return None
        weighted = weighted_conversation_terms(topic, earlier, 1.0) if mode != "vector" else []
        return _Asked(
            scope=scope,
            now=now,
            mode=mode,
            when=when,
            about=about,
            search_text=search_text,
            filters=filters,
            since=options.since,
            vector=embedded if isinstance(embedded, np.ndarray) else None,
            weighted=tuple(weighted),
            size=size,
        )

    async def _search(self, store: PgRecallStore, asked: _Asked, top_n: int) -> _Found:
        """Every channel's candidate list, read at once."""
        vector, filters, size, weighted = asked.vector, asked.filters, asked.size, asked.weighted
        limit = max(MIN_CANDIDATES, top_n * CANDIDATES_PER_ANCHOR)
        search: dict[str, Any] = dict(
            scope=asked.scope, model=self.embedding_model, now=asked.now, limit=limit
        )
        searches: dict[str, Awaitable[list[Any]]] = {}
        if vector is not None:
            searches["vector"] = self._anchor_candidates(store, vector, filters, size, **search)

        def keyword_search(among: AnchorFilters) -> Awaitable[list[KeywordCandidate]]:
            return store.keyword_candidates(
                terms=[term for term, _ in weighted],
                weights=[weight for _, weight in weighted],
                session_rows=size,
                query_vector=vector,
                filters=among,
                **search,
            )

        if asked.mode != "vector":
            searches["keyword"] = keyword_search(filters)
        if asked.about and asked.mode != "keyword":
            # The turns of the speakers asked about, by meaning and by the same terms. Not in
            # keyword mode: a second list of the same terms fused with the first only reorders
            # it (LoCoMo-dev: keyword mode is best with the name out of its terms alone).
            theirs = dataclasses.replace(filters, speakers=asked.about)
            if vector is not None:
                searches["speaker vector"] = self._anchor_candidates(
                    store, vector, theirs, size, **search
                )
            if weighted:
                searches["speaker keyword"] = keyword_search(theirs)
        when = asked.when
        if when is not None:
            start = when.range.start
            if asked.since is not None and (start is None or start < asked.since):
                start = asked.since
            in_range = dataclasses.replace(filters, start=start, end=when.range.end)
            if when.range.recent or vector is None:  # newest first
                searches["time"] = store.latest_candidates(
                    query_vector=vector, filters=in_range, **search
                )
            else:  # by meaning, inside the range (exact: the range bounds the rows read)
                searches["time"] = store.anchor_candidates(
                    query_vector=vector, filters=in_range, **search
                )
            if when.time_only:
                # "我今天上午要干嘛": also the turns that talk about that time ("我明天上午十点要去
                # 体检", said the day before). Only for a question about nothing but a time: in
                # one with a topic, a turn mentioning that day must not outrank the topic.
                searches["refers"] = store.referring_candidates(
                    query_vector=vector, filters=in_range, **search
                )
        with stage("recall_candidates"):
            lists = await asyncio.gather(*searches.values())
        return _Found(dict(zip(searches, lists, strict=True)), limit)

    def _fuse(self, asked: _Asked, found: _Found, recipe: FusionRecipe) -> list[RankedAnchor]:
        """The candidates of every channel in one order: vector alone by similarity times
        decay, else reciprocal rank fusion with the keyword lists weighed by ``recipe``."""
        lists, now, when = found.lists, asked.now, asked.when
        referring = lists.get("refers", [])
        within: TimeScope | None = None
        if when is not None and when.time_only:
            within = TimeScope(when.range.start, when.range.end, frozenset(c.id for c in referring))
        s = self.settings
        channels: list[Channel] = []
        decay = self._decay
        near: list[AnchorCandidate] = []  # the vector list's candidates
        if "vector" in lists:
            near = list(lists["vector"])
            similarities = [c.similarity for c in near]
            decay = decay_for_match(decay, similarities, DECAY_TIE_MARGIN)
            ordered = decayed_order(near, similarities, now=now, decay=decay)
            channels.append(Channel("vector", ordered))
        beside = asked.vector is not None  # the keyword lists fused beside a vector list
        if "keyword" in lists:
            hits = lists["keyword"]
            weight, strengths = KEYWORD_WEIGHT, None
            if beside:
                decayed = [h.score * decay.weight_at(h.created_at, now) for h in hits]
                share, strengths = recipe.keyword_share(
                    KeywordEvidence(hits, decayed, near, timed=when is not None)
                )
                weight *= share
            channels.append(Channel("keyword", _keyword_order(hits, now, decay), weight, strengths))
        if "time" in lists:
            by_meaning = beside and when is not None and not when.range.recent
            timed = merge_time_candidates(lists["time"], referring, by_meaning=by_meaning)
            channels.append(Channel("time", timed, TIME_WEIGHT))
        if "speaker vector" in lists:
            theirs = list(lists["speaker vector"])
            ordered = decayed_order(theirs, [c.similarity for c in theirs], now=now, decay=decay)
            channels.append(Channel("speaker vector", ordered, s.memory_speaker_weight))
        if "speaker keyword" in lists:
            hits = lists["speaker keyword"]
            channels.append(
                Channel(
                    "speaker keyword",
                    _keyword_order(hits, now, decay),
                    s.memory_speaker_weight * KEYWORD_WEIGHT,
                    {h.id: h.coverage for h in hits} if beside else None,
                )
            )
        if [c.name for c in channels] == ["vector"]:
            # Vector only: similarity times decay, as before fusion existed.
            return rank_anchors(channels[0].candidates, now=now, decay=decay, top_n=found.limit)
        ranked = fuse_channels(channels, rrf_k=RRF_K, within=within)
        if within is not None and not ranked:
            # Nothing was said in that time: answer with what matches best instead of
            # nothing (the user may misremember when).
            ranked = fuse_channels(channels, rrf_k=RRF_K)
        return ranked

    async def _reranked(
        self,
        store: PgRecallStore,
        scope: RecallScope,
        text: str,
        ranked: Sequence[RankedAnchor],
        now: datetime,
    ) -> tuple[list[RankedAnchor], tuple[tuple[int, float], ...]]:
        """The first ``RERANK_CANDIDATES`` fused anchors in the reranker's order, the rest
        after them, and the scores it gave (anchor id, score); the fused order unchanged and
        no scores when the reranker fails (logged once an outage)."""
        assert self.reranker is not None
        head = list(ranked[:RERANK_CANDIDATES])
        rows = await store.windows(
            scope=scope, anchors=[a.candidate for a in head], window_size=0, now=now
        )
        contents = {turn.id: turn.content for anchor_id, turn in rows if turn.id == anchor_id}
        head = [a for a in head if a.candidate.id in contents]
        try:
            order = await self.reranker.scored(text, [contents[a.candidate.id] for a in head])
        except RerankError as exc:
            if not self._rerank_failing:
                log.warning("reranker failed, recall keeps the fused order: %s", exc)
            self._rerank_failing = True
            return list(ranked), ()
        if self._rerank_failing:
            log.info("reranker answers again")
        self._rerank_failing = False
        reordered = [head[i] for i, _ in order]
        chosen = {a.candidate.id for a in reordered}
        scores = tuple((head[i].candidate.id, score) for i, score in order if score is not None)
        return reordered + [a for a in ranked if a.candidate.id not in chosen], scores

    async def _named_speakers(
        self, store: PgRecallStore, scope: RecallScope, message: str, now: datetime
    ) -> tuple[str, ...]:
        """The participants of the scope that ``message`` names (``lang.names``); none while
        ``MEMORY_SPEAKER_WEIGHT`` is 0."""
        if self.settings.memory_speaker_weight <= 0:
            return ()
        names = await store.speaker_names(scope, now, SPEAKER_SCAN_TURNS)
        return named_speakers(message, names)

    def search_text(self, query: str, options: RecallOptions = DEFAULT_RECALL) -> str:
        """The text ``recall`` embeds for ``query`` with ``options`` (its ``search_text``):
        known before the recall, so a search by the same vector (the distilled facts) can be
        asked for beside it. Empty when the recall would search nothing. A message naming a
        participant is searched without the name (``lang.names``), which only the recall
        knows: its ``search_text`` then differs from this one."""
        query = scrub(query) if isinstance(query, str) else ""
        top_n = self.settings.memory_top_n if options.top_n is None else options.top_n
        if top_n <= 0 or not query.strip():
            return ""
        now = options.now or datetime.now(timezone.utc)
        return self._query_parts(query, options, now)[3]

    def _query_parts(
        self, query: str, options: RecallOptions, now: datetime
    ) -> tuple[TimeQuery | None, str, list[str], str]:
        """The query's time expression (if read), its topic, the earlier lines that join it
        and the text searched: the topic after those lines (``conversational_query``)."""
        time_aware = options.time_aware
        if time_aware is None:
            time_aware = True
        when = analyse_query(query, now, self.tz) if time_aware else None
        # The time expression has done its work once it is a range; the rest is the topic.
        text = when.rest if when is not None and when.rest.strip() else query
        earlier = _last_lines(options.context, self.settings.memory_query_context_turns)
        return when, text, earlier, conversational_query(text, earlier)

    async def _embed_for_recall(self, text: str, mode: str) -> np.ndarray | object | None:
        """The query vector; None to go on without it (keyword mode, or hybrid falling back
        to keywords); ``_NO_VECTOR`` when vector recall cannot proceed."""
        if mode == "keyword":
            return None
        try:
            with stage("query_embedding"):
                return await self.embedder.embed_query(text)
        except EmbeddingError as exc:
            if mode == "vector":
                log.warning("query could not be embedded, recalling nothing: %s", exc)
                return _NO_VECTOR
            log.warning("query could not be embedded, recalling by keywords only: %s", exc)
            return None

    async def _pictures_first(
        self, scope: RecallScope, ranked: Sequence[RankedAnchor], now: datetime
    ) -> list[RankedAnchor]:
        """``ranked`` with the chat's latest picture turns first (``pictures.recall``)."""
        latest = await latest_pictures(self._database, scope.session_key, scope.shared_group, now)
        score = max((a.score for a in ranked), default=1.0)
        first = [RankedAnchor(AnchorCandidate(i, at, 1.0), score) for i, at in latest]
        chosen = {i for i, _ in latest}
        return first + [a for a in ranked if a.candidate.id not in chosen]

    async def _assemble(
        self,
        store: PgRecallStore,
        scope: RecallScope,
        query: str,
        ranked: Sequence[RankedAnchor],
        top_n: int,
        window: int,
        now: datetime,
    ) -> RecallResult:
        """The best ``top_n`` anchors and their windows."""
        anchors = list(ranked[:top_n])
        rows = await store.windows(
            scope=scope, anchors=[a.candidate for a in anchors], window_size=window, now=now
        )
        return assemble_windows(query, anchors, rows)

    async def _spend(
        self,
        store: PgRecallStore,
        scope: RecallScope,
        query: str,
        ranked: Sequence[RankedAnchor],
        top_n: int,
        window: int,
        now: datetime,
        options: RecallOptions,
    ) -> RecallResult:
        """The text of ``top_n`` anchors ±``window`` spent on anchors first, less the turns
        already ``options.shown`` (``ranking.evidence_windows``)."""
        turns = top_n * (2 * window + 1)
        anchors = list(ranked[:turns])
        rows = await store.windows(
            scope=scope,
            anchors=[a.candidate for a in anchors],
            window_size=max(window, 1),
            now=now,
        )
        return evidence_windows(
            query,
            anchors,
            rows,
            top_n=top_n,
            window=window,
            shown=frozenset(options.shown),
            floor=options.anchor_floor or self._anchor_floor,
        )

    async def _anchor_candidates(
        self,
        store: PgRecallStore,
        vector: np.ndarray,
        filters: AnchorFilters,
        session_rows: int,
        **search: Any,
    ) -> list[AnchorCandidate]:
        scope: RecallScope = search["scope"]
        if scope.shared_group is not None:  # no index spans a group: exact, hence complete
            return await store.anchor_candidates(query_vector=vector, filters=filters, **search)
        session_key = scope.session_key
        if not self.vector_index.serves(session_key, session_rows):
            if session_rows > self.settings.memory_exact_search_max_rows:
                self.vector_index.request(
                    self._database.store(PgVectorIndexStore), session_key
                )  # exact until it is built
            return await store.anchor_candidates(query_vector=vector, filters=filters, **search)
        found = await store.anchor_candidates(
            query_vector=vector, filters=filters, index_dim=self.embedding_dim, **search
        )
        if len(found) < search["limit"]:
            # The index scan may stop early (pgvector's scan limits); exact search is complete.
            found = await store.anchor_candidates(query_vector=vector, filters=filters, **search)
        return found

    async def get_contextual_memory(
        self,
        user_id: int,
        query: str,
        group_id: int | None = None,
        top_n: int = 3,
        window_size: int = 2,
        now: datetime | None = None,
    ) -> list[MemoryTurn]:
        """Seed API: the anchors and their windows, deduplicated, in time order."""
        options = RecallOptions(top_n=top_n, window_size=window_size, now=now)
        return list((await self.recall(user_id, query, group_id, options)).turns)

    async def recent_turns(
        self,
        user_id: int,
        group_id: int | None,
        *,
        limit: int,
        since: datetime,
        now: datetime | None = None,
    ) -> list[MemoryTurn]:
        """The session's latest turns since ``since`` (at most ``limit``), in time order — the
        short-term context, so expired ("not kept") turns of that window are included."""
        return await self._database.store(PgRecallStore).recent_turns(
            generate_session_key(user_id, group_id),
            since=since,
            now=now or datetime.now(timezone.utc),
            limit=limit,
        )
