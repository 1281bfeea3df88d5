"""``open_memory``: the core's one composition root.

Every collaborator is built here, from the settings or as the caller hands it in (an
embedder, an evaluator, an extractor, a reranker: tests and benchmarks pass their own), and
bundled into one frozen ``MemoryParts``; ``TemporalMemory`` and the conversation engine only
use what they are given.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from .accounts import AccountBook
from .answer_cache.cache import AnswerCache, AnswerCacheOff, cache_threshold
from .background import DueFlag
from .context.builder import DISTILLED_FACTS, ContextBuilder
from .conversation.citation import Citations
from .conversation.engine import ConversationEngine
from .dialogue.spool import TurnSpool
from .dialogue.upkeep import DialogueUpkeep
from .dialogue.vector_index import VectorIndex
from .dialogue.writing import TurnWriter
from .distill.extraction import Extractor, build_extractor, extraction_off_reason
from .distill.keeper import MemoryKeeper
from .distill.memory import dedupe_threshold
from .distill.worker import ExtractionOff, ExtractionWorker
from .errors import DatabaseUnavailableError, MemoryCoreError
from .evaluation.evaluator import Evaluator, build_evaluator
from .evaluation.retention import RetentionPolicy, load_retention_policy
from .evaluation.worker import EvaluationOff, EvaluationWorker
from .forgetting import Forgetting
from .lang.indexed import text_form_for
from .lang.tokens import TokenCounter, load_token_counter
from .parts import MemoryParts
from .pictures import PictureReader, PicturesOff, StoredLocator, build_picture_reader
from .providers.embedding import Embedder, build_embedder
from .providers.llm import ChatModel, build_chat_model
from .providers.rerank import ApiReranker, build_reranker
from .recall.retriever import Retriever
from .recall.sharing import GroupSharing
from .service import TemporalMemory
from .settings import MemorySettings
from .storage.database_handle import Database
from .storage.embedded_server import EmbeddedServer, embedded_cluster_dir

log = logging.getLogger(__name__)

# The most turns one extraction reads (the latest of a chat): more is a longer prompt, not
# better memories.
EXTRACTION_MAX_TURNS = 40
# Token budgets count with the encoding of the common OpenAI-compatible chat models: a
# budget is a bound on prompt size, not an invoice, so one encoding serves every model.
TOKEN_ENCODING = "cl100k_base"
# The background model calls beside the chat (settings until 2026-12-07 that no operator
# changed): two calls in flight keep a backlog moving without crowding the replies on the same
# model service, and a backlog is scored five exchanges a call.
EVALUATION_CONCURRENCY = 2
EVALUATION_BATCH_SIZE = 5
EXTRACTION_CONCURRENCY = 2
# A session short of EXTRACTION_EVERY_TURNS exchanges is distilled once idle this long, and a
# cached answer lives a week (settings until 2026-12-07 that no operator changed).
EXTRACTION_IDLE_MINUTES = 30.0
ANSWER_CACHE_TTL = timedelta(hours=168)


def build_parts(
    settings: MemorySettings,
    *,
    embedder: Embedder,
    token_counter: TokenCounter,
    evaluator: Evaluator | None,
    retention: RetentionPolicy | None,
    extractor: Extractor | None,
    reranker: ApiReranker | None,
    embedded_server: EmbeddedServer | None,
) -> MemoryParts:
    """Wire the memory's collaborators over one (not yet attached) database handle."""
    database = Database()
    vector_index = VectorIndex(
        mode=settings.memory_vector_index,
        dim=embedder.dim,
        exact_max_rows=settings.memory_exact_search_max_rows,
    )
    sharing = GroupSharing(listed=settings.memory_shared_groups, database=database)
    keeper = MemoryKeeper(
        database=database,
        embedder=embedder,
        scope=settings.memory_distilled_scope,
        dedupe_threshold=dedupe_threshold(embedder.model, settings.memory_dedupe_threshold),
        recall_top_k=DISTILLED_FACTS,
    )
    spool = TurnSpool(settings.memory_data_dir / "spool.jsonl")
    # Whose memory each QQ bot account reads and writes (memory_core.accounts).
    accounts = AccountBook(shared=settings.memory_share_accounts)
    backfill_due = DueFlag()
    # The text form new rows are indexed in (lang.indexed); older rows follow in the
    # background when it changed.
    text_form = text_form_for(settings.memory_index_speaker, settings.memory_index_context)
    writer = TurnWriter(
        settings=settings,
        database=database,
        embedder=embedder,
        token_counter=token_counter,
        spool=spool,
        accounts=accounts,
        text_form=text_form,
        on_more_work=backfill_due.set,
    )
    citations = Citations(database)
    for scope in spool.waiting_forgets():  # asked before a restart, not done yet
        citations.hold_back(scope)
    retriever = Retriever(
        settings=settings,
        database=database,
        embedder=embedder,
        vector_index=vector_index,
        reranker=reranker,
        sharing=sharing,
    )
    return MemoryParts(
        settings=settings,
        database=database,
        embedder=embedder,
        token_counter=token_counter,
        spool=spool,
        embedded_server=embedded_server,
        vector_index=vector_index,
        sharing=sharing,
        retriever=retriever,
        reranker=reranker,
        keeper=keeper,
        extraction=_extraction(settings, database, keeper, extractor),
        answer_cache=_answer_cache(settings, database, embedder),
        evaluations=(
            EvaluationWorker(
                database=database,
                evaluator=evaluator,
                policy=retention,
                tz=settings.tz,
                concurrency=EVALUATION_CONCURRENCY,
                batch_size=EVALUATION_BATCH_SIZE,
            )
            if evaluator is not None and retention is not None
            else EvaluationOff()
        ),
        retention=retention,
        context_builder=ContextBuilder(
            settings=settings,
            keeper=keeper,
            counter=token_counter,
            tz=settings.tz,
            retriever=retriever,
        ),
        backfill_due=backfill_due,
        writer=writer,
        upkeep=DialogueUpkeep(
            settings=settings,
            database=database,
            embedder=embedder,
            vector_index=vector_index,
            deferred=writer.deferred,
            text_form=text_form,
            on_more_work=backfill_due.set,
        ),
        forgetting=Forgetting(database, writer, accounts, citations),
        citations=citations,
        accounts=accounts,
    )


