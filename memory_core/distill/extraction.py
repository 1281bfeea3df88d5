"""LLM extraction of facts, preferences and summaries from a session's turns.

The three prompts are editable templates in ``config/`` (``extract_facts_prompt.txt``,
``extract_preferences_prompt.txt``, ``extract_summary_prompt.txt``). The facts and
preferences prompts list the scope's current items, numbered, so the model can say that a new
item restates one (``same_as``) or makes one untrue (``replaces``): contradiction is detected
by the model, and applied deterministically by ``keeper.MemoryKeeper``.

Parsing accepts what models actually send: fenced JSON, JSON followed or preceded by prose,
slightly broken JSON (trailing commas, single quotes, Python literals, unquoted keys,
full-width punctuation), a top-level list, an object holding the list, a single item, and
"无"/"none" for nothing. Anything else raises ``ExtractionParseError``: rejected, never
guessed. (``json-repair`` from PyPI was considered: it turns any prose into *some* value, which
defeats a clean rejection.)

Each conversation line starts with its number (``[3] ``) and the facts and preferences prompts
ask for ``sources: [3, …]``: the lines an item was drawn from. An item whose sources all name
lines of the conversation stores those turns as its sources, so a 撤回 of another line keeps
it; an item without them, or with any number that names no line (out of range, not an integer),
keeps the whole batch as its sources, the rule for rows stored before this existed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from ..dialogue.source_store import SourceTurn
from ..lang.timefmt import format_absolute
from ..providers.llm import ChatModel, build_openai_model, strip_reasoning
from ..resources import read_prompt_template
from ..settings import MemorySettings
from .memory import (
    FACT_CATEGORIES,
    PREFERENCE_CATEGORIES,
    SENTIMENTS,
    DistilledKind,
    DistilledMemory,
    ExtractedMemory,
    flatten,
)

TURN_CHARS = 500
CONVERSATION_CHARS = 6000
ITEM_CHARS = 300
LIST_ITEMS = 10
MAX_ITEMS = 20
MAX_SOURCES = 50  # lines one item may cite
EXTRACTION_MAX_TOKENS = 1024
SUMMARY_CONFIDENCE = 0.7  # summaries are stored with importance 0.7

FACTS_PROMPT = "extract_facts_prompt.txt"
PREFERENCES_PROMPT = "extract_preferences_prompt.txt"
SUMMARY_PROMPT = "extract_summary_prompt.txt"

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|json5)?[ \t]*\n?(.*?)```", re.DOTALL)
_NOTHING = re.compile(r"^\s*(无|没有|无相关信息|none|null|n/?a|empty)\s*[。.!！]?\s*$", re.I)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_UNQUOTED_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:")
_SINGLE_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")
_PY_LITERALS = ((re.compile(r"\bTrue\b"), "true"), (re.compile(r"\bFalse\b"), "false"))
_PY_NONE = re.compile(r"\bNone\b")
_LIST_KEYS = ("facts", "preferences", "items", "data", "results", "result", "list")
_CONTENT_KEYS: dict[str, tuple[str, ...]] = {
    "facts": ("fact", "content", "text"),
    "preferences": ("preference", "content", "text"),
    "summary": ("summary", "content", "text"),
}
_MAX_START_POSITIONS = 50


class ExtractionParseError(ValueError):
    """A model's extraction answer that holds no usable JSON of the expected shape."""


# ------------------------------------------------------------------ robust JSON


def _repair(text: str) -> str:
    text = text.replace("“", '"').replace("”", '"').replace("‘", "'").replace("’", "'")
    text = re.sub(r'"\s*：\s*', '": ', text)
    text = re.sub(r'([}\]"\d])\s*，\s*(?=["{\[])', r"\1, ", text)
    if '"' not in text:  # Python-style single-quoted strings (only when no JSON strings exist)
        text = _SINGLE_QUOTED.sub(lambda m: json.dumps(m.group(1).replace("\\'", "'")), text)
    text = _UNQUOTED_KEY.sub(r'\1"\2":', text)
    for pattern, value in _PY_LITERALS:
        text = pattern.sub(value, text)
    text = _PY_NONE.sub("null", text)
    return _TRAILING_COMMA.sub(r"\1", text)


