"""The retry rules both remote kinds keep (openai and anthropic; DESIGN.md, deliberate
difference 4), around one call of the vendor's official SDK with the SDK's own retries off.

Inside one provider call, up to `max_retries` more attempts:
- 429 and 5xx: retried after the server's `Retry-After` when it sends one (seconds or an
  HTTP date), else after exponential backoff with jitter; a server asking for longer than
  RETRY_AFTER_CAP_SECONDS is answered by the next provider in the chain instead;
- a connection that could not be made (refused, or the connect timed out): retried the same;
- any other 4xx is not retried (401/403 are `auth`, the rest `bad_request`);
- a read that timed out is not retried (`timeout`): the endpoint may be working on it, and a
  slow member is better handed to the next one in the chain than waited on again.
Each condition ends as a ProviderError with its kind (base.KINDS); the api key never appears
in one. The SDKs' retries are off because their rules differ from these (they retry a read
timeout, and wait out any Retry-After under a minute without saying so to the chain).
"""
from __future__ import annotations

import asyncio
import email.utils
import random
import time
from typing import Any, Awaitable, Callable, TypeVar

import httpx

from seats.providers.base import ProviderError

BACKOFF_BASE_SECONDS = 0.5  # the first retry's nominal wait; doubles per attempt
BACKOFF_CAP_SECONDS = 8.0   # no single wait longer than this, whatever the attempt
RETRY_AFTER_CAP_SECONDS = 60.0  # a server asking for longer is answered by the next provider

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


class Retrying:
    """The retry loop of one provider: `sdk` is the vendor module (`openai` or `anthropic`,
    whose error classes share their names), `sleep` and `jitter` the waits between attempts,
    injectable so a test sees them instead of sitting through them."""

    def __init__(self, sdk: Any, *, provider_key: str, base_url: str, timeout_seconds: float, max_retries: int,
                 sleep: Sleep = asyncio.sleep, jitter: Callable[[], float] = random.random,
                 backoff_base: float = BACKOFF_BASE_SECONDS) -> None:
        self.sdk = sdk
        self.provider_key = provider_key
        self.base_url = base_url
        self.timeout_seconds = timeout_seconds
        self.max_retries = max_retries
        self.sleep = sleep
        self.jitter = jitter
        self.backoff_base = backoff_base

    async def call(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()`'s answer, retried by the rules above; ProviderError when there is none."""
        tries = 0
        while True:
            try:
                return await attempt()
            except ProviderError:
                raise
            except self.sdk.APIError as exc:
                error, wait = self.classify(exc)
            if not error.retryable or tries >= self.max_retries or error.kind == "timeout":
                raise error
            if wait is not None and wait > RETRY_AFTER_CAP_SECONDS:
                raise error  # asked to wait longer than a turn should: hand off instead
            await self.sleep(wait if wait is not None else self.backoff(tries))
            tries += 1

    def classify(self, exc: Exception) -> tuple[ProviderError, float | None]:
        """The SDK's error as a ProviderError, and the server's Retry-After (None when absent)."""
        sdk, cause = self.sdk, exc.__cause__
        if isinstance(exc, sdk.APITimeoutError):
            if isinstance(cause, httpx.ConnectTimeout):
                return self.error("unreachable", f"could not connect to {self.base_url} (ConnectTimeout)"), None
            return self.error("timeout", f"no answer within {self.timeout_seconds:g} s "
                                         f"({type(cause).__name__ if cause else 'timeout'})"), None
        if isinstance(exc, sdk.APIConnectionError):
            if isinstance(cause, httpx.ConnectError) or cause is None:
                return self.error("unreachable", f"could not connect to {self.base_url} "
                                                 f"({type(cause).__name__ if cause else 'ConnectError'})"), None
            # the connection broke mid-exchange: the server's side of the call failed
            return self.error("server", f"the connection failed ({type(cause).__name__}: {cause})",
                              retryable=True), None
        if isinstance(exc, sdk.APIStatusError):
            response, status = exc.response, exc.status_code
            said = _said(response)
            if status == 429:
                return self.error("rate_limited", f"HTTP 429{said}", status=status), retry_after(response)
            if status >= 500:
                return self.error("server", f"HTTP {status}{said}", status=status), retry_after(response)
            if status in (401, 403):
                return self.error("auth", f"HTTP {status}: the api key was refused{said}", status=status), None
            if 400 <= status < 500:
                return self.error("bad_request", f"HTTP {status}{said}", status=status), None
            return self.error("bad_response", f"unexpected HTTP {status}", status=status), None
        return self.error("bad_response", f"the answer could not be read ({type(exc).__name__})"), None

    def error(self, kind: str, message: str, **kw: Any) -> ProviderError:
        return ProviderError(kind, message, provider_key=self.provider_key, **kw)

    def backoff(self, attempt: int) -> float:
        """Exponential with equal jitter: half the nominal wait, plus up to half again."""
        nominal = min(BACKOFF_CAP_SECONDS, self.backoff_base * (2 ** attempt))
        return nominal / 2 + self.jitter() * nominal / 2


def retry_after(response: httpx.Response) -> float | None:
    """The server's Retry-After in seconds (delta or HTTP date, never negative); None when absent."""
    value = (response.headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(seconds, 0.0)


def _said(response: httpx.Response) -> str:
    """': <the endpoint's error message>' when its body names one, cut to one line."""
    try:
        doc = response.json()
    except (ValueError, UnicodeDecodeError, httpx.ResponseNotRead):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str) or not message:
        return ""
    line = " ".join(message.split())
    return f": {line[:200]}"
