"""What every HTTP request meets before Django reads its body: a bearer token on the API's
routes and a body cap on every route (seed 002, "Running the Engine + API": the API answers to
the tokens in `api.auth.tokens`; "Exposing webhooks without the admin API").

Django's ASGI handler spools the whole body to a temporary file before any view or
authentication runs, so a 1 GiB upload to `POST /seats/alice/tasks` without a token became a
1 GiB file and then a 401. `RequestGate` answers first:

  an API route, no token or an unknown one     401 naming Authorization, the body unread
  Content-Length that is not a whole number    400 naming Content-Length
  a body past the route's cap                  413 naming the cap (by Content-Length before
                                               reading; by counting, for a chunked body)
  otherwise                                    the request, its body (at most the cap) replayed

A refusal with a body still on the wire reads and drops it up to DRAIN_LIMIT_BYTES first, so an
ordinary client that writes its whole body before reading sees the answer; past that the
connection ends with the answer (`connection: close`) and the rest is never read. The grant a route needs (read or admin) stays the route's own check
(`crewlet_site.auth.TokenAuth`); both ask `engine.config.tokens.match_token`. Webhooks pass through
untouched: the edge (`notify.asgi`) has its own 8 MiB cap and checks each vendor's signature.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Callable, Iterable

from engine.config import tokens as api_tokens

log = logging.getLogger("engine.node.gate")

# The REST routes (crewlet_site.api mounts them at the root): a token before anything else.
API_PREFIXES = ("/events", "/seats", "/config", "/budgets", "/schedules", "/a2a")
WEBHOOK_PREFIX = "/webhooks/"
# 64 KiB: an API body is a task's text or a pause reason; the largest a person would type is a
# few KiB, and every byte of it is read on the node's one event loop.
API_BODY_CAP = 64 * 1024
# 1 MiB for a page's form (the dashboard's and the admin's are a few hundred bytes) and for a
# company document (engine.api.MAX_DOCUMENT_BYTES: a 1,000-seat company is about 150 KiB).
DEFAULT_BODY_CAP = 1024 * 1024
BODY_CAPS: tuple[tuple[str, re.Pattern, int], ...] = (
    ("PUT", re.compile(r"^/config/?$"), 1024 * 1024),
)
# 16 MiB: read and dropped in well under a millisecond a mebibyte; a larger body is cut off.
DRAIN_LIMIT_BYTES = 16 * 1024 * 1024
UNAUTHENTICATED = "Authorization: a bearer token from api.auth.tokens is required"

TokenSource = Callable[[], Iterable[Any]]


class RequestGate:
    """ASGI: the token and body-cap checks above, in front of `app`; every other scope passes."""

    def __init__(self, app: Any, tokens: TokenSource, *, api_prefixes: tuple[str, ...] = API_PREFIXES,
                 caps: tuple[tuple[str, re.Pattern, int], ...] = BODY_CAPS, api_cap: int = API_BODY_CAP,
                 default_cap: int = DEFAULT_BODY_CAP) -> None:
        self.app = app
        self.tokens = tokens
        self.api_prefixes = api_prefixes
        self.caps = caps
        self.api_cap = api_cap
        self.default_cap = default_cap

    def is_api(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.api_prefixes)

    def cap_for(self, method: str, path: str) -> int:
        """The largest body `method path` may carry."""
        for wanted, pattern, cap in self.caps:
            if method == wanted and pattern.match(path):
                return cap
        return self.api_cap if self.is_api(path) else self.default_cap

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith(WEBHOOK_PREFIX):
            return await self.app(scope, receive, send)
        headers = _headers(scope)
        method = scope.get("method", "GET")
        body_expected = "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")
        if self.is_api(path):
            token = api_tokens.bearer(headers.get("authorization"))
            if token is None or api_tokens.match_token(self.tokens(), token) is None:
                if body_expected:
                    await _drain(receive, headers)
                return await _refuse(send, 401, UNAUTHENTICATED, close=body_expected)
        cap = self.cap_for(method, path)
        raw_length = headers.get("content-length")
        if raw_length is not None:
            if not raw_length.strip().isdigit():
                log.info("request_refused", extra={"path": path, "status": 400, "why": "content-length"})
                return await _refuse(send, 400, f"Content-Length: expected a whole number of bytes, got {raw_length[:32]!r}",
                                     close=True)
            if int(raw_length) > cap:
                await _drain(receive, headers)
                return await self._too_large(send, method, path, cap)
        if not body_expected:
            return await self.app(scope, receive, send)
        body, over = await _read(receive, cap)
        if over:
            await _drain(receive, headers, already=cap)
            return await self._too_large(send, method, path, cap)
        return await self.app(scope, _replay(body, receive), send)

    async def _too_large(self, send, method: str, path: str, cap: int) -> None:
        log.info("request_refused", extra={"path": path, "status": 413, "cap_bytes": cap})
        await _refuse(send, 413, f"body: {method} {path} takes at most {cap} bytes", close=True)


def _headers(scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").lower()
        out[name] = raw_value.decode("latin-1") if name not in out else f"{out[name]}, {raw_value.decode('latin-1')}"
    return out


async def _read(receive, cap: int) -> tuple[bytes, bool]:
    """(the body, False), or (b"", True) as soon as it passes `cap` -- the rest is never read."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks), False


async def _drain(receive, headers: dict[str, str], already: int = 0) -> None:
    """Read and drop a refused body when it is at most DRAIN_LIMIT_BYTES (declared, or counted
    for a chunked one); a larger one is left unread for the closing answer to cut off."""
    declared = headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > DRAIN_LIMIT_BYTES:
        return
    size = already
    while size <= DRAIN_LIMIT_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            return


def _replay(body: bytes, receive):
    """A receive() that hands the app the body already read, then waits on the connection."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send, status: int, detail: str, close: bool) -> None:
    payload = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if close:  # a body still on the wire is never read: the connection ends with the answer
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
