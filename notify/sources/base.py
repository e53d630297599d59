"""What every webhook source provides (seed 000, "Routing", "Inbox Batching & Coalescing":
partition keys and conversation identities "derived by pure logic from webhook metadata, via
the same per-source notify.Prompt classes that own prompt building"; "Distributed Tracing":
a chat parser's own filtering is not a skip).

A source owns five things, side by side in its own module (STYLE.md, "Layout"):
- its signature check (`verify`), in constant time, raising `SignatureError` naming the header;
- its reading of the body (`decode`) and of the delivery's identity (`delivery_id`, `event_kind`);
- its parser (`parse`): a `Notification`, an `Ignored` (chat noise, logged at debug), or
  `ParseError` (the parser refuses the payload, recorded as a skip);
- its partition key and conversation identity, carried on the `Notification`;
- its digest rule (`digest_body`): what an earlier constituent contributes to a digest trigger.
"""
from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

from notify.errors import NotifyError

MAX_BODY_BYTES = 8 * 1024 * 1024  # seed 002: the largest message the engine sends


class SourceError(NotifyError):
    """Base error of a source; `detail` is what an HTTP answer or a skip row says."""


class SignatureError(SourceError):
    """The delivery is not signed by the company's secret; `header` names where it looked."""

    def __init__(self, header: str, why: str) -> None:
        self.header = header
        super().__init__(f"{header}: {why}")


class PayloadError(SourceError):
    """The body cannot be read at all (not JSON, not the form the source sends)."""


class ParseError(SourceError):
    """The body was read, and the parser refuses it (a field it needs is missing or malformed)."""


@dataclass(frozen=True)
class Address:
    """Somebody a delivery names, in the source's own words (a login, a user id, an account id).

    `why`: mention | dm | assignee | reviewer | author | participant | follower.
    `explicit`: addressed by name -- an explicit address no seat matches is a recorded skip;
    an implicit one (the author of the PR a comment lands on) that matches nobody is not news.
    """

    who: str
    why: str
    explicit: bool = True
    aka: tuple[str, ...] = ()        # the same person's other identifiers (Jira: account id, email, name)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.who, *self.aka)

    @property
    def direct(self) -> bool:
        """Whether somebody waits on the addressee: a mention, a DM, a review or an assignment."""
        return self.why in ("mention", "dm", "reviewer", "assignee") and self.explicit


@dataclass(frozen=True)
class Notification:
    """One parsed delivery, before routing. `body` is the enriched prompt (the per-source
    scaffolding rendered around the message); `salient_body` is the message itself; `lead` is
    the one line that names the event, what a superseded constituent collapses to."""

    source: str
    event_kind: str
    subject: str
    sender: str                      # the author, in the source's words (login, user id)
    body: str
    salient_body: str
    lead: str
    partition_key: str
    conversation_identity: str
    message_id: str
    addresses: tuple[Address, ...] = ()
    url: str = ""
    lifecycle: bool = False          # a state change (opened, closed, updated), not a message
    thread: str = ""                 # chat: the thread a reply belongs to, for its followers
    sender_aka: tuple[str, ...] = ()  # the author's other identifiers
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ignored:
    """Chat noise the parser filters (seed 000: an agent's own post, a thread reply nobody
    follows, a system or deleted post, a bot message): logged at debug as `log_event`, never
    recorded."""

    log_event: str
    why: str


