"""How this node dials a NATS server: where, and with what (seed 002, "An external NATS
server": `stream.url`, `stream.credentials`, `stream.token`, `stream.tls`).

One `Dial` serves every connection a node opens -- the queue's and the coordination store's
alike -- so TLS and credentials reach both (seed 002: "The coordination KV rides this same
connection on purpose -- one connection, one fate"). It lives apart from the JetStream backend
so the coordination store may use it without naming a queue backend (the import rule).

- stream.tls and the credentials file are opened before the dial, and a file that cannot be
  is named by its field: left to the client it surfaces as a dial error that reads exactly
  like an unreachable broker.
- A server is named by scheme, host and port alone: a URL's userinfo is never repeated.
- A server that answers and refuses the client (its certificate, its credentials) is an
  answer: `Dial.connect` raises `Refused` naming it at once, for the queue's connection and
  the coordination store's alike, where the client would redial it for ever (seed 002, "A
  connection the client gives up on is a node restart").
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

import nats.errors
import nkeys

from engine.queue.contract import QueueError


CONNECT_TIMEOUT_SECONDS = 2.0   # seed 002: each attempt (dial, TLS, handshake) gets 2 s
RECONNECT_WAIT_SECONDS = 1.0


class ConnectError(QueueError):
    """A connection could not be made, or refused the server it reached."""


class Refused(ConnectError):
    """The server answered the dial and refused this client; `refusal` is its words, scrubbed
    of the dial's secrets, for each connection's owner to name in its own error."""

    def __init__(self, server: str, refusal: str) -> None:
        self.server = server
        self.refusal = refusal
        super().__init__(f"{server} refused this node: {refusal}")


def is_refusal(exc: BaseException) -> bool:
    """A server that answered and refused: a certificate it would not take, credentials it
    does not admit (never a server that is merely not there yet)."""
    if isinstance(exc, (nats.errors.AuthorizationError, nats.errors.SecureConnRequiredError,
                        nats.errors.SecureConnWantedError)):
        return True
    if isinstance(exc, ssl.SSLError):
        return not isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError))
    return "authorization violation" in str(exc).lower()


@dataclass(frozen=True)
class Dial:
    """Where the broker is and how to sign in: Tier A `stream.url`, `token`, `credentials` and
    `tls` (an embedded member's own URL and per-boot token), the client's name, and how long an
    attempt and how many reconnects (-1: for ever) the connection gets."""

    url: str
    token: str | None = None
    user_credentials: str | None = None
    tls: Any = None
    name: str | None = None
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS
    max_reconnect_attempts: int = -1

    @property
    def server(self) -> str:
        """The server(s) as a log line may name them: no userinfo."""
        return redact_url(self.url)

    def scrub(self, text: str) -> str:
        """`text` without this dial's userinfo or token."""
        return scrub(text, self.url, self.token)

    def options(self, *, error_cb: Callable[[Exception], Awaitable[None]], disconnected_cb: Callable[[], Awaitable[None]],
                reconnected_cb: Callable[[], Awaitable[None]], closed_cb: Callable[[], Awaitable[None]]) -> dict[str, Any]:
        """nats-py's connect options: the files checked and the TLS context built first, so a file
        that cannot be opened is named by its field rather than reported as an unreachable broker."""
        if self.user_credentials:
            check_credentials("stream.credentials", self.user_credentials)
        context = tls_context(self.tls)
        options: dict[str, Any] = dict(
            servers=[s.strip() for s in self.url.split(",") if s.strip()],
            name=self.name,
            allow_reconnect=True,
            max_reconnect_attempts=self.max_reconnect_attempts,
            reconnect_time_wait=RECONNECT_WAIT_SECONDS,
            connect_timeout=self.connect_timeout,
            error_cb=error_cb,
            disconnected_cb=disconnected_cb,
            reconnected_cb=reconnected_cb,
            closed_cb=closed_cb,
            # The servers named, and no others: a cluster member's peers are not this node's.
            dont_randomize=True,
        )
        if self.token:
            options["token"] = self.token
        if self.user_credentials:
            options["user_credentials"] = self.user_credentials
        if context is not None:
            options["tls"] = context
        return options

    async def connect(self, nc: Any, options: dict[str, Any]) -> None:
        """Open `nc` (a nats-py client) with `options` (from `Dial.options`). The client redials a
        server that is not there -- for ever, or `max_reconnect_attempts` times -- but the first
        refusal ends the dial: the client is closed and `Refused` names the server and its
        words. A refusal heard once connected is the owner's `error_cb`'s alone."""
        answer: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        report = options["error_cb"]

        async def error_cb(exc: Exception) -> None:
            if not answer.done() and is_refusal(exc):
                answer.set_result(exc)
            await report(exc)

        dialing = asyncio.ensure_future(nc.connect(**{**options, "error_cb": error_cb}))
        try:
            await asyncio.wait({dialing, answer}, return_when=asyncio.FIRST_COMPLETED)
            if dialing.done() and (dialing.exception() is None or not answer.done()):
                dialing.result()  # connected (a refusal in the same instant is moot), or failed otherwise
                return
        finally:
            if not answer.done():
                answer.cancel()  # nothing later is this dial's refusal
            if not dialing.done():  # refused, or the caller cancelled
                dialing.cancel()
                with contextlib.suppress(BaseException):
                    await dialing
                with contextlib.suppress(Exception):
                    await nc.close()
        error = answer.result()
        raise Refused(self.server, self.scrub(str(error) or type(error).__name__))


def redact_url(url: str) -> str:
    """Each server of a URL list by scheme, host and port alone, never its userinfo."""
    out = []
    for part in (url or "").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            parsed = urlsplit(part if "://" in part else f"nats://{part}")
            host = parsed.hostname or ""
            port = f":{parsed.port}" if parsed.port else ""
            out.append(f"{parsed.scheme}://{host}{port}" if host else "an address that does not parse")
        except ValueError:
            out.append("an address that does not parse")
    return ",".join(out) or "an address that does not parse"


def _field(tls: Any, name: str) -> str | None:
    if tls is None:
        return None
    value = tls.get(name) if isinstance(tls, dict) else getattr(tls, name, None)
    return str(value) if value else None


def check_file(field: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConnectError(f"{field} {path}: {(exc.strerror or str(exc)).lower()}") from None


def check_credentials(field: str, path: str) -> None:
    """A credentials file the client can sign in with: a user JWT and an NKey seed that parses,
    each on the line after its block's opening marker, as nats-py reads them. Left to the
    client, a file without them fails inside the library ("object of type 'NoneType' has no
    len()"). Named by its field; the file's contents are never repeated."""
    check_file(field, path)
    with open(path, "rb") as f:
        lines = f.read().splitlines()

    def block(marker: bytes) -> bytes:
        for i, line in enumerate(lines[:-1]):
            if marker in line:
                return lines[i + 1].strip()
        return b""

    if not block(b"BEGIN NATS USER JWT"):
        raise ConnectError(f"{field} {path}: not a NATS credentials file (no user JWT block)")
    seed = bytearray(block(b"BEGIN USER NKEY SEED"))
    if not seed:
        raise ConnectError(f"{field} {path}: not a NATS credentials file (no user NKey seed block)")
    try:
        nkeys.from_seed(seed).wipe()
    except Exception:
        raise ConnectError(f"{field} {path}: its user NKey seed does not parse") from None


def tls_context(tls: Any) -> ssl.SSLContext | None:
    """The dial's TLS from `stream.tls` (ca, cert, key), each file opened first and named by
    its field when it cannot be. No switch skips verification (seed 002)."""
    ca, cert, key = _field(tls, "ca"), _field(tls, "cert"), _field(tls, "key")
    if not (ca or cert or key):
        return None
    for name, path in (("ca", ca), ("cert", cert), ("key", key)):
        if path:
            check_file(f"stream.tls.{name}", path)
    if bool(cert) != bool(key):
        missing = "key" if cert else "cert"
        raise ConnectError(f"stream.tls.{missing}: a client certificate needs both cert and key, or neither")
    try:
        context = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    except ssl.SSLError as exc:
        raise ConnectError(f"stream.tls.ca {ca}: {exc.reason or exc}") from None
    if cert and key:
        try:
            context.load_cert_chain(cert, key)
        except ssl.SSLError as exc:
            raise ConnectError(f"stream.tls.cert {cert}: {exc.reason or exc} (with stream.tls.key {key})") from None
    return context


def scrub(text: str, url: str, token: str | None) -> str:
    """text without any userinfo of url, nor the token."""
    for part in (url or "").split(","):
        with contextlib.suppress(ValueError):
            parsed = urlsplit(part.strip())
            if parsed.username:
                text = text.replace(parsed.username, "[redacted]")
            if parsed.password:
                text = text.replace(parsed.password, "[redacted]")
    if token:
        text = text.replace(token, "[redacted]")
    return text
