"""``MemoryParts``: every collaborator of the memory, built once by ``open_memory``.

The bundle is frozen: a part is replaced by building the memory again, never by assigning
to it. Callers take the part that does the work (the conversation engine reads
``answer_cache``, ``extraction``, ``evaluations``; the prompt preparer ``retriever`` and
``context_builder``) instead of asking the facade to pass a call through.
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from .accounts import AccountBook
from .answer_cache.cache import AnswerCache, AnswerCacheOff
from .background import DueFlag
from .context.builder import ContextBuilder
from .conversation.citation import Citations
from .dialogue.spool import TurnSpool
from .dialogue.upkeep import DialogueUpkeep
from .dialogue.vector_index import VectorIndex
from .dialogue.writing import TurnWriter
from .distill.keeper import MemoryKeeper
from .distill.worker import ExtractionOff, ExtractionWorker
from .evaluation.retention import RetentionPolicy
from .evaluation.worker import EvaluationOff, EvaluationWorker
from .forgetting import Forgetting
from .lang.tokens import TokenCounter
from .providers.embedding import Embedder
from .providers.rerank import ApiReranker
from .recall.retriever import Retriever
from .recall.sharing import GroupSharing
from .settings import MemorySettings
from .storage.database_handle import Database
from .storage.embedded_server import EmbeddedServer


@dataclass(frozen=True)
class MemoryParts:
    """The memory's collaborators, all over one ``database`` handle (attached on connect).

    A feature that is off is its null object (``AnswerCacheOff``, ``ExtractionOff``,
    ``EvaluationOff``), so no caller asks whether it is on.
    """

    settings: MemorySettings
    database: Database
    embedder: Embedder
    token_counter: TokenCounter
    spool: TurnSpool
    embedded_server: EmbeddedServer | None  # None: an external MEMORY_DSN, never started by us
    vector_index: VectorIndex
    sharing: GroupSharing
    retriever: Retriever
    reranker: ApiReranker | None
    keeper: MemoryKeeper
    extraction: ExtractionWorker | ExtractionOff
    answer_cache: AnswerCache | AnswerCacheOff
    evaluations: EvaluationWorker | EvaluationOff
    retention: RetentionPolicy | None
    context_builder: ContextBuilder
    # Backfill work found due (a turn stored without its vector, a spooled turn): whoever
    # finds some sets it, which wakes the maintenance (``TemporalMemory.start_maintenance``).
    backfill_due: DueFlag
    # The dialogue's writing path and its upkeep (``memory_core.dialogue``).
    writer: TurnWriter
    upkeep: DialogueUpkeep
    forgetting: Forgetting  # /forget and 撤回 across every owner
    # Which recalled turn a reply quotes, and which no reply may quote while a forget runs
    # (the engine's quotes and ``forgetting``'s deletes meet there).
    citations: Citations
    accounts: AccountBook  # whose memory each QQ bot account reads and writes

    @property
    def tz(self) -> ZoneInfo:
        return self.settings.tz
