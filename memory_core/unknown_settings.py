"""Keys set in ``.env.prod`` or the environment that no setting reads any more.

Validation ignores keys it does not know (a NoneBot project's ``.env`` holds NoneBot's own keys
beside ours), so a key an operator still sets after it left the settings — most of them turned
into module constants on 2026-12-07, when ``.env.prod`` went from 136 keys to 100 — changed
nothing, and nothing said so. Each front end passes the keys it was started with to
:func:`unknown_settings` and logs its one line.
"""

from __future__ import annotations

from collections.abc import Iterable

from .settings import MemorySettings

REMOVED_KEYS = frozenset(
    {
        "ANSWER_CACHE_PRELOAD_FILE",
        "ANSWER_CACHE_TTL_HOURS",
        "BOT_CONFIRM_TIMEOUT",
        "CHAT_MAX_INPUT_CHARS",
        "CHAT_RECENT_GROWTH",
        "EMBEDDING_LOCAL_LONE_THREADS",
        "EMBEDDING_MAX_RETRIES",
        "EMBEDDING_TIMEOUT",
        "EVALUATOR_BATCH_PROMPT_FILE",
        "EVALUATOR_BATCH_SIZE",
        "EVALUATOR_CONCURRENCY",
        "EVALUATOR_PROMPT_FILE",
        "EXTRACTION_CONCURRENCY",
        "EXTRACTION_FACTS_PROMPT_FILE",
        "EXTRACTION_IDLE_MINUTES",
        "EXTRACTION_MAX_TURNS",
        "EXTRACTION_PREFERENCES_PROMPT_FILE",
        "EXTRACTION_SUMMARY_PROMPT_FILE",
        "LLM_MAX_RETRIES",
        "MEMORY_ANCHOR_DIVERSITY",
        "MEMORY_CONTEXT_TERM_WEIGHT",
        "MEMORY_DECAY_AFTER_DAYS",
        "MEMORY_DECAY_HALF_LIFE_DAYS",
        "MEMORY_DECAY_MIN_WEIGHT",
        "MEMORY_DECAY_TIE_MARGIN",
        "MEMORY_DISTILLED_FACTS",
        "MEMORY_DISTILLED_PREFERENCES",
        "MEMORY_DISTILLED_SUMMARIES",
        "MEMORY_FUSION",
        "MEMORY_IMAGE_DEFER_MAX",
        "MEMORY_IMAGE_MAX_BYTES",
        "MEMORY_IMAGE_MAX_REDIRECTS",
        "MEMORY_IMAGE_QUEUE",
        "MEMORY_IMAGE_READ_ATTEMPTS",
        "MEMORY_IMAGE_RETRY_HOURS",
        "MEMORY_IMAGE_STICKER_MAX_BYTES",
        "MEMORY_IMAGE_TEXT_MAX_CHARS",
        "MEMORY_IMAGE_TIMEOUT",
        "MEMORY_KEYWORD_WEIGHT",
        "MEMORY_PURGE_BATCH_SIZE",
        "MEMORY_QUERY_MESSAGE_WEIGHT",
        "MEMORY_RARE_TERM_TURNS",
        "MEMORY_RETENTION_FILE",
        "MEMORY_RETRIEVAL_MODE",
        "MEMORY_RRF_K",
        "MEMORY_SIMILARITY_FLOOR",
        "MEMORY_TIME_UNDERSTANDING",
        "MEMORY_TIME_WEIGHT",
        "MEMORY_TOKEN_ENCODING",
        "RERANK_CANDIDATES",
        "RERANK_MAX_RETRIES",
        "RERANK_TIMEOUT",
        "VISION_MAX_RETRIES",
    }
)
"""Keys that were settings once (every key ``.env.prod`` ever had and has no more)."""

# A key with one of these prefixes is meant for this project: one no setting reads is a typo
# or a leftover. Other keys (PATH, NoneBot's HOST, a proxy's …) are none of our business.
PREFIXES = (
    "MEMORY_",
    "EMBEDDING_",
    "CHAT_",
    "LLM_",
    "EXTRACTION_",
    "EVALUATOR_",
    "VISION_",
    "RERANK_",
    "ANSWER_CACHE_",
    "BOT_",
)


def unknown_settings(keys: Iterable[str], *, others: Iterable[str] | None = None) -> str | None:
    """One line naming each of ``keys`` (any case) that no setting reads: a removed one as
    such and, when the caller knows every key it reads (``others``, its own beside
    ``MemorySettings``: the plugin's ``BOT_*``), one with this project's prefix as unknown.
    ``None`` when there is none. The CLI passes no ``others``: it shares ``.env.prod`` with the
    plugin, whose keys it does not know, so it names the removed keys only."""
    read = {name.upper() for name in MemorySettings.model_fields}
    read.update(key.upper() for key in others or ())
    removed, unknown = [], []
    for key in sorted({str(key).upper() for key in keys} - read):
        if key in REMOVED_KEYS:
            removed.append(f"{key} (removed)")
        elif others is not None and key.startswith(PREFIXES):
            unknown.append(f"{key} (no such setting)")
    if not removed and not unknown:
        return None
    return "settings ignored, no setting reads them: " + ", ".join(removed + unknown)
