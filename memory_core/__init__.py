"""TemporalMemory's framework-free engine: store, embed, recall and format a bot's turns.

Open it with :func:`open_memory` (the one composition root, ``wiring``) and close it with
``aclose()``. Nothing here imports NoneBot or reads environment variables.

What a caller (the NoneBot plugin, the CLI, a benchmark) may use is listed in ``__all__``
below and imported from here; the modules behind these names are free to move. The operator's
console is a layer above the core with a public face of its own (``memory_core.console``),
and what people read (the /memstat dashboard, the Chinese labels and times) is listed there.
"""

from .accounts import serving as serving_account
from .conversation.citation import Citation
from .conversation.engine import (
    RECALL_BANDS,
    RECALL_MS_TOTAL,
    RECALL_REPLIES,
    RECALL_SLOW,
    ChatResult,
    ConversationEngine,
    Delivery,
    Outcome,
    SendText,
    split_reply,
)
from .distill.memory import DistilledMemory, ExtractedMemory, addressed
from .errors import (
    ConfigError,
    DatabaseUnavailableError,
    EmbeddingError,
    EmbeddingModelMismatchError,
    InvalidTurnError,
    LLMError,
    LLMNotConfiguredError,
    MemoryCoreError,
    PgvectorMissingError,
    StorageError,
)
from .evaluation.retention import RetentionPolicy
from .models import (
    AddOutcome,
    ForgetScope,
    Forgotten,
    MemoryTurn,
    RecalledMessage,
    RecallResult,
    RecallWindow,
    TurnInput,
    generate_session_key,
)
from .parts import MemoryParts
from .personal import (
    ForgetPreview,
    Named,
    PersonalExport,
    discard_export,
    export_person,
    forget_named,
    known_about,
    opt_in,
    opt_out,
    preview_forget,
    switch_group_memory,
)
from .pictures import (
    PictureJob,
    PictureReader,
    PictureRef,
    PicturesOff,
    build_picture_reader,
    image_placeholder,
    picture_refs,
)
from .pictures.reading import Locate, StoredLocator
from .providers.llm import CHAT_CACHED_TOKENS, CHAT_PROMPT_TOKENS, ChatModel, build_chat_model
from .providers.openai_api import is_failing
from .recall.listing import RecallListing, list_recall
from .recall.options import RecallOptions
from .recall.sharing import SharingStatus
from .service import TemporalMemory
from .settings import MemorySettings, settings_from_mapping, validation_problems
from .stages import clocked, stage
from .stats import MemoryStats
from .time_bounds import time_problem
from .unknown_settings import unknown_settings
from .wiring import ChatBot, open_chat_bot, open_memory

__all__ = [
    "CHAT_CACHED_TOKENS",
    "CHAT_PROMPT_TOKENS",
    "RECALL_BANDS",
    "RECALL_MS_TOTAL",
    "RECALL_REPLIES",
    "RECALL_SLOW",
    "AddOutcome",
    "ChatBot",
    "ChatModel",
    "ChatResult",
    "Citation",
    "ConfigError",
    "ConversationEngine",
    "DatabaseUnavailableError",
    "Delivery",
    "DistilledMemory",
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "ExtractedMemory",
    "ForgetPreview",
    "ForgetScope",
    "Forgotten",
    "InvalidTurnError",
    "LLMError",
    "LLMNotConfiguredError",
    "Locate",
    "MemoryCoreError",
    "MemoryParts",
    "MemorySettings",
    "MemoryStats",
    "MemoryTurn",
    "Named",
    "Outcome",
    "PersonalExport",
    "PgvectorMissingError",
    "PictureJob",
    "PictureReader",
    "PictureRef",
    "PicturesOff",
    "RecallListing",
    "RecallOptions",
    "RecallResult",
    "RecallWindow",
    "RecalledMessage",
    "RetentionPolicy",
    "SendText",
    "SharingStatus",
    "StorageError",
    "StoredLocator",
    "TemporalMemory",
    "TurnInput",
    "addressed",
    "build_chat_model",
    "build_picture_reader",
    "clocked",
    "discard_export",
    "export_person",
    "forget_named",
    "generate_session_key",
    "image_placeholder",
    "is_failing",
    "known_about",
    "list_recall",
    "open_chat_bot",
    "open_memory",
    "opt_in",
    "opt_out",
    "picture_refs",
    "preview_forget",
    "serving_account",
    "settings_from_mapping",
    "split_reply",
    "stage",
    "switch_group_memory",
    "time_problem",
    "unknown_settings",
    "validation_problems",
]
