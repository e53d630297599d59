"""The API's bearer tokens (Tier A `api.auth.tokens`; seed 002, "Running the Engine + API").

`match_token` finds the configured token a caller presented, comparing in constant time against
every one of them; `grants_of` and `admits` say what it may do; `bearer` reads the token out of
an Authorization header. Every door decides with these -- a REST route's grant
(crewlet_site.auth), the node's gate that checks a token before a body is read
(engine.node.gate), the `/ws/stream` handshake (dashboard.consumers) -- so a token admitted by
one is admitted by all. A token value is never logged or put in an error.
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Iterable

from engine.config.node import Token

GRANTS = ("admin", "read")
READ_GRANTS = frozenset({"admin", "read"})  # what a read needs: either grant
SCHEME = "bearer"


def _digest(text: str) -> bytes:
    # Compare digests, not the strings: compare_digest is constant-time only for equal
    # lengths, and a digest makes every candidate the same length.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def match_token(tokens: Iterable[Token], presented: str) -> Token | None:
    """The configured token equal to `presented`, comparing against every one of them."""
    offered = _digest(presented or "")
    found = None
    for entry in tokens:
        secret = entry.token or ""
        # No early exit: every configured token is compared, whichever one matches.
        if hmac.compare_digest(offered, _digest(secret)) and secret and found is None:
            found = entry
    return found


def grants_of(entry: Token | None) -> frozenset[str]:
    """The grants a token carries; none for no token."""
    return frozenset(str(g) for g in (entry.grants if entry is not None else ()))


def admits(entry: Token | None, grant: str) -> bool:
    """Whether the token may use a route that needs `grant` (admin covers read)."""
    return bool(grants_of(entry) & ({"admin"} if grant == "admin" else READ_GRANTS))


def bearer(header_value: str | None) -> str | None:
    """The token in an `Authorization: Bearer <token>` header, else None."""
    scheme, _, token = (header_value or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == SCHEME and token else None


@dataclass(frozen=True)
class Caller:
    """Who a request came from, as the bearer check found it (ninja's `request.auth`): the
    token's id and the seat it is bound to (`api.auth.tokens[].seat`), if any. What an action
    records and a summary shows is `seat` when set, else the token's id -- a person's name,
    never an internal spelling such as `token:founder`."""

    token_id: str
    seat: str = ""

    @classmethod
    def of(cls, entry: Token) -> "Caller":
        return cls(entry.id, entry.seat or "")

    def __str__(self) -> str:
        return self.seat or self.token_id