def _extraction(
    settings: MemorySettings,
    database: Database,
    keeper: MemoryKeeper,
    extractor: Extractor | None,
) -> ExtractionWorker | ExtractionOff:
    """The background extraction of distilled memory, over ``extractor`` or the one the
    EXTRACTION_* settings describe; ``ExtractionOff`` (with its reason) when it is off."""
    if settings.memory_distilled_enabled and extractor is None:
        extractor = build_extractor(settings, settings.tz)
    if settings.memory_distilled_enabled and extractor is not None:
        return ExtractionWorker(
            database=database,
            keeper=keeper,
            extractor=extractor,
            tz=settings.tz,
            every_turns=settings.extraction_every_turns,
            idle_minutes=EXTRACTION_IDLE_MINUTES,
            concurrency=EXTRACTION_CONCURRENCY,
            max_turns=EXTRACTION_MAX_TURNS,
            settle_seconds=settings.extraction_settle_seconds,
        )
    reason = extraction_off_reason(settings) if settings.memory_distilled_enabled else None
    # The reason is for /memstat, in Chinese; the log says it in English.
    if not settings.memory_distilled_enabled:
        why = "MEMORY_DISTILLED_ENABLED=false"
    elif not settings.extraction_enabled:
        why = "EXTRACTION_ENABLED=false"
    else:
        why = "no model: EXTRACTION_MODEL and LLM_MODEL are empty"
    log.info("distilled memory extraction is off (%s)", why)
    return ExtractionOff(reason or "已关闭")


def _answer_cache(
    settings: MemorySettings, database: Database, embedder: Embedder
) -> AnswerCache | AnswerCacheOff:
    if not settings.answer_cache_enabled:
        return AnswerCacheOff()
    return AnswerCache(
        database=database,
        embedder=embedder,
        threshold=cache_threshold(embedder.model, settings.answer_cache_threshold),
        ttl=ANSWER_CACHE_TTL,
        tz=settings.tz,
    )


