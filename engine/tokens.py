"""The API's bearer tokens (Tier A `api.auth.tokens`): the one check every door uses.

`crewlet_site.auth.TokenAuth` (a route's grant), `engine.gate.RequestGate` (a token before the
body is read) and the `/ws/stream` handshake all ask `match_token`, so a token admitted by
one is admitted by all. A presented token is compared with every configured one in constant
time, and is never logged.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import Any, Iterable

GRANTS = ("admin", "read")
SCHEME = "bearer"


def secret_of(value: Any) -> str:
    """A configured token's text (a pydantic SecretStr or a plain str); '' for anything else."""
    if hasattr(value, "get_secret_value"):
        value = value.get_secret_value()
    return value if isinstance(value, str) else ""


def grant_names(entry: Any) -> set[str]:
    """The grants a configured token carries, as plain names."""
    return {str(getattr(g, "value", g)) for g in getattr(entry, "grants", None) or ()}


def admits(entry: Any, grant: str) -> bool:
    """Whether the token may use a route that needs `grant` (admin covers read)."""
    allowed = {"admin"} if grant == "admin" else {"admin", "read"}
    return bool(grant_names(entry) & allowed)


def bearer(header_value: str | None) -> str | None:
    """The token in an `Authorization: Bearer <token>` header, else None."""
    scheme, _, token = (header_value or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == SCHEME and token else None


def _digest(text: str) -> bytes:
    # Compare digests, not the strings: compare_digest is constant-time only for equal
    # lengths, and a digest makes every candidate the same length.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def match_token(tokens: Iterable[Any], presented: str) -> Any | None:
    """The configured token equal to `presented`, comparing against every one of them."""
    offered = _digest(presented or "")
    found = None
    for entry in tokens:
        secret = secret_of(getattr(entry, "token", None))
        # No early exit: every configured token is compared, whichever one matches.
        if hmac.compare_digest(offered, _digest(secret)) and secret and found is None:
            found = entry
    return found
