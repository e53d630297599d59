"""Bearer-token authentication for the REST API (Tier A `api.auth.tokens`), attached where the
apps' routers are mounted (crewlet_site.api), so no app knows how a caller is admitted.

A read (GET, HEAD, OPTIONS) needs a token with the `read` or the `admin` grant; a write (any
other method) one with `admin`. `TokenAuth("read")` or `TokenAuth("admin")` pins one grant for
every method. A request with no token or an unknown one is a 401 (answered by
crewlet_site.api, naming the Authorization header); a known token without the grant is a
403. Tokens are matched by `engine.config.tokens` (constant time, every token compared) and
never logged: a refusal is logged by the token's id and the route.
"""
from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from engine.config import tokens
from engine.config.node import Token
from engine.config.tokens import Caller

log = logging.getLogger("api.auth")

GRANTS = tokens.GRANTS
READS = frozenset({"GET", "HEAD", "OPTIONS"})


def configured_tokens() -> list[Token]:
    """The node's API tokens, or none when the config did not load."""
    config = settings.NODE.config
    return list(config.api.auth.tokens) if config is not None else []


def match_token(presented: str) -> Token | None:
    """The configured token equal to `presented` (engine.config.tokens, the check every door uses)."""
    return tokens.match_token(configured_tokens(), presented)


class TokenAuth(HttpBearer):
    """A route's bearer check; `authenticate` returns the token's `Caller` (its id and the seat it is
    bound to), which ninja puts on `request.auth`."""

    def __init__(self, grant: str | None = None) -> None:
        if grant is not None and grant not in GRANTS:
            raise ValueError(f"auth: grant must be one of {', '.join(GRANTS)}, got {grant!r}")
        super().__init__()
        self.grant = grant

    def needs(self, request: HttpRequest) -> str:
        """The grant this request needs: the pinned one, else read for a read and admin for a write."""
        return self.grant or ("read" if request.method in READS else "admin")

    def __call__(self, request: HttpRequest) -> Caller | None:
        # Parsed here rather than by HttpBearer, which logs a malformed header (and the
        # token inside it) when DEBUG is on.
        token = tokens.bearer(request.headers.get(self.header))
        return None if token is None else self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> Caller | None:
        entry = match_token(token or "")
        if entry is None:
            return None  # ninja raises AuthenticationError: 401 naming the Authorization header
        needs = self.needs(request)
        if not tokens.admits(entry, needs):
            log.warning("api_token_refused", extra={"token_id": entry.id, "path": request.path, "needs": needs})
            raise HttpError(403, f"{request.path}: the token {entry.id!r} lacks a grant this route needs; it needs the {needs} grant")
        return Caller.of(entry)