async def open_memory(
    settings: MemorySettings,
    *,
    embedder: Embedder | None = None,
    evaluator: Evaluator | None = None,
    extractor: Extractor | None = None,
    reranker: ApiReranker | None = None,
    require_database: bool = True,
    allow_model_change: bool = False,
    maintenance_interval: float | None = 30.0,
) -> TemporalMemory:
    """Build the memory from settings: embedder, tokenizer, spool, database, and every part
    (``MemoryParts``); the embedder, evaluator, extractor and reranker may be handed in.

    With ``require_database=False`` an unreachable database is not fatal: turns are spooled
    and the maintenance loop keeps trying to connect. ``maintenance_interval=None`` disables
    the background loop (tests and the CLI drive maintenance by hand).
    """
    # Built first: a bad RERANK_BASE_URL fails before anything holds a resource.
    chosen_reranker = reranker if reranker is not None else build_reranker(settings)
    chosen_embedder = embedder or await build_embedder(settings)
    counter = await asyncio.to_thread(load_token_counter, TOKEN_ENCODING)
    retention = load_retention_policy(settings.config_file("retention.toml"))
    chosen_evaluator = evaluator if evaluator is not None else build_evaluator(settings)
    embedded = (
        None
        if settings.external_dsn()
        else EmbeddedServer(embedded_cluster_dir(settings.memory_data_dir))
    )
    memory = TemporalMemory(
        build_parts(
            settings,
            embedder=chosen_embedder,
            token_counter=counter,
            evaluator=chosen_evaluator,
            retention=retention,
            extractor=extractor,
            reranker=chosen_reranker,
            embedded_server=embedded,
        )
    )
    try:
        await memory.connect(allow_model_change=allow_model_change)
    except DatabaseUnavailableError as exc:
        if require_database:
            await memory.stop_embedded_server()
            await memory.close_providers()
            raise
        log.error("memory database unreachable at start-up, will keep retrying: %s", exc)
    except BaseException:
        await memory.stop_embedded_server()
        await memory.close_providers()
        raise
    if memory.parts.database.connected:
        try:
            await preload_answer_cache(memory.parts)
        except MemoryCoreError as exc:  # a bad preload file must not stop the bot
            log.error("answer cache preload failed: %s", exc)
    if maintenance_interval is not None:
        memory.start_maintenance(maintenance_interval)
        memory.parts.evaluations.start()
        memory.parts.extraction.start()
    return memory


async def preload_answer_cache(parts: MemoryParts, now: datetime | None = None) -> int:
    """(Re)load the public entries of ``answer_cache_preload.jsonl`` (``MEMORY_CONFIG_DIR``)
    into the answer cache, as ``open_memory`` does; 0 when the cache is off."""
    path = parts.settings.config_file("answer_cache_preload.jsonl")
    return await parts.answer_cache.preload(path, now)


@dataclass(frozen=True)
class ChatBot:
    """What a chat front end runs: the memory, the conversation engine over its parts, the
    chat model (``None`` while ``LLM_MODEL`` is empty) and the picture reader."""

    memory: TemporalMemory
    engine: ConversationEngine
    chat_model: ChatModel | None
    pictures: PictureReader | PicturesOff

    async def aclose(self) -> None:
        if self.chat_model is not None:
            await self.chat_model.aclose()
        await self.pictures.aclose()
        await self.memory.aclose()


async def open_chat_bot(
    settings: MemorySettings, *, bot_name: str, locate_stored: StoredLocator | None = None
) -> ChatBot:
    """Open the memory (an unreachable database is not fatal: turns are spooled) and build
    the chat model, the engine and the picture reader on it, whose retries the memory's
    maintenance runs (``locate_stored``: where a stored picture without a URL is, the front
    end's client). ``ConfigError`` when a setting cannot work (``EMBEDDING_DIM`` against the
    model, an ``LLM_BASE_URL`` that is no URL); nothing is left open then."""
    memory = await open_memory(settings, require_database=False)
    try:
        chat_model = build_chat_model(settings)
    except BaseException:
        await memory.aclose()
        raise
    engine = ConversationEngine(
        parts=memory.parts,
        chat_model=chat_model,
        bot_name=bot_name,
        usage=chat_model.usage if chat_model is not None else None,
    )
    pictures = build_picture_reader(settings, memory.parts, engine.traffic, locate_stored)
    for step in pictures.background_steps():
        memory.daily.add(step)
    return ChatBot(memory, engine, chat_model, pictures)