def _first_value(text: str) -> list[Any] | dict[str, Any] | None:
    """The first JSON array or object in ``text``, as written or lightly repaired (prose before
    and after is ignored). The outermost value wins: an inner list is never taken for it."""
    decoder = json.JSONDecoder()
    starts = [m.start() for m in re.finditer(r"[\[{]", text)][:_MAX_START_POSITIONS]
    for start in starts:
        for source, offset in ((text, start), (_repair(text[start:]), 0)):
            try:
                value, _ = decoder.raw_decode(source, offset)
            except ValueError:
                continue
            if isinstance(value, (list, dict)):
                return value
    return None


def parse_json_answer(text: str) -> list[Any] | dict[str, Any]:
    """The JSON list or object in a model's answer; ``[]`` for an explicit "nothing".

    Raises ``ExtractionParseError`` when there is none, even after light repairs.
    """
    text = strip_reasoning(text).strip()
    if not text or _NOTHING.match(text):
        return []
    for source in [block.strip() for block in _FENCE.findall(text)] + [text]:
        value = _first_value(source)
        if value is not None:
            return value
    raise ExtractionParseError(f"no JSON list or object in the answer: {text[:80]!r}")


def _items(value: list[Any] | dict[str, Any], kind: DistilledKind) -> list[Any]:
    """The list of items in a parsed answer: the list itself, the list an object holds, or a
    single item object."""
    if isinstance(value, list):
        return value
    if any(key in value for key in _CONTENT_KEYS[kind]):
        return [value]
    for key in _LIST_KEYS:
        if isinstance(value.get(key), list):
            return list(value[key])
    lists = [v for v in value.values() if isinstance(v, list)]
    if len(lists) == 1:
        return list(lists[0])
    if not value:
        return []
    raise ExtractionParseError(f"an object without a list of {kind}: {list(value)[:5]}")


# ------------------------------------------------------------------ fields


def _text(value: Any, limit: int = ITEM_CHARS) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return ""
    return flatten(str(value).replace("\x00", ""))[:limit]


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool):
        return default
    try:
        number = float(str(value).strip().rstrip("%"))
    except ValueError:
        return default
    if number != number:  # NaN
        return default
    if 1.0 < number <= 100.0:  # "85" or "85%" meant as a percentage
        number /= 100.0
    return min(max(number, 0.0), 1.0)


def _texts(value: Any) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value] if value else []
    cleaned = (_text(v) for v in values[:LIST_ITEMS])
    return tuple(dict.fromkeys(v for v in cleaned if v))


def _category(value: Any, allowed: Sequence[str]) -> str:
    text = _text(value, 40).lower().replace(" ", "_")
    return text if text in allowed else "other"


def _line_number(entry: Any) -> int | None:
    """A cited line number as the model wrote it (``3``, ``"3"``, ``"[3]"``, ``"#3"``)."""
    if isinstance(entry, bool):
        return None
    if isinstance(entry, int):
        return entry
    if isinstance(entry, float) and entry.is_integer():
        return int(entry)
    text = entry.strip().strip("[]#").strip() if isinstance(entry, str) else ""
    return int(text) if text.isascii() and text.isdigit() else None


def _sources(value: Any, lines: Sequence[int]) -> tuple[int, ...]:
    """The turn ids of the conversation lines an item cites (``lines[n - 1]`` is line n's
    turn); ``()`` (the batch rule) when it cites none, or any number that names no line."""
    if not lines or value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    if len(values) > MAX_SOURCES:
        return ()
    numbers = [_line_number(entry) for entry in values]
    if not numbers or any(n is None or not 1 <= n <= len(lines) for n in numbers):
        return ()  # a garbled citation: none of it is trusted
    return tuple(dict.fromkeys(lines[n - 1] for n in numbers if n is not None))


def _refs(value: Any, known: Sequence[DistilledMemory]) -> tuple[int, ...]:
    """Row ids of known items cited by their 1-based number; unknown numbers are ignored."""
    values = value if isinstance(value, list) else [value]
    ids: list[int] = []
    for entry in values:
        text = str(entry).strip().strip("[]#") if entry is not None else ""
        if text.isdigit() and 1 <= int(text) <= len(known):
            row_id = known[int(text) - 1].id
            if row_id not in ids:
                ids.append(row_id)
    return tuple(ids)


