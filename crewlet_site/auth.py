"""Bearer-token authentication for the REST API (Tier A `api.auth.tokens`).

`TokenAuth("read")` admits a token with the `read` or the `admin` grant; `TokenAuth("admin")`
only one with `admin`. A request with no token or an unknown one is a 401 (answered by
crewlet_site.api, naming the Authorization header); a known token without the grant is a
403. The token is compared with every configured one in constant time, and is never
logged: a refusal is logged by the token's id and the route.
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import HttpError
from ninja.security import HttpBearer

from engine import tokens

log = logging.getLogger("api.auth")

GRANTS = tokens.GRANTS


def configured_tokens() -> list[Any]:
    """The node's API tokens, or none when the config did not load."""
    config = getattr(settings.NODE, "config", None)
    auth = getattr(getattr(config, "api", None), "auth", None)
    return list(getattr(auth, "tokens", None) or ())


def match_token(presented: str) -> Any | None:
    """The configured token equal to `presented` (engine.tokens, the check every door uses)."""
    return tokens.match_token(configured_tokens(), presented)


class TokenAuth(HttpBearer):
    """A route's bearer check; `authenticate` returns the token's id, which ninja puts on `request.auth`."""

    def __init__(self, grant: str = "read") -> None:
        if grant not in GRANTS:
            raise ValueError(f"auth: grant must be one of {', '.join(GRANTS)}, got {grant!r}")
        super().__init__()
        self.grant = grant

    def __call__(self, request: HttpRequest) -> str | None:
        # Parsed here rather than by HttpBearer, which logs a malformed header (and the
        # token inside it) when DEBUG is on.
        token = tokens.bearer(request.headers.get(self.header))
        return None if token is None else self.authenticate(request, token)

    def authenticate(self, request: HttpRequest, token: str) -> str | None:
        entry = match_token(token or "")
        if entry is None:
            return None  # ninja raises AuthenticationError: 401 naming the Authorization header
        token_id = str(getattr(entry, "id", ""))
        if not tokens.admits(entry, self.grant):
            log.warning("api_token_refused", extra={"token_id": token_id, "path": request.path, "needs": self.grant})
            raise HttpError(403, f"{request.path}: the token {token_id!r} lacks a grant this route needs; it needs the {self.grant} grant")
        return token_id
