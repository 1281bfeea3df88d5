"""Scoring finished exchanges 0–100: an LLM evaluator and a heuristic one.

Both implement ``Evaluator``: ``score`` takes exchanges and returns one score per exchange, or
``None`` where the answer was unreadable. Transport failures raise ``LLMError``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..providers.llm import ChatModel, build_openai_model, strip_reasoning
from ..resources import read_prompt_template
from ..settings import MemorySettings

TURN_CHARS_IN_PROMPT = 2000
_INTEGER = re.compile(r"(?<![\d.])-?\d+(?:\.\d+)?(?![\d.])")
_BATCH_LINE = re.compile(r"^\s*(?:第\s*)?(\d+)\s*(?:个|号)?\s*[:：.、)\]]\s*(.*)$")


@dataclass(frozen=True)
class Exchange:
    """One finished exchange: what the user said and what the bot answered."""

    user_text: str
    assistant_text: str


class Evaluator(Protocol):
    name: str

    async def score(self, exchanges: Sequence[Exchange]) -> list[int | None]: ...

    async def aclose(self) -> None: ...


def parse_score(text: str) -> int:
    """The single clear integer 0–100 in a model's answer (``85``, ``85分``, ``评分：85``).

    Anything else — no number, several numbers, a decimal, out of range — raises ValueError:
    a failure, never a guess.
    """
    numbers = _INTEGER.findall(strip_reasoning(text))
    if len(numbers) != 1 or "." in numbers[0]:
        raise ValueError(f"expected exactly one integer score, got {text[:80]!r}")
    value = int(numbers[0])
    if not 0 <= value <= 100:
        raise ValueError(f"score {value} is outside 0..100")
    return value


def parse_batch_scores(text: str, count: int) -> list[int | None]:
    """Scores from ``"1: 85"`` lines; an exchange whose line is missing or unclear gets None."""
    found: dict[int, list[str]] = {}
    for line in strip_reasoning(text).splitlines():
        match = _BATCH_LINE.match(line)
        if match:
            found.setdefault(int(match.group(1)), []).append(match.group(2))
    scores: list[int | None] = []
    for number in range(1, count + 1):
        answers = found.get(number, [])
        try:
            scores.append(parse_score(answers[0]) if len(answers) == 1 else None)
        except ValueError:
            scores.append(None)
    return scores


def _clip(text: str) -> str:
    return text if len(text) <= TURN_CHARS_IN_PROMPT else text[:TURN_CHARS_IN_PROMPT] + "…"


class LLMEvaluator:
    """Asks a chat model with the one-exchange prompt (``config/evaluator_prompt.txt``) or the
    numbered batch prompt (``config/evaluator_batch_prompt.txt``)."""

    name = "llm"

    def __init__(self, *, model: ChatModel, prompt: str, batch_prompt: str) -> None:
        self._model = model
        self._prompt = prompt
        self._batch_prompt = batch_prompt

    async def score(self, exchanges: Sequence[Exchange]) -> list[int | None]:
        if not exchanges:
            return []
        if len(exchanges) == 1:
            text = self._prompt.replace("{user}", _clip(exchanges[0].user_text)).replace(
                "{assistant}", _clip(exchanges[0].assistant_text)
            )
            answer = await self._model.complete(
                [{"role": "user", "content": text}], max_tokens=16, temperature=0.0
            )
            try:
                return [parse_score(answer)]
            except ValueError:
                return [None]
        listing = "\n\n".join(
            f"【回合 {i}】\n用户：{_clip(e.user_text)}\nAI：{_clip(e.assistant_text)}"
            for i, e in enumerate(exchanges, start=1)
        )
        text = self._batch_prompt.replace("{count}", str(len(exchanges))).replace(
            "{exchanges}", listing
        )
        answer = await self._model.complete(
            [{"role": "user", "content": text}], max_tokens=12 * len(exchanges), temperature=0.0
        )
        return parse_batch_scores(answer, len(exchanges))

    async def aclose(self) -> None:
        await self._model.aclose()


# The heuristic evaluator: used when no LLM is configured. It is a rule of thumb, not a model:
# small talk and tests score low, facts about the user and concrete questions score higher.
_TEST = re.compile(
    r"^\s*(测试|测试一下|test(ing)?|ping|\d{1,4}|[.。?？!！~～]+)\s*[.。!！~～]*\s*$", re.I
)
_GREETING = re.compile(
    r"^\s*(你好|您好|在吗|在不在|在么|hi|hello|hey|哈喽|嗨|早|早上好|中午好|下午好|晚上好|晚安|早安|午安"
    r"|good (morning|night|evening))[呀啊哇吖!！。.~～\s]*$",
    re.I,
)
_THANKS = re.compile(
    r"^\s*(谢谢|谢谢你|多谢|感谢|thx|thanks|thank you|好的|好|嗯+|哦+|ok|okay|收到|知道了"
    r"|哈+|呵呵|666)"
    r"[呀啊哇吖!！。.~～\s]*$",
    re.I,
)
_PERSONAL = re.compile(
    r"(我叫|我是|我的|我住|我在|我家|我喜欢|我不喜欢|我讨厌|我爱|我有|我要|我想|生日|电话|地址|邮箱|"
    r"my name|i am|i'm|i live|i like|i love|i hate|my )",
    re.I,
)
_QUESTION = re.compile(
    r"[?？]|怎么|如何|为什么|什么|哪|多少|能不能|可以吗|how|what|why|which|where|when", re.I
)
_SPECIFIC = re.compile(r"\d{3,}|[A-Za-z]{2,}\d+|\d+[A-Za-z]{2,}")


def heuristic_score(exchange: Exchange) -> int:
    user = exchange.user_text.strip()
    if _TEST.match(user):
        return 5
    if _GREETING.match(user):
        return 15
    if _THANKS.match(user):
        return 30
    score = 45
    if _PERSONAL.search(user):
        score += 25
    if _QUESTION.search(user) and len(user) >= 6:
        score += 15
    if _SPECIFIC.search(user):
        score += 10
    if len(exchange.assistant_text) >= 80:
        score += 10
    return min(100, score)


class HeuristicEvaluator:
    """Rule-of-thumb scores without an LLM (see ``heuristic_score``)."""

    name = "heuristic"

    async def score(self, exchanges: Sequence[Exchange]) -> list[int | None]:
        return [heuristic_score(e) for e in exchanges]

    async def aclose(self) -> None:
        return None


def build_evaluator(settings: MemorySettings) -> Evaluator | None:
    """The LLM evaluator when a model is configured, else the heuristic; None if disabled."""
    if not settings.evaluator_enabled:
        return None
    if not settings.evaluator_endpoint.configured:
        return HeuristicEvaluator()
    prompt = read_prompt_template(
        settings.config_file("evaluator_prompt.txt"),
        ("{user}", "{assistant}"),
        "the evaluator prompt",
    )
    batch_prompt = read_prompt_template(
        settings.config_file("evaluator_batch_prompt.txt"),
        ("{count}", "{exchanges}"),
        "the evaluator prompt",
    )
    model = build_openai_model(
        settings.evaluator_endpoint, max_retries=1, max_tokens=16, temperature=0.0
    )
    return LLMEvaluator(model=model, prompt=prompt, batch_prompt=batch_prompt)
