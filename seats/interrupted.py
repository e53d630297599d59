"""Turns a node started and never ended, closed at its next boot (seed 000, "Event Types":
agent_turn_completed and its outcome; seed 000, "The ack clock is real": the trigger of a turn
that never settled comes back when its ack window lapses).

The turn engine records an end for every turn whatever becomes of it -- completed, failed,
stopped, interrupted at a round by the lease's fence, or cancelled when the host lets the seat
go (seats.turn) -- and a turn that raised ends with its guard breach (seats.host). Only a
process that stops without running its own code leaves a turn open: a SIGKILL, the second
Ctrl-C's immediate exit, the watchdog, or a cut drain whose publish found the broker gone. Its
`agent_turn_started` stays in the node's store with nothing after it, and everything folded
from the store (the dashboard's seat states, the trace waterfall) would show the seat working
on it until its next turn.

So before a data node serves, `close_interrupted_turns` reads its own store for the turns it
started since its previous boot that have no end (`events.queries.unended_turns`), and
publishes for each an `agent_turn_completed` with outcome `interrupted` (error_kind
`node_stopped`) in the turn's own trace and span, so the waterfall closes that same row and
the seat's state folds to idle. The trigger itself is left to the broker: the completion
ledger holds no record of it, so it runs again under a new turn id once its delivery's ack
window lapses, on whichever node holds the seat then.
"""
from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from events.envelope import Event, new
from events.queries import unended_turns
from events.tracing import TraceContext
from events.types.system import AgentTurnCompleted
from seats.turn import INTERRUPTED_NODE_STOPPED

log = logging.getLogger("seats.interrupted")

NODE_STOPPED = ("the node stopped while this turn ran (killed, or a forced exit) and recorded its end when it "
                "started again; its trigger runs again")


def interrupted_end(started: Event, now: datetime) -> Event:
    """The `agent_turn_completed` closing the turn `started` began: outcome `interrupted`, in the
    turn's own trace and span, its duration from the start to `now`."""
    fields: dict[str, Any] = {name: started.get(name) or "" for name in
                              ("agent_id", "agent_handle", "agent_role", "turn_id", "conversation_key",
                               "trigger_id", "trigger_type")}
    took = max(0, int((now - started.timestamp).total_seconds() * 1000))
    data = AgentTurnCompleted(**fields, trigger_ids=list(started.get("trigger_ids") or []), outcome="interrupted",
                              failed=True, error=NODE_STOPPED, error_kind=INTERRUPTED_NODE_STOPPED, duration_ms=took)
    trace = TraceContext(started.trace_id, started.span_id, started.parent_span_id)
    return new(data, trace, source="engine", delegation_depth=started.delegation_depth,
               delegation_chain=started.delegation_chain, parent_turn_id=started.parent_turn_id)


def open_turns(node_id: str) -> list[Event]:
    """The turns `node_id` started and never ended, as their start events (a blocking store read)."""
    return [Event.from_wire({k: v for k, v in item.items() if k not in ("category", "summary")})
            for item in unended_turns(node_id)]


async def close_interrupted_turns(node_id: str, read: Callable[[str], Awaitable[list[Event]]],
                                  publish: Callable[[Event], Awaitable[None]]) -> list[str]:
    """Record an `interrupted` end for every turn `node_id` left open; the turn ids it closed.
    `read` runs `open_turns` off the loop; a publish that fails is logged, and the turn is
    closed at the next boot instead."""
    closed = []
    for started in await read(node_id):
        end = interrupted_end(started, datetime.now(timezone.utc))
        try:
            await publish(end)
        except Exception as exc:
            log.warning("turn_interrupted_unrecorded", extra={"turn_id": end.get("turn_id"), "error": str(exc)})
            continue
        closed.append(str(end.get("turn_id")))
        log.info("turn_interrupted_recorded", extra={"seat": end.get("agent_handle"), "turn_id": end.get("turn_id"),
                                                     "started_at": started.timestamp.isoformat()})
    return closed