@runtime_checkable
class Source(Protocol):
    """One webhook source. Instances are stateless; secrets are handed in at verify time."""

    name: str
    secret_field: str                 # the integrations block's secret: `webhook_secret`, `token`, ...
    signature_header: str             # the header (or body field) a 401 names
    kept_headers: tuple[str, ...]     # the headers worth carrying (never one that holds the secret)

    def verify(self, secret: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
        """Return when `body` is signed by `secret`; SignatureError naming the header otherwise."""

    def decode(self, headers: Mapping[str, str], body: bytes) -> Any:
        """The body as the source sent it; PayloadError when it cannot be read."""

    def delivery_id(self, headers: Mapping[str, str], payload: Any, body: bytes) -> str:
        """The provider's identity for this delivery, the same on every retry of it."""

    def event_kind(self, headers: Mapping[str, str], payload: Any) -> str:
        """The provider's name for what happened (`issue_comment`, `jira:issue_updated`)."""

    def challenge(self, payload: Any) -> dict | None:
        """An answer the provider expects instead of a 202 (Slack's url_verification), else None."""

    def parse(self, event_kind: str, payload: Any) -> Notification | Ignored | None:
        """The notification; Ignored for chat noise; None for an event addressed to nobody
        (a ping, a push). ParseError when the payload lacks what the event kind needs."""

    def digest_body(self, message: Mapping[str, Any]) -> str:
        """What an EARLIER constituent contributes to a digest: its lead where a supersede rule
        fires, else its salient body (comments and messages always keep their text)."""


# -- what most sources share ------------------------------------------------------------------
def header(headers: Mapping[str, str], name: str) -> str:
    """A header's value by case-insensitive name, '' when absent."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return ""


def hmac_hex(secret: bytes, message: bytes) -> str:
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def check_prefixed_hmac(secret: bytes, body: bytes, given: str, header_name: str) -> None:
    """`sha256=<hex>` over the body, compared in constant time (GitHub, Jira)."""
    if not given:
        raise SignatureError(header_name, "missing; the delivery must be signed with the integration's secret")
    expected = "sha256=" + hmac_hex(secret, body)
    if not hmac.compare_digest(expected.encode(), given.strip().encode()):
        raise SignatureError(header_name, "does not match the body signed with the integration's secret")


def check_token(secret: bytes, given: str, where: str) -> None:
    """A shared token compared in constant time (GitLab's header, Mattermost's body field)."""
    if not given:
        raise SignatureError(where, "missing; the delivery must carry the integration's token")
    if not hmac.compare_digest(secret, given.encode()):
        raise SignatureError(where, "does not match the integration's token")


def decode_json(body: bytes) -> Any:
    """The JSON object a source sends; PayloadError naming the parser's complaint (a body nested
    past the reader's recursion bound, about a thousand levels, is refused as too deep)."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"body: not JSON ({exc})") from None
    except RecursionError:
        raise PayloadError("body: JSON nested too deep to read (a delivery nests a few levels)") from None
    if not isinstance(payload, dict):
        raise PayloadError(f"body: expected a JSON object, got {type(payload).__name__}")
    return payload


def body_digest(body: bytes) -> str:
    """A delivery id for a source whose provider sends none: the same bytes, the same id."""
    return "sha256-" + hashlib.sha256(body).hexdigest()[:32]


def dig(payload: Any, *path: str, default: Any = None) -> Any:
    """payload[a][b]... or default when any step is missing or not a mapping."""
    node = payload
    for step in path:
        if not isinstance(node, Mapping) or step not in node:
            return default
        node = node[step]
    return node


def need(payload: Any, *path: str) -> Any:
    """Like dig, but ParseError naming the dotted path when the value is missing or empty."""
    value = dig(payload, *path)
    if value is None or value == "":
        raise ParseError(f"{'.'.join(path)}: missing")
    return value


def render(lead: str, text: str, url: str, context: str = "") -> str:
    """The enriched body every source renders: the lead, the message, then where to read more."""
    parts = [lead]
    if text:
        parts += ["", text.strip()]
    if context:
        parts += ["", context.strip()]
    if url:
        parts += ["", "## Get Full Context", url]
    return "\n".join(parts)


class BaseSource:
    """Defaults a source overrides where it differs."""

    name = ""
    secret_field = ""
    signature_header = ""
    kept_headers: tuple[str, ...] = ()

    @property
    def noise_log_event(self) -> str:
        """The debug log line for what this source's parser filters (an agent's own post)."""
        return f"{self.name}_event_skipped"

    def decode(self, headers: Mapping[str, str], body: bytes) -> Any:
        return decode_json(body)

    def challenge(self, payload: Any) -> dict | None:
        return None

    def digest_body(self, message: Mapping[str, Any]) -> str:
        return str(message.get("salient_body") or message.get("lead") or "")

    def scrubbed(self, headers: Mapping[str, str], body: bytes, payload: Any) -> bytes:
        """The body as it is recorded and queued: the delivery less any credential it carries
        (a source whose secret rides the body removes it; the signature headers are never kept)."""
        return body

    def headers_kept(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The headers worth carrying on the delivery, by their canonical names."""
        out = {}
        for name in self.kept_headers:
            value = header(headers, name)
            if value:
                out[name] = value
        return out
