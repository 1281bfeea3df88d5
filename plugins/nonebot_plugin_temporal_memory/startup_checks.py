"""What the operator must fix before the bot can serve anyone, said at start-up in one line.

A setting that cannot work (an ``ONEBOT_ACCESS_TOKEN`` no HTTP header can carry, a placeholder
copied from the README, ``HOST=0.0.0.0`` without a token, a value the settings refuse) is a
``ConfigRefusal``: ``end_start_up`` logs its one line and ends the process with exit code 1.
A setting that works but is weak (a short token) is a warning and the bot starts.

The process ends itself because there is no other way to one line: NoneBot runs start-up hooks
inside Starlette's lifespan, which turns any exception (``SystemExit`` included) into a logged
traceback, and uvicorn then exits with code 3. The checks of ``runtime.checked_configuration``
run before the embedded PostgreSQL starts; a setting refused while the memory opens
(``EMBEDDING_DIM`` against the model, ``LLM_BASE_URL``) ends the start once the memory has
stopped its server again. Either way nothing is left to stop on the way out.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from nonebot.log import logger
from pydantic import ValidationError

from memory_core import ConfigError, validation_problems

MIN_ACCESS_TOKEN_CHARS = 12

TOKEN_HINT = 'python3 -c "import secrets; print(secrets.token_hex(16))"'
"""A command that prints a good token, named in the refusals."""

PLACEHOLDER_TOKENS = frozenset(
    {
        "自己想一个令牌",
        "上面生成的令牌",
        "the-token-printed-above",
        "你的令牌",
        "令牌",
        "changeme",
        "change_me",
        "change-me",
        "choose-a-token",
        "the-same-token",
        "token",
        "access_token",
        "access-token",
        "accesstoken",
        "your_token",
        "your-token",
        "yourtoken",
        "your_access_token",
        "your-access-token",
        "mytoken",
        "my_token",
        "my-token",
        "secret",
        "password",
        "123456",
        "12345678",
        "123456789",
        "1234567890",
        "test",
        "example",
    }
)
"""Tokens written as examples (in this README, NapCat's and NoneBot's docs), never chosen."""


class ConfigRefusal(Exception):
    """A setting the bot cannot start with; the text is the one line the operator reads."""


def is_placeholder(token: str) -> bool:
    """Whether ``token`` is an example to be replaced rather than a token someone chose:
    a known example, ``your…``, a ``<…>`` / ``{…}`` slot, or one character repeated (``xxx``)."""
    text = token.strip().lower()
    if text in PLACEHOLDER_TOKENS or text.startswith(("your", "<", "{", "${")):
        return True
    return len(set(text)) == 1


def check_access_token(token: str | None) -> list[str]:
    """Refuse an ``ONEBOT_ACCESS_TOKEN`` that can never work or was never chosen (raises
    ``ConfigRefusal``); the warnings to log for one that works but is weak. No token: nothing
    here (``listener.check_listener`` decides whether the listen address allows that)."""
    if not token:
        return []
    if not token.isascii() or not token.isprintable() or token != token.strip():
        raise ConfigRefusal(
            "TemporalMemory 拒绝启动：ONEBOT_ACCESS_TOKEN 含中文等非 ASCII 字符、空白或控制字符，"
            "HTTP 请求头无法携带，所有 QQ 客户端都会被拒绝；请换成只含字母和数字的令牌 / "
            "TemporalMemory refuses to start: ONEBOT_ACCESS_TOKEN contains non-ASCII, blank or "
            "control characters, which an HTTP header cannot carry, so every QQ client would be "
            f"refused. Set it to letters and digits only, e.g. the output of {TOKEN_HINT}, and "
            "put the same token in the client"
        )
    if is_placeholder(token):
        raise ConfigRefusal(
            "TemporalMemory 拒绝启动：ONEBOT_ACCESS_TOKEN 还是示例占位符，请换成自己生成的令牌 / "
            "TemporalMemory refuses to start: ONEBOT_ACCESS_TOKEN is still an example "
            f"placeholder. Set it to a token of your own, e.g. the output of {TOKEN_HINT}, and "
            "put the same token in the client"
        )
    if len(token) < MIN_ACCESS_TOKEN_CHARS:
        return [
            f"TemporalMemory：ONEBOT_ACCESS_TOKEN 不足 {MIN_ACCESS_TOKEN_CHARS} 个字符，"
            f"容易被猜中 / ONEBOT_ACCESS_TOKEN is shorter than {MIN_ACCESS_TOKEN_CHARS} "
            "characters and easy to guess; the bot starts, but use a longer one, e.g. the "
            f"output of {TOKEN_HINT}"
        ]
    return []


MIN_MCP_TOKEN_CHARS = 16
"""An MCP token opens the whole memory to whoever holds it: no shorter one is accepted."""


def check_mcp_token(token: str | None) -> None:
    """Refuse a ``MEMORY_MCP_TOKEN`` (set: the memory is served at ``/mcp``) that is shorter
    than ``MIN_MCP_TOKEN_CHARS``, was never chosen, or no HTTP header can carry (raises
    ``ConfigRefusal``). No token: nothing is served, nothing to check."""
    if not token:
        return
    if not token.isascii() or not token.isprintable() or token != token.strip():
        zh = "含非 ASCII 字符、空白或控制字符"
        en = "contains non-ASCII, blank or control characters"
    elif is_placeholder(token):
        zh, en = "还是示例占位符", "is still an example placeholder"
    elif len(token) < MIN_MCP_TOKEN_CHARS:
        zh = f"不足 {MIN_MCP_TOKEN_CHARS} 个字符"
        en = f"is shorter than {MIN_MCP_TOKEN_CHARS} characters"
    else:
        return
    raise ConfigRefusal(
        f"TemporalMemory 拒绝启动：MEMORY_MCP_TOKEN {zh}，请换成自己生成的令牌，或留空不提供 MCP / "
        f"TemporalMemory refuses to start: MEMORY_MCP_TOKEN {en}, and whoever holds it reads and "
        f"deletes the memory over /mcp. Set a token of your own, e.g. the output of {TOKEN_HINT}, "
        "or leave it empty to serve no MCP"
    )


def settings_refusal(*errors: ValidationError | ConfigError) -> ConfigRefusal:
    """One line naming each refused setting (as its ``.env.prod`` key) and why."""
    problems = "; ".join(_problems(error) for error in errors)
    return ConfigRefusal(
        f"TemporalMemory 拒绝启动：设置有误 / refuses to start, invalid setting: {problems}. "
        "Fix it in .env.prod or the environment"
    )


def _problems(error: ValidationError | ConfigError) -> str:
    cause = error.__cause__ if isinstance(error, ConfigError) else error
    if isinstance(cause, ValidationError):
        return validation_problems(cause)
    return " ".join(str(error).split())


async def end_start_up(refusal: ConfigRefusal) -> NoReturn:
    """Log the refusal's one line and end the process with exit code 1 (see the module's
    docstring for why not by raising)."""
    logger.error(str(refusal))
    await logger.complete()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
