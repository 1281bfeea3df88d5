"""One client for every OpenAI-compatible endpoint: chat, evaluation, extraction, embeddings.

The rules, the same for each service:

* one ``httpx.AsyncClient`` per endpoint: base URL (checked), bearer key, timeouts, limits; no
  proxy or other settings from the environment (the core never reads it);
* failures worth another try — timeouts, connection errors, HTTP 429 and 5xx — are retried at
  most ``max_retries`` times, waiting ``backoff_base * 2**(n-1)`` seconds (capped at
  ``max_delay``, with jitter so many sessions do not retry in lockstep) or the server's
  ``Retry-After`` (seconds or an HTTP date, also capped); any other answer fails at once;
* an optional ``deadline`` bounds the whole call, retries and waits included;
* a circuit breaker stops hammering a dead endpoint: after ``breaker_failures`` calls in a row
  failed for a "try again" reason, calls fail at once for ``breaker_cooldown`` seconds; then one
  call is let through, and its success closes the breaker again;
* error texts carry a short excerpt of the body with the API key masked, never the key.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import httpx
from pydantic import SecretStr

from ..errors import ConfigError, MemoryCoreError

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

_EXCERPT_CHARS = 200
_JSON_HEADERS = {"Content-Type": "application/json"}


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verification (certifi's CA bundle), made once: reading the bundle costs
    ~40 ms of CPU, and the process opens a client per endpoint (some hundred in a test run).
    A context is safe to share between clients."""
    return httpx.create_ssl_context()


def open_http_client(
    *,
    base_url: str,
    api_key: SecretStr | None,
    timeout: float,
    setting_prefix: str,
    max_connections: int,
) -> httpx.AsyncClient:
    """The ``httpx.AsyncClient`` of one endpoint; ``ConfigError`` naming ``{prefix}_BASE_URL``
    when the URL is not ``http(s)://host[/path]``."""
    url = _checked_base_url(base_url.strip(), setting_prefix)
    headers: dict[str, str] = {}
    key = api_key.get_secret_value().strip() if api_key is not None else ""
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.AsyncClient(
        base_url=url,
        headers=headers,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max(1, max_connections // 2)
        ),
        trust_env=False,
        verify=_tls_context(),
    )


class OpenAIEndpoint:
    """``POST`` JSON to one OpenAI-compatible endpoint with the module's retry rules.

    ``label`` names the service in errors and logs ("chat model", "embedding API"); failures
    raise ``error`` (a ``MemoryCoreError`` subclass). Takes ownership of ``client``.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        label: str,
        error: type[MemoryCoreError],
        max_retries: int,
        backoff_base: float = 0.5,
        max_delay: float = 8.0,
        sleep: Sleep = asyncio.sleep,
        breaker_failures: int = 5,
        breaker_cooldown: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self._breaker = CircuitBreaker(breaker_failures, breaker_cooldown, clock)
        self._client = client
        self._label = label
        self._error = error
        self._max_retries = max_retries
        self._backoff_base = backoff_base
        self._max_delay = max_delay
        self._sleep = sleep

    @property
    def max_retries(self) -> int:
        return self._max_retries

    @property
    def base_url(self) -> str:
        return str(self._client.base_url)

    @property
    def failing(self) -> bool:
        """Whether the endpoint failed its breaker's count of calls in a row, none answered
        since (the console's headline shows it)."""
        return self._breaker.failing

    async def post(
        self, path: str, payload: dict[str, Any], *, deadline: float | None = None
    ) -> httpx.Response:
        """The successful response; ``deadline`` (seconds) bounds the call, retries included."""
        if not self._breaker.allows():
            raise self._error(
                f"{self._label} is failing; not asked again for {self._breaker.cooldown:g}s"
            )
        body = json_body(payload)
        try:
            if deadline is None:
                response = await self._post_with_retries(path, body, None)
            else:
                response = await asyncio.wait_for(
                    self._post_with_retries(path, body, time.monotonic() + deadline), deadline
                )
        except asyncio.TimeoutError as exc:
            self._breaker.failed()
            raise self._error(f"{self._label} gave no answer within {deadline:g}s") from exc
        except _Unavailable as exc:
            self._breaker.failed()
            raise exc.error from exc.error.__cause__
        self._breaker.succeeded()
        return response

    async def aclose(self) -> None:
        await self._client.aclose()

    def excerpt(self, text: str) -> str:
        """A short one-line piece of a response body, with our API key masked if echoed."""
        excerpt = " ".join(text.split())[:_EXCERPT_CHARS]
        token = _bearer_token(self._client.headers.get("authorization"))
        if token:
            excerpt = excerpt.replace(token, "***")
        return excerpt or "(empty body)"

    async def _post_with_retries(
        self, path: str, body: bytes, ends_at: float | None
    ) -> httpx.Response:
        attempts = self._max_retries + 1
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            cause: Exception | None = None
            try:
                response = await self._client.post(path, content=body, headers=_JSON_HEADERS)
            except httpx.UnsupportedProtocol as exc:
                raise self._error(f"{self._label} URL is not usable: {exc}") from exc
            except httpx.TimeoutException as exc:
                failure, cause = f"timed out ({type(exc).__name__})", exc
            except httpx.TransportError as exc:
                failure, cause = f"connection failed ({type(exc).__name__})", exc
            # RuntimeError: httpx refuses to send on a closed client.
            except (httpx.HTTPError, RuntimeError) as exc:
                raise self._error(f"{self._label} request failed: {exc!r}") from exc
            else:
                status = response.status_code
                if response.is_success:
                    return response
                if status != 429 and status < 500:
                    raise self._error(
                        f"{self._label} refused the request: HTTP {status}: "
                        f"{self.excerpt(response.text)}"
                    )
                failure = f"HTTP {status}: {self.excerpt(response.text)}"
                retry_after = _retry_after_seconds(response.headers.get("retry-after"))

            if attempt == attempts:
                what = "unreachable" if cause is not None else "failed"
                plural = "s" if attempts > 1 else ""
                raise _Unavailable(
                    self._error(
                        f"{self._label} {what} after {attempts} attempt{plural}: {failure}"
                    ),
                    cause,
                )
            delay = self._delay(attempt, retry_after)
            if ends_at is not None and time.monotonic() + delay >= ends_at:
                raise _Unavailable(
                    self._error(
                        f"{self._label} failed ({failure}) and its deadline leaves no time to retry"
                    ),
                    cause,
                )
            logger.warning(
                "%s: attempt %d/%d failed (%s), retrying in %.2fs",
                self._label,
                attempt,
                attempts,
                failure.split(":", 1)[0],
                delay,
            )
            await self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self._max_delay)
        ceiling = min(self._backoff_base * 2.0 ** (attempt - 1), self._max_delay)
        # At least half the step, so retries never bunch up at zero.
        return ceiling * random.uniform(0.5, 1.0)


