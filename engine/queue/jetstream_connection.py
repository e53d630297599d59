"""What is checked right after the queue's NATS connection opens (seed 002, "The largest
message every server must carry"): a server that holds the connection to a max_payload under
8 MiB is refused by name. Where and how to dial is `engine.queue.dial`.
"""
from __future__ import annotations

from nats.aio.client import Client

from engine.queue.broker import MAX_PAYLOAD_BYTES
from engine.queue.dial import (  # noqa: F401  (re-exported: the backend and its tests name them here)
    CONNECT_TIMEOUT_SECONDS,
    RECONNECT_WAIT_SECONDS,
    ConnectError,
    Dial,
    Refused,
    check_file,
    redact_url,
    scrub,
    tls_context,
)


class NatsClient(Client):
    """nats-py's client, keeping the max_payload of every INFO the server sends (the library
    reads only the first one's), so a limit stated after sign-in is the one checked."""

    async def _process_info(self, info: dict, initial_connection: bool = False) -> None:
        if isinstance(info, dict) and "max_payload" in info:
            self._max_payload = info["max_payload"]
        await super()._process_info(info, initial_connection)



def max_payload_refusal(server: str, announced: int) -> str:
    """Seed 002's refusal of a server that carries less than this build sends."""
    return (
        f"jetstream: the NATS server at {server} announces a max_payload of {announced} bytes for this node's "
        f"connection, below the {MAX_PAYLOAD_BYTES} bytes this build needs: that is the largest message it sends — "
        "an event, a webhook delivery, a state-log record at the largest its log declares — and a server that "
        "carries less takes every smaller write and refuses the first large one. Set max_payload: 8MB in the "
        "configuration of every server stream.url reaches, and wherever the account this node signs in to, or its "
        "user, states a payload limit of its own, raise that too: a server holds a connection to the lowest of them"
    )


