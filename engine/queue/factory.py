"""The one place the node gets its EventQueue from (DESIGN.md, "Shape": nothing outside
`engine/queue/` imports a backend module; callers cannot tell which one runs).

`stream.type: embedded` starts this node's broker (`broker.EmbeddedBroker`) and connects to
it; `stream.type: nats` connects to `stream.url` with `stream.token` / `stream.credentials` /
`stream.tls`. Either way the client is `jetstream.JetStreamQueue`: the connection is the only
branch (seed 002, "The stream beyond one host").

`on_fatal(exit_code, reason)` is how the node learns it must end: the embedded broker died
after the boot (`EXIT_BROKER_DIED`, 69, no drain) or the connection was closed for good
(`EXIT_CONNECTION_CLOSED`, 1, after a drain).
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from engine.queue.broker import EXIT_BROKER_DIED, BrokerError, EmbeddedBroker
from engine.queue.contract import EventQueue, QueueError, Tuning
from engine.queue.jetstream import EXIT_CONNECTION_CLOSED, JetStreamQueue, Layout
from engine.queue.dial import Dial
from engine.queue.topics import EVENT_RETENTION_HOURS_DEFAULT

if TYPE_CHECKING:  # Tier A is read, never imported at run time: engine.config reads engine.queue's limits
    from engine.config.node import NodeConfig

OnFatal = Callable[[int, str], "Awaitable[None] | None"]

__all__ = ["EXIT_BROKER_DIED", "EXIT_CONNECTION_CLOSED", "BrokerError", "Dial", "EmbeddedBroker", "dial_for", "open_queue"]


def _fatal(on_fatal: OnFatal | None, code: int) -> Callable[[str], Any] | None:
    if on_fatal is None:
        return None

    async def report(reason: str) -> None:
        result = on_fatal(code, reason)
        if inspect.isawaitable(result):
            await result

    return report


def dial_for(cfg: "NodeConfig", broker: EmbeddedBroker | None) -> Dial:
    """How every connection this node opens dials its broker -- the queue's and the coordination
    store's alike (seed 002: "one connection, one fate"): its own embedded member's URL and
    per-boot token, with the listeners' budget for the handshake and a member gone that long
    gone for good; or `stream.url` with `stream.token`, `stream.credentials` and `stream.tls`,
    2 s an attempt and redialled for ever."""
    if broker is not None:
        return Dial(broker.client_url, token=broker.token, connect_timeout=broker.listeners_timeout_seconds,
                    max_reconnect_attempts=int(broker.listeners_timeout_seconds))
    stream = cfg.stream
    if not stream.url:
        raise QueueError("stream.url: stream.type nats dials a NATS server; set its URL")
    return Dial(stream.url, token=stream.token or None, user_credentials=stream.credentials or None, tls=stream.tls)


async def open_queue(
    cfg: "NodeConfig",
    *,
    node_id: str,
    on_fatal: OnFatal | None = None,
    tuning: Tuning = Tuning(),
) -> tuple[EventQueue, EmbeddedBroker | None]:
    """The node's queue, ready (streams provisioned), and its embedded broker when it runs
    one (the caller stops it after closing the queue). QueueError when either cannot start."""
    stream = cfg.stream
    kind = stream.type or "embedded"
    retention = stream.event_retention_hours or EVENT_RETENTION_HOURS_DEFAULT
    replicas = int(stream.replicas or 1)
    if kind == "embedded":
        broker = EmbeddedBroker.from_config(cfg, on_death=_fatal(on_fatal, EXIT_BROKER_DIED))
        await broker.start()
        try:
            queue = await JetStreamQueue.connect(
                dial_for(cfg, broker), node_id=node_id, tuning=tuning,
                layout=Layout(event_retention_hours=retention, replicas=replicas, clustered=broker.cluster is not None),
                on_closed_for_good=_fatal(on_fatal, EXIT_CONNECTION_CLOSED))
        except BaseException:
            await broker.stop()
            raise
        return queue, broker
    if kind == "nats":
        queue = await JetStreamQueue.connect(
            dial_for(cfg, None), node_id=node_id, tuning=tuning,
            layout=Layout(event_retention_hours=retention, replicas=replicas, clustered=True),
            on_closed_for_good=_fatal(on_fatal, EXIT_CONNECTION_CLOSED))
        return queue, None
    raise QueueError(f"stream.type: {kind!r} is not a stream type (embedded or nats)")
