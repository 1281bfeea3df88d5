"""Text embeddings: the ``Embedder`` protocol, a local and an API implementation, a cache.

``build_embedder`` is what the composition root calls; everything else takes its parts as
keyword arguments.
"""

from __future__ import annotations

from ...errors import ConfigError
from ...settings import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL, MemorySettings
from .api import ApiEmbedder, build_api_embedder
from .base import Embedder
from .cache import CachedEmbedder
from .local import LocalE5Embedder

__all__ = [
    "ApiEmbedder",
    "CachedEmbedder",
    "Embedder",
    "LocalE5Embedder",
    "build_api_embedder",
    "build_embedder",
]


async def build_embedder(settings: MemorySettings) -> Embedder:
    """Build the configured embedder, cached when ``embedding_cache_size > 0``.

    Raises ``ConfigError`` when the settings ask the local model for something it is not
    (another dimension or model name), ``EmbeddingError`` when the local model cannot load.
    """
    embedder: Embedder
    if settings.embedding_provider == "local":
        if settings.embedding_dim not in (None, LOCAL_EMBEDDING_DIM):
            raise ConfigError(
                f"EMBEDDING_DIM={settings.embedding_dim} does not fit EMBEDDING_PROVIDER=local: "
                f"the local model {LOCAL_EMBEDDING_MODEL} is {LOCAL_EMBEDDING_DIM}-dimensional "
                "(leave EMBEDDING_DIM empty, or use EMBEDDING_PROVIDER=api)"
            )
        if settings.effective_embedding_model != LOCAL_EMBEDDING_MODEL:
            raise ConfigError(
                f"EMBEDDING_MODEL={settings.embedding_model!r} does not fit "
                f"EMBEDDING_PROVIDER=local, which only has {LOCAL_EMBEDDING_MODEL} "
                "(leave EMBEDDING_MODEL empty, or use EMBEDDING_PROVIDER=api)"
            )
        embedder = await LocalE5Embedder.load(
            model=settings.effective_embedding_model,
            query_deadline=settings.embedding_query_deadline,
            engine=settings.embedding_local_engine,
            precision=settings.embedding_local_precision,
            threads=settings.embedding_local_threads,
            cache_dir=settings.memory_data_dir / "models",
        )
    else:
        embedder = build_api_embedder(settings)
    if settings.embedding_cache_size > 0:
        embedder = CachedEmbedder(embedder, settings.embedding_cache_size)
    return embedder