def parse_items(
    text: str,
    kind: DistilledKind,
    known: Sequence[DistilledMemory] = (),
    lines: Sequence[int] = (),
) -> list[ExtractedMemory]:
    """Facts or preferences from a model's answer; items without usable text are skipped.

    ``known`` are the items listed (numbered from 1) in the prompt, for ``same_as`` and
    ``replaces``; ``lines`` the turn ids of the conversation's numbered lines, for
    ``sources``. Raises ``ExtractionParseError`` when the answer is unusable as a whole.
    """
    if kind == "summary":
        raise ValueError("use parse_summary for summaries")
    categories = FACT_CATEGORIES if kind == "facts" else PREFERENCE_CATEGORIES
    score_key = "confidence" if kind == "facts" else "strength"
    found: list[ExtractedMemory] = []
    for entry in _items(parse_json_answer(text), kind)[:MAX_ITEMS]:
        if isinstance(entry, str):
            entry = {_CONTENT_KEYS[kind][0]: entry}
        if not isinstance(entry, dict):
            continue
        content = next((_text(entry[k]) for k in _CONTENT_KEYS[kind] if k in entry), "")
        if not content:
            continue
        same = _refs(entry.get("same_as"), known)
        found.append(
            ExtractedMemory(
                kind=kind,
                content=content,
                category=_category(entry.get("category"), categories),
                score=_number(entry.get(score_key), 0.5),
                evidence=_texts(entry.get("evidence")) if kind == "preferences" else (),
                same_as=same[0] if same else None,
                replaces=_refs(entry.get("replaces"), known),
                source_turn_ids=_sources(entry.get("sources"), lines),
            )
        )
    return found


def parse_summary(text: str) -> ExtractedMemory | None:
    """A summary from a model's answer; ``None`` when it says there is nothing to summarise."""
    value = parse_json_answer(text)
    if isinstance(value, list):
        objects = [v for v in value if isinstance(v, dict)]
        if not value:
            return None
        if not objects:
            raise ExtractionParseError("a summary answer without an object")
        value = objects[0]
    if "summary" not in value and isinstance(value.get("result"), dict):
        value = value["result"]
    summary = _text(value.get("summary"), 2 * ITEM_CHARS)
    if not summary:
        if "summary" in value:
            return None
        raise ExtractionParseError(f"a summary answer without 'summary': {list(value)[:5]}")
    sentiment = _text(value.get("sentiment"), 20).lower()
    return ExtractedMemory(
        kind="summary",
        content=summary,
        score=SUMMARY_CONFIDENCE,
        key_topics=_texts(value.get("key_topics")),
        sentiment=sentiment if sentiment in SENTIMENTS else "neutral",
        action_items=_texts(value.get("action_items")),
    )


# ------------------------------------------------------------------ prompts


@dataclass(frozen=True)
class Conversation:
    """The conversation as the prompts show it: numbered lines, and the turn of each line
    (``turn_ids[n - 1]`` said line n)."""

    text: str
    turn_ids: tuple[int, ...]


def render_conversation(
    turns: Sequence[SourceTurn], tz: ZoneInfo, max_chars: int = CONVERSATION_CHARS
) -> Conversation:
    """``[1] [2024-01-16 10:30:15] 用户(小明): …`` lines in time order, numbered from 1; the
    latest kept if long."""
    kept: list[tuple[SourceTurn, str]] = []
    used = 0
    for turn in sorted(turns, key=lambda t: (t.created_at, t.id), reverse=True):
        who = "用户" if turn.role == "user" else "助手"
        if turn.role == "user" and turn.sender_name and turn.sender_name.strip():
            who = f"用户({flatten(turn.sender_name)})"
        content = flatten(turn.content)
        if len(content) > TURN_CHARS:
            content = content[:TURN_CHARS] + "…"
        line = f"[{format_absolute(turn.created_at, tz)}] {who}: {content}"
        if kept and used + len(line) > max_chars:
            break
        kept.append((turn, line))
        used += len(line) + 1
    kept.reverse()
    return Conversation(
        text="\n".join(f"[{n}] {line}" for n, (_, line) in enumerate(kept, start=1)),
        turn_ids=tuple(turn.id for turn, _ in kept),
    )


def render_known(known: Sequence[DistilledMemory]) -> str:
    if not known:
        return "（无）"
    return "\n".join(
        f"[{number}] {flatten(item.content)}（{item.category or 'other'}）"
        for number, item in enumerate(known, start=1)
    )


@dataclass(frozen=True)
class ExtractionTemplates:
    facts: str
    preferences: str
    summary: str


