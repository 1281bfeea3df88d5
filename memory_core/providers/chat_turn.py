"""One answer of the chat model as data: its text, the tools it asked to call, what it cost.

An OpenAI-compatible endpoint answers ``/chat/completions`` in one of two shapes: one JSON body
(``stream=false``) or server-sent events, one ``data: {chunk}`` line per delta and a final
``data: [DONE]`` (``stream=true``). Both become the same :class:`ModelTurn` here, so the caller
never knows which one the provider needed. Nothing here talks to the network.

Two refusals are told apart from other errors, because each is answered by asking again
differently (``llm.OpenAIChatModel``):

* a provider that serves only streamed calls (Alibaba's DashScope for QwQ and its relays answer
  HTTP 400 "This model only support stream mode, please enable the stream parameter");
* an endpoint or model without function calling (Ollama's "… does not support tools", vLLM's
  "\"auto\" tool choice requires --enable-auto-tool-choice", DeepSeek-reasoner's "does not
  support Function Calling"): HTTP 400/404/422 naming tools or functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_REFUSED = re.compile(r"refused the request: HTTP (\d{3}): (.*)", re.DOTALL)
_NAMES_TOOLS = re.compile(r"tool|function", re.IGNORECASE)
_STREAM_ONLY = re.compile(
    r"(only|must|enable|require)\w*[^.]{0,40}stream|stream[^.]{0,40}(only|must be|required|true)",
    re.IGNORECASE,
)
# "'stream' does not support true with this model": the opposite refusal, never retried.
_NO_STREAM = re.compile(r"stream\W+does not support true", re.IGNORECASE)


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: ``arguments`` is its JSON text, unchecked."""

    id: str
    name: str
    arguments: str

    def as_message_part(self) -> dict[str, Any]:
        """The call as it goes back to the model in the assistant message."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ModelTurn:
    """What one chat call answered. ``text`` has reasoning blocks still in it; ``tokens`` is
    the call's ``usage.total_tokens`` (prompt and completion), 0 when not reported."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    tokens: int = 0


def total_tokens(usage: object) -> int:
    """``usage.total_tokens``, else prompt plus completion tokens; 0 without usage."""
    if not isinstance(usage, dict):
        return 0
    total = usage.get("total_tokens")
    if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
        return total
    parts = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    return sum(p for p in parts if isinstance(p, int) and not isinstance(p, bool) and p >= 0)


def turn_from_message(choice: dict[str, Any], usage: object) -> ModelTurn:
    """A ``ModelTurn`` from ``choices[0]`` of a JSON answer; ``ValueError`` if it has none."""
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ValueError("choices[0] has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError(f"message content is {type(content).__name__}, not text")
    calls = tuple(_calls(message.get("tool_calls")))
    reason = choice.get("finish_reason")
    return ModelTurn(
        text=content or "",
        tool_calls=calls,
        finish_reason=reason if isinstance(reason, str) else None,
        usage=usage if isinstance(usage, dict) else None,
        tokens=total_tokens(usage),
    )


def _calls(raw: object) -> Iterable[ToolCall]:
    if not isinstance(raw, list):
        return
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            continue
        function = item.get("function")
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        yield ToolCall(
            id=str(item.get("id") or f"call_{index}"),
            name=str(function.get("name") or ""),
            arguments=arguments if isinstance(arguments, str) else "",
        )


@dataclass
class _CallPieces:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def turn_from_events(body: str) -> ModelTurn:
    """A ``ModelTurn`` from a whole server-sent-events body: content deltas joined, tool-call
    deltas joined by their ``index``, the last ``usage`` seen. ``ValueError`` when no line
    is a chunk (not a stream at all)."""
    text: list[str] = []
    calls: dict[int, _CallPieces] = {}
    usage: object = None
    reason: str | None = None
    chunks = 0
    for line in body.splitlines():
        if not line.startswith("data:"):
            continue  # comments (": keep-alive"), event names, blank separators
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        chunks += 1
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            reason = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        if isinstance(delta.get("content"), str):
            text.append(delta["content"])
        for position, part in enumerate(delta.get("tool_calls") or ()):
            if not isinstance(part, dict):
                continue
            index = part.get("index")
            pieces = calls.setdefault(index if isinstance(index, int) else position, _CallPieces())
            if part.get("id"):
                pieces.id = str(part["id"])
            function = part.get("function")
            if isinstance(function, dict):
                if function.get("name"):
                    pieces.name += str(function["name"])
                if isinstance(function.get("arguments"), str):
                    pieces.arguments.append(function["arguments"])
    if chunks == 0:
        raise ValueError("no data chunk in the event stream")
    return ModelTurn(
        text="".join(text),
        tool_calls=tuple(
            ToolCall(id=p.id or f"call_{i}", name=p.name, arguments="".join(p.arguments))
            for i, p in sorted(calls.items())
        ),
        finish_reason=reason,
        usage=usage if isinstance(usage, dict) else None,
        tokens=total_tokens(usage),
    )


def looks_like_events(content_type: str, body: str) -> bool:
    """Whether an answer is an event stream though a JSON body was asked for (some relays
    stream whatever they are asked)."""
    return "text/event-stream" in content_type.lower() or body.lstrip().startswith("data:")


def _refusal(error: Exception) -> tuple[int, str] | None:
    found = _REFUSED.search(str(error))
    return (int(found.group(1)), found.group(2)) if found else None


def refuses_tools(error: Exception) -> bool:
    """Whether ``error`` is the endpoint refusing function calling (see the module text)."""
    refusal = _refusal(error)
    if refusal is None or refusal[0] not in (400, 404, 422):
        return False
    return bool(_NAMES_TOOLS.search(refusal[1]))


def wants_stream(error: Exception) -> bool:
    """Whether ``error`` is the endpoint refusing a call that is not streamed."""
    refusal = _refusal(error)
    if refusal is None or refusal[0] not in (400, 422):
        return False
    return bool(_STREAM_ONLY.search(refusal[1])) and not _NO_STREAM.search(refusal[1])
