"""The one exception tree of the memory core.

    MemoryCoreError                 every error the core raises on purpose
    ├── ConfigError                 a setting is missing or wrong
    ├── InvalidTurnError            input that cannot be stored (empty text, bad role, bad id)
    ├── StorageError                the database failed or refused an operation
    │   ├── DatabaseUnavailableError    the database cannot be reached right now
    │   ├── PgvectorMissingError        pgvector is absent or older than 0.8
    │   └── EmbeddingModelMismatchError stored rows use another embedding model or dimension
    ├── EmbeddingError              the embedder failed (API down, timeout, bad answer)
    ├── RerankError                 the optional reranker failed (recall keeps the fused order)
    ├── PictureError                a picture could not be fetched or read (the turn keeps "[图片]")
    └── LLMError                    the chat / evaluator model failed
        └── LLMNotConfiguredError   no chat model is configured

Foreign exceptions (asyncpg, httpx, OSError) are converted at the module that talks to the
foreign library, with ``raise ... from exc``.
"""

from __future__ import annotations


class MemoryCoreError(Exception):
    """Base class of every error raised on purpose by ``memory_core``."""


class ConfigError(MemoryCoreError):
    """A setting is missing or invalid."""


class InvalidTurnError(MemoryCoreError):
    """A turn cannot be stored as given (empty text, unknown role, id out of range)."""


class StorageError(MemoryCoreError):
    """The database failed or refused an operation."""


class DatabaseUnavailableError(StorageError):
    """The database cannot be reached right now; the caller may retry later."""


class PgvectorMissingError(StorageError):
    """The pgvector extension is missing or too old."""


class EmbeddingModelMismatchError(StorageError):
    """Stored rows were embedded by another model or dimension than the configured one."""


class EmbeddingError(MemoryCoreError):
    """The embedder could not embed the given texts."""


class RerankError(MemoryCoreError):
    """The reranker endpoint failed, timed out or answered with no usable ranking."""


class PictureError(MemoryCoreError):
    """A picture could not be fetched or read; ``lasting`` when trying again cannot help (too
    big, not a picture, gone), so a picture seen again is not fetched again."""

    def __init__(self, reason: str, *, lasting: bool = True) -> None:
        super().__init__(reason)
        self.lasting = lasting


class LLMError(MemoryCoreError):
    """The chat or evaluator model failed (error answer, timeout, unreadable output)."""


class LLMNotConfiguredError(LLMError):
    """No chat model is configured."""