def load_templates(settings: MemorySettings) -> ExtractionTemplates:
    """The three prompt templates (configured files, else the ``config/`` copies)."""
    return ExtractionTemplates(
        facts=read_prompt_template(
            settings.config_file(FACTS_PROMPT),
            ("{conversation}", "{known_facts}"),
            "the extraction prompt",
        ),
        preferences=read_prompt_template(
            settings.config_file(PREFERENCES_PROMPT),
            ("{conversation}", "{known_preferences}"),
            "the extraction prompt",
        ),
        summary=read_prompt_template(
            settings.config_file(SUMMARY_PROMPT),
            ("{conversation}",),
            "the extraction prompt",
        ),
    )


def _fill(template: str, values: Mapping[str, str]) -> str:
    # str.replace, not str.format: the templates contain JSON braces.
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


# ------------------------------------------------------------------ the extractor


@dataclass(frozen=True)
class Extraction:
    """What one extraction produced; ``rejected`` names the answers that could not be read."""

    facts: tuple[ExtractedMemory, ...] = ()
    preferences: tuple[ExtractedMemory, ...] = ()
    summary: ExtractedMemory | None = None
    rejected: tuple[DistilledKind, ...] = ()

    @property
    def items(self) -> list[ExtractedMemory]:
        summary = [self.summary] if self.summary is not None else []
        return [*self.facts, *self.preferences, *summary]


class Extractor:
    """Asks the extraction model the three prompts about one batch of turns.

    Transport failures raise ``LLMError`` (the batch is retried later); an unreadable answer
    is recorded in ``Extraction.rejected`` and the other answers are kept.
    """

    def __init__(self, *, model: ChatModel, templates: ExtractionTemplates, tz: ZoneInfo) -> None:
        self.model = model
        self._templates = templates
        self._tz = tz

    async def _ask(self, prompt: str) -> str:
        return await self.model.complete(
            [{"role": "user", "content": prompt}],
            max_tokens=EXTRACTION_MAX_TOKENS,
            temperature=0.0,
        )

    async def extract(
        self,
        turns: Sequence[SourceTurn],
        *,
        known_facts: Sequence[DistilledMemory] = (),
        known_preferences: Sequence[DistilledMemory] = (),
        summarise: bool = True,
    ) -> Extraction:
        shown = render_conversation(turns, self._tz)
        conversation = shown.text
        rejected: list[DistilledKind] = []
        facts: list[ExtractedMemory] = []
        preferences: list[ExtractedMemory] = []
        answer = await self._ask(
            _fill(
                self._templates.facts,
                {"conversation": conversation, "known_facts": render_known(known_facts)},
            )
        )
        try:
            facts = parse_items(answer, "facts", known_facts, shown.turn_ids)
        except ExtractionParseError:
            rejected.append("facts")
        answer = await self._ask(
            _fill(
                self._templates.preferences,
                {
                    "conversation": conversation,
                    "known_preferences": render_known(known_preferences),
                },
            )
        )
        try:
            preferences = parse_items(answer, "preferences", known_preferences, shown.turn_ids)
        except ExtractionParseError:
            rejected.append("preferences")
        summary = None
        if summarise:
            answer = await self._ask(_fill(self._templates.summary, {"conversation": conversation}))
            try:
                summary = parse_summary(answer)
            except ExtractionParseError:
                rejected.append("summary")
        return Extraction(tuple(facts), tuple(preferences), summary, tuple(rejected))

    async def aclose(self) -> None:
        await self.model.aclose()


def build_extractor(settings: MemorySettings, tz: ZoneInfo) -> Extractor | None:
    """The extractor over the EXTRACTION_* model (falling back to LLM_*); ``None`` when
    extraction is disabled or no model is configured."""
    if not settings.extraction_enabled or not settings.extraction_endpoint.configured:
        return None
    templates = load_templates(settings)
    model = build_openai_model(
        settings.extraction_endpoint,
        max_retries=1,
        max_tokens=EXTRACTION_MAX_TOKENS,
        temperature=0.0,
    )
    return Extractor(model=model, templates=templates, tz=tz)


def extraction_off_reason(settings: MemorySettings) -> str | None:
    """Why extraction is off (for the one log line at start-up and /memstat), or ``None``."""
    if not settings.extraction_enabled:
        return "已关闭（EXTRACTION_ENABLED=false）"
    if not settings.extraction_endpoint.configured:
        return "未配置模型（EXTRACTION_MODEL / LLM_MODEL 为空）"
    return None
