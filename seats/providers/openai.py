"""The OpenAI-compatible provider: `kind: openai` (DESIGN.md, deliberate difference 4: "any
OpenAI-compatible chat-completions endpoint, over httpx").

One `complete` is one POST to `{base_url}/chat/completions` with the model, the messages and
`max_tokens`, the api key as a Bearer token, every phase of the request bounded by
`timeout_seconds`. Usage comes from the response's `usage` block.

Retries, inside one call, up to `max_retries` more attempts:
- 429 and 5xx: retried after the server's `Retry-After` when it sends one (seconds or an
  HTTP date), else after exponential backoff with jitter;
- a connection that could not be made (refused, or the connect timed out): retried the same;
- any other 4xx is not retried (401/403 are `auth`, the rest `bad_request`);
- a read that timed out is not retried (`timeout`): the endpoint may be working on it, and a
  slow member is better handed to the next one in the chain than waited on again.
Each condition ends as a ProviderError with its kind (base.KINDS); the api key never appears
in one.
"""
from __future__ import annotations

import asyncio
import email.utils
import random
import time
from typing import Any, Awaitable, Callable

import httpx

from engine.config.company import OpenAI
from seats.providers.base import Completion, Message, ProviderError
from seats.providers.scripted import approx_tokens

BACKOFF_BASE_SECONDS = 0.5  # the first retry's nominal wait; doubles per attempt
BACKOFF_CAP_SECONDS = 8.0   # no single wait longer than this, whatever the attempt
RETRY_AFTER_CAP_SECONDS = 60.0  # a server asking for longer is answered by the next provider

# OpenAI's finish_reason in the seed's stop_reason words (seed 000, agent_phase_completed).
FINISH_REASONS = {
    "stop": "end",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

ClientFactory = Callable[..., httpx.AsyncClient]
Sleep = Callable[[float], Awaitable[None]]


class OpenAIProvider:
    """A Provider over one OpenAI-compatible endpoint.

    `http_client_factory(timeout=...)` builds the AsyncClient one call uses (httpx.AsyncClient
    itself by default); `sleep` and `jitter` are the waits between retries, injectable so a
    test can see them instead of sitting through them.
    """

    def __init__(self, config: OpenAI, *, http_client_factory: ClientFactory | None = None,
                 sleep: Sleep = asyncio.sleep, jitter: Callable[[], float] = random.random,
                 backoff_base: float = BACKOFF_BASE_SECONDS) -> None:
        self.key = config.name
        self.model = config.model
        self.config = config
        self._factory = http_client_factory or httpx.AsyncClient
        self._sleep = sleep
        self._jitter = jitter
        self._backoff_base = backoff_base

    @property
    def url(self) -> str:
        return self.config.base_url.rstrip("/") + "/chat/completions"

    async def complete(self, messages: list[Message], *, max_tokens: int) -> Completion:
        """One chat completion, with the retries above; ProviderError when there is none."""
        body = {"model": self.config.model, "messages": messages, "max_tokens": max_tokens}
        headers = {"Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        async with self._factory(timeout=httpx.Timeout(self.config.timeout_seconds)) as client:
            attempt = 0
            while True:
                error, wait = await self._attempt(client, body, headers, messages)
                if isinstance(error, Completion):
                    return error
                if not error.retryable or attempt >= self.config.max_retries or error.kind == "timeout":
                    raise error
                if wait is not None and wait > RETRY_AFTER_CAP_SECONDS:
                    raise error  # asked to wait longer than a turn should: hand off instead
                await self._sleep(wait if wait is not None else self._backoff(attempt))
                attempt += 1

    async def _attempt(self, client: httpx.AsyncClient, body: dict, headers: dict,
                       messages: list[Message]) -> tuple[Any, float | None]:
        """One POST: (Completion, None), or (ProviderError, the server's Retry-After or None)."""
        try:
            response = await client.post(self.url, json=body, headers=headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            return self._error("unreachable", f"could not connect to {self.config.base_url} ({type(exc).__name__})"), None
        except httpx.TimeoutException as exc:
            return self._error("timeout", f"no answer within {self.config.timeout_seconds:g} s "
                                          f"({type(exc).__name__})"), None
        except httpx.TransportError as exc:
            # the connection broke mid-exchange: the server's side of the call failed
            return self._error("server", f"the connection failed ({type(exc).__name__}: {exc})", retryable=True), None
        status = response.status_code
        if 200 <= status < 300:
            try:
                return self._completion(response, messages), None
            except ProviderError as exc:
                return exc, None
        said = _said(response)
        if status == 429:
            return self._error("rate_limited", f"HTTP 429{said}", status=status), _retry_after(response)
        if status >= 500:
            return self._error("server", f"HTTP {status}{said}", status=status), _retry_after(response)
        if status in (401, 403):
            return self._error("auth", f"HTTP {status}: the api key was refused{said}", status=status), None
        if 400 <= status < 500:
            return self._error("bad_request", f"HTTP {status}{said}", status=status), None
        return self._error("bad_response", f"unexpected HTTP {status}", status=status), None

    def _completion(self, response: httpx.Response, messages: list[Message]) -> Completion:
        """The response as a Completion; ProviderError(bad_response) naming what is missing."""
        try:
            doc = response.json()
        except (ValueError, UnicodeDecodeError):
            raise self._error("bad_response", "the body is not JSON") from None
        choices = doc.get("choices") if isinstance(doc, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._error("bad_response", "the body has no choices[0]")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise self._error("bad_response", "choices[0] has no message")
        content, refusal = message.get("content"), message.get("refusal")
        if content is not None and not isinstance(content, str):
            raise self._error("bad_response", "choices[0].message.content is not text")
        stop_reason = FINISH_REASONS.get(choices[0].get("finish_reason") or "", "")
        if isinstance(refusal, str) and refusal:
            content, stop_reason = refusal, "refusal"
        text = content or ""
        usage = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
        tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
        # An endpoint that reports no usage is still billing someone: estimate rather than
        # let its rounds pass the budget for free.
        if not isinstance(tokens_in, int):
            tokens_in = approx_tokens("".join(m.get("content", "") for m in messages))
        if not isinstance(tokens_out, int):
            tokens_out = approx_tokens(text)
        model = doc.get("model") if isinstance(doc.get("model"), str) and doc.get("model") else self.config.model
        return Completion(text=text, tokens_in=tokens_in, tokens_out=tokens_out,
                          stop_reason=stop_reason, model=model)

    def _error(self, kind: str, message: str, **kw: Any) -> ProviderError:
        return ProviderError(kind, message, provider_key=self.key, **kw)

    def _backoff(self, attempt: int) -> float:
        """Exponential with equal jitter: half the nominal wait, plus up to half again."""
        nominal = min(BACKOFF_CAP_SECONDS, self._backoff_base * (2 ** attempt))
        return nominal / 2 + self._jitter() * nominal / 2


def _retry_after(response: httpx.Response) -> float | None:
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
    except (ValueError, UnicodeDecodeError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str) or not message:
        return ""
    line = " ".join(message.split())
    return f": {line[:200]}"