class CircuitBreaker:
    """Counts calls that failed in a row; open (refusing) for ``cooldown`` seconds after
    ``failures`` of them, then lets one call through to find out."""

    def __init__(self, failures: int, cooldown: float, clock: Callable[[], float]) -> None:
        self.failures = failures
        self.cooldown = cooldown
        self._clock = clock
        self._in_a_row = 0
        self._open_until = float("-inf")

    def allows(self) -> bool:
        return self._in_a_row < self.failures or self._clock() >= self._open_until

    @property
    def failing(self) -> bool:
        return self._in_a_row >= self.failures

    def failed(self) -> None:
        self._in_a_row += 1
        if self._in_a_row >= self.failures:
            if self._in_a_row == self.failures:
                logger.warning(
                    "an endpoint failed %d times in a row: not asked for %gs",
                    self.failures,
                    self.cooldown,
                )
            self._open_until = self._clock() + self.cooldown

    def succeeded(self) -> None:
        if self._in_a_row >= self.failures:
            logger.info("an endpoint answers again after %d failed calls", self._in_a_row)
        self._in_a_row = 0
        self._open_until = float("-inf")


@runtime_checkable
class ReportsFailing(Protocol):
    """A client over an endpoint that can say it is failing (``OpenAIEndpoint.failing``)."""

    @property
    def failing(self) -> bool: ...


def is_failing(part: object) -> bool:
    """Whether ``part`` (a chat model, an embedder) says its endpoint is failing; a part that
    cannot tell (the local model) never is."""
    return isinstance(part, ReportsFailing) and part.failing


class _Unavailable(Exception):
    """The endpoint failed for a "try again" reason (the breaker counts these)."""

    def __init__(self, error: MemoryCoreError, cause: BaseException | None) -> None:
        super().__init__(str(error))
        error.__cause__ = cause
        self.error = error


def json_body(payload: dict[str, Any]) -> bytes:
    """UTF-8 JSON of ``payload``; unpaired surrogates (broken emoji from clients) are re-paired
    where they form a pair and replaced with U+FFFD otherwise, as UTF-8 cannot carry them."""
    text = json.dumps(payload, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        repaired = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return repaired.encode("utf-8")


def _checked_base_url(value: str, setting_prefix: str) -> httpx.URL:
    problem = f"{setting_prefix}_BASE_URL must be http(s)://host[/path], for example "
    problem += f"https://api.siliconflow.cn/v1; got {value!r}"
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ConfigError(problem) from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(problem)
    return url


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _bearer_token(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None
