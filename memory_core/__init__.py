"""TemporalMemory's framework-free engine: store, embed, recall and format a bot's turns.

Open it with :func:`open_memory` (the one composition root) and close it with ``aclose()``.
Nothing here imports NoneBot or reads environment variables.
"""

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
from .models import (
    AddOutcome,
    MemoryTurn,
    RecallResult,
    RecallWindow,
    TurnInput,
    generate_session_key,
)
from .recall.options import RecallOptions
from .service import TemporalMemory
from .settings import MemorySettings, settings_from_mapping
from .stats import MemoryStats
from .wiring import open_memory

__all__ = [
    "AddOutcome",
    "ConfigError",
    "DatabaseUnavailableError",
    "EmbeddingError",
    "EmbeddingModelMismatchError",
    "InvalidTurnError",
    "LLMError",
    "LLMNotConfiguredError",
    "MemoryCoreError",
    "MemorySettings",
    "MemoryStats",
    "MemoryTurn",
    "PgvectorMissingError",
    "RecallOptions",
    "RecallResult",
    "RecallWindow",
    "StorageError",
    "TemporalMemory",
    "TurnInput",
    "generate_session_key",
    "open_memory",
    "settings_from_mapping",
]
