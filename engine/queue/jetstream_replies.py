"""Request/reply on the JetStream backend's connection: plain NATS, no stream (seed 000,
"Reading the fleet's history": "the broker's ephemeral request/reply -- no stream, no
consumer, no stored record"). The subjects are request/reply ones (`topics.check_ephemeral`),
which no stream captures, so the server never answers a request with a publish ack.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import nats.errors

from engine.queue import topics
from engine.queue.contract import NoResponders, QueueError, RequestTimeout, Responder
from engine.queue.replies import ReplyTasks

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

    from engine.queue.jetstream import JetStreamQueue

# Every responder of one subject is one queue group, so a request is answered once even if
# two processes listen on it (a node id given twice, say).
REPLY_GROUP = "crewlet-reply"


class JetStreamReply:
    """A responder on one subject of this client's connection."""

    def __init__(self, queue: "JetStreamQueue", subject: str, responder: Responder) -> None:
        self.queue = queue
        self.subject = subject
        self.tasks = ReplyTasks(subject, responder)
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._sub = await self.queue.nc.subscribe(self.subject, queue=REPLY_GROUP, cb=self._on_message)
        # The server knows the subscription once a ping has come back: from then on a request
        # on another connection reaches it (without the flush it may meet "no responders").
        await self.queue.nc.flush()

    async def _on_message(self, msg: "Msg") -> None:
        if msg.reply:
            self.tasks.spawn(msg.data, msg.respond)

    async def close(self) -> None:
        self.queue.forget_reply(self)
        if self._sub is not None and not self.queue.nc.is_closed:
            try:
                await self._sub.unsubscribe()
            except nats.errors.Error:
                pass  # the connection is closing under us: the subscription goes with it
        await self.tasks.close()


async def ask(queue: "JetStreamQueue", subject: str, payload: bytes, timeout: float) -> bytes:
    """One request on the queue's connection; the contract's errors."""
    topics.check_ephemeral(subject)
    try:
        try:
            msg = await queue.nc.request(subject, payload, timeout=timeout)
        except nats.errors.NoRespondersError:
            # A connection's first requests can meet "no responders" from a server that has a
            # subscriber (measured: 2 in 200 fresh connections, none after a round trip). One
            # round trip, then the answer stands.
            await queue.nc.flush(timeout=timeout)
            msg = await queue.nc.request(subject, payload, timeout=timeout)
    except nats.errors.NoRespondersError:
        raise NoResponders(f"no responder on {subject}") from None
    except (TimeoutError, nats.errors.TimeoutError):
        raise RequestTimeout(f"no answer on {subject} within {timeout:g}s") from None
    except nats.errors.MaxPayloadError:
        raise QueueError(f"jetstream: a request on {subject} is larger than the server's max_payload") from None
    except nats.errors.Error as exc:
        raise QueueError(f"jetstream: request on {subject}: {exc}") from None
    return msg.data
