"""The A2A service: one ask, one answer, then the channel closes (seed 000, "Ephemeral A2A
channels"; "Routing", producer 3: "the A2A service, which publishes the a2a_request wake to the
target's inbox and the a2a_message answer to the asker's"; "Event Types": a2a_channel_opened,
a2a_message_sent, a2a_channel_closed, and the two wakes, which are not stored).

`ask` is what the built-in `a2a_ask` tool calls (and the operator's `POST /a2a/ask`). It refuses
-- as a tool result the model reads, with the reason -- an unknown seat, a human seat, the asker
itself, an empty brief or one over `MAX_BRIEF_BYTES`, and an ask past the company's
`turns.depth_cap`.
Otherwise it opens the channel record, publishes the `a2a_request` wake to the target's inbox
and records `a2a_channel_opened`. The asker's turn then ends; the answer wakes it.

`answer` is called by the seat host running the answering turn, as soon as that turn's last
round completed with the seat's lease held (the turn engine starts it beside the turn's phase
and end records, not after them), and is awaited before the trigger is recorded worked in the
completion ledger: the node that authorises the answer is the one holding the answering seat,
never the one that opened the channel. A turn that then fails to record its end is run again
(its mail NAKed or deferred, unrecorded), and that run answers as a redelivery does. It
publishes the `a2a_message` wake to the asker's inbox FIRST, under an id derived from the
channel, then closes the record and records `a2a_message_sent` and `a2a_channel_closed`. A
redelivery of the ask (the node died before its ack) runs into the closed record and sends the
same wake again, which the broker's duplicate window and the asker's same-id dedupe and ledger
collapse: the asker is woken once. An answer to a channel the sweep closed bounces: the closed
record is the answer to "why did my reply bounce".

`sweep` is the maintenance duty's: it closes channels idle for `IDLE_CLOSE_SECONDS` ("system
closed A2A channel", no closed_by, no turn) and deletes records `RETAIN_CLOSED_SECONDS` after
they closed. Neither is configurable (the seed's numbers); tests shorten them as settings.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from a2a.channels import Channel, ChannelBook, utc
from a2a.node import A2ANode
from engine.coord.contract import CoordError, KeyExists
from engine.queue import topics
from engine.queue.contract import QueueError
from engine.config import Company
from events.envelope import Event, new
from events.tracing import TraceContext, new_span_id, new_trace_id
from events.types.a2a import A2AChannelClosed, A2AChannelOpened, A2AMessageSent
from events.types.wakes import A2AMessage, A2ARequest

log = logging.getLogger("a2a")

# 64 KiB of UTF-8: a brief is a question, re-sent on every round of the answering turn and
# stored twice (the opened row, the wake); 64 KiB is some 16k tokens, far past any question,
# and leaves the wake well inside the broker's 1 MiB message limit with its envelope.
MAX_BRIEF_BYTES = 64 * 1024
# The seed's: three times the longest a turn can legitimately still be running.
IDLE_CLOSE_SECONDS = 3600.0
# The seed's: closed records outlive the conversation so "why did my reply bounce" has an answer.
RETAIN_CLOSED_SECONDS = 7 * 24 * 3600.0
# The namespace the answer's ids are derived in: uuid5(ANSWER_NAMESPACE, "<channel>/<what>").
# Fixed for ever: a redelivered ask must answer with the ids the first answer carried.
ANSWER_NAMESPACE = uuid.UUID("6a3c1e0d-94b7-5f28-8d41-2e7b9c5f0a13")

REFUSED = "a2a_ask refused"
ANSWERED, BOUNCED, NOT_AUTHORISED = "answered", "bounced", "not_authorised"


@dataclass(frozen=True)
class AskOutcome:
    """What an ask came to. `text` is what the model reads as the tool result: the refusal's
    reason, or that the ask went out and the answer will wake it. `status` is the HTTP answer
    the operator's route gives (202 asked, 404 an unknown seat, 422 any other refusal, 503
    a node that cannot take it)."""

    ok: bool
    text: str
    channel_id: str = ""
    status: int = 202


def _refused(status: int, reason: str) -> AskOutcome:
    return AskOutcome(ok=False, text=f"{REFUSED}: {reason}", status=status)


def check_ask(node: A2ANode, *, asker: str, target: str, brief: str, depth: int) -> AskOutcome | None:
    """The refusal an ask earns, or None when it may go out."""
    if node.company is None or node.stopping:
        return _refused(503, "this node serves no company right now; try again in a moment")
    return ask_refusal(node.company, asker=asker, target=target, brief=brief, depth=depth)


def ask_refusal(company: Company, *, asker: str, target: str, brief: str, depth: int) -> AskOutcome | None:
    """The rules an ask meets, by the company alone (the `a2a_ask` tool checks the same before it
    hands a question over): a seat of the company, an agent, not the asker, a brief of some
    words under MAX_BRIEF_BYTES, and a chain of asks no deeper than `turns.depth_cap` (seed 000,
    `turn.guard_breach` depth_cap; the company sets the number). `depth` is the asking turn's
    trigger's delegation depth; the ask goes one deeper."""
    target = target or ""
    seat = company.seat_by_handle(target)
    if seat is None:
        known = ", ".join(s.handle for s in company.agent_seats() if s.handle != asker) or "none"
        return _refused(404, f"seat: {target!r} is no seat of the company; agent seats you can ask: {known}")
    if not seat.is_agent:
        return _refused(422, f"seat: {target!r} is a human seat; reach a person on the team's chat or tracker, not with a2a_ask")
    asking = company.seat_by_handle(asker)
    if asking is None or not asking.is_agent:
        return _refused(422, f"asker: {asker!r} is no agent seat of the company; only an agent asks another")
    if target == asker:
        return _refused(422, f"seat: {target!r} is you; an ask goes to another seat")
    size = len((brief or "").encode("utf-8"))
    if not (brief or "").strip():
        return _refused(422, "brief: empty; say what you need answered")
    if size > MAX_BRIEF_BYTES:
        return _refused(422, f"brief: {size:,} bytes is over the {MAX_BRIEF_BYTES:,}-byte limit; ask a shorter question "
                             "and point at where the rest is")
    cap = company.turns.depth_cap
    if depth + 1 > cap:
        return _refused(422, f"delegation depth: this ask would be hop {depth + 1} of a chain of asks, past the cap of "
                             f"{cap} (turns.depth_cap); answer with what you have")
    return None


async def ask(node: A2ANode, *, asker: str, target: str, brief: str, depth: int, trace: TraceContext,
              turn_id: str = "", chain: tuple[str, ...] = ()) -> AskOutcome:
    """Ask `target` on behalf of `asker`, whose trigger is at delegation `depth` (its chain of
    askers `chain`, its turn `turn_id`). The events are published under `trace` -- the asking
    turn's tool call -- so the ask, the answering turn and the answer's wake are one trace."""
    refusal = check_ask(node, asker=asker, target=target, brief=brief, depth=depth)
    if refusal is not None:
        log.info("a2a_ask_refused", extra={"asker": asker, "target": target, "reason": refusal.text})
        return refusal
    company = node.company
    channel_id = str(uuid.uuid4())
    request_id = uuid.uuid4()
    book = ChannelBook(node.coord)
    try:
        channel = await book.open(Channel(channel_id=channel_id, requester=asker, responder=target, ask_turn_id=turn_id,
                                          request_id=str(request_id), brief_bytes=len(brief.encode("utf-8")),
                                          depth=depth + 1, trace_id=trace.trace_id))
    except (CoordError, KeyExists) as exc:
        log.warning("a2a_channel_open_failed", extra={"asker": asker, "target": target, "error": str(exc)})
        return _refused(503, "the coordination store did not take the channel; try again in a moment")
    envelope = {"delegation_depth": depth + 1, "delegation_chain": (*chain, asker), "parent_turn_id": turn_id}
    seats = _seat_fields(company, target)
    wake = new(A2ARequest(**seats, channel_id=channel_id, requester=asker, responder=target, body=brief, turn_id=turn_id,
                          conversation_identity=f"a2a:{channel_id}"),
               trace, source="a2a", id=request_id, **envelope)
    try:
        await node.queue.publish(topics.agent_inbox(target), wake, dedupe_id=str(wake.id))
    except QueueError as exc:
        log.warning("a2a_ask_not_published", extra={"channel_id": channel_id, "error": str(exc)})
        try:
            await book.delete(channel)
        except CoordError:
            pass  # the sweep closes it within the hour
        return _refused(503, "the broker did not take the ask; try again in a moment")
    await _record(node, new(A2AChannelOpened(**_seat_fields(company, asker), channel_id=channel_id, requester=asker,
                                             responder=target, turn_id=turn_id, brief=brief),
                            trace, source="a2a", **envelope))
    log.info("a2a_asked", extra={"channel_id": channel_id, "asker": asker, "target": target, "depth": depth + 1})
    return AskOutcome(ok=True, channel_id=channel_id,
                      text=f"asked {target} (channel {channel_id}); your turn ends here, and {target}'s answer will wake you")


async def answer(node: A2ANode, *, request: Event, response: str, answered_by: str, turn_id: str,
                 authorised: Callable[[], bool], beside: Callable[[Awaitable[Any]], None] | None = None) -> str:
    """Send the answering turn's final response back on the ask's channel: ANSWERED (sent now,
    or already sent by an earlier run of the same ask, whose wake goes again with the same id),
    BOUNCED (no open channel of this seat to answer on), or NOT_AUTHORISED (`authorised()`
    said this node no longer holds the answering seat: the holder answers the redelivery).
    Raises QueueError or CoordError when the broker or the store failed (the caller hands the
    ask back, unrecorded). `beside`: where the answer's two records (its history, published
    once the wake went and the channel closed) are left to finish, so the caller records the
    trigger worked meanwhile; None awaits them here."""
    book = ChannelBook(node.coord)
    channel_id = str(request.get("channel_id") or "")
    channel = await book.get(channel_id)
    if channel is None or channel.responder != answered_by:
        log.warning("a2a_answer_bounced", extra={"channel_id": channel_id, "seat": answered_by,
                                                 "why": "no such channel" if channel is None else "not this seat's ask"})
        return BOUNCED
    if not channel.is_open and channel.closed_by != answered_by:
        log.warning("a2a_answer_bounced", extra={"channel_id": channel_id, "seat": answered_by,
                                                 "why": f"closed by {channel.closed_by or 'the sweep'} ({channel.reason})"})
        return BOUNCED
    if not authorised():
        return NOT_AUTHORISED
    company = node.company
    trace = TraceContext(request.trace_id, new_span_id(), request.span_id) if request.trace_id else _root()
    depth = max(request.delegation_depth - 1, 0)
    envelope = {"delegation_depth": depth, "delegation_chain": tuple(request.delegation_chain[:-1]), "parent_turn_id": turn_id}
    ids = answer_ids(channel_id)
    wake = new(A2AMessage(**_seat_fields(company, channel.requester), channel_id=channel_id, requester=channel.requester,
                          responder=answered_by, body=response, conversation_identity=f"a2a:{channel_id}"),
               trace, source="a2a", id=ids["wake"], **envelope)
    await node.queue.publish(topics.agent_inbox(channel.requester), wake, dedupe_id=str(wake.id))
    if not channel.is_open:  # an earlier run of this ask closed it: its wake went again above
        log.info("a2a_answer_resent", extra={"channel_id": channel_id, "seat": answered_by, "turn_id": turn_id})
        return ANSWERED
    closed = await book.close(channel, closed_by=answered_by, turn_id=turn_id, reason=ANSWERED, message_count=channel.message_count + 1)
    if closed is None:  # the sweep closed it between the read and the write: the answer went anyway
        log.warning("a2a_answer_raced_close", extra={"channel_id": channel_id, "seat": answered_by})
        return ANSWERED
    answerer = _seat_fields(company, answered_by)
    conversation = f"a2a:{channel_id}"
    sent = new(A2AMessageSent(**answerer, channel_id=channel_id, requester=channel.requester, responder=answered_by,
                              turn_id=turn_id, kind="answer", sender=answered_by, recipient=channel.requester, body=response),
               trace, source="a2a", id=ids["sent"], **envelope)
    records = asyncio.gather(_record(node, sent), _record(node, _closed_event(closed, trace, ids["closed"], **answerer,
                                                                              work_key=conversation)))
    if beside is None:
        await records
    else:
        beside(records)
    log.info("a2a_answered", extra={"channel_id": channel_id, "seat": answered_by, "turn_id": turn_id,
                                    "duration_ms": closed.duration_ms})
    return ANSWERED


def answer_ids(channel_id: str) -> dict[str, uuid.UUID]:
    """The ids an answer on `channel_id` carries, the same on every run of the answering turn."""
    return {what: uuid.uuid5(ANSWER_NAMESPACE, f"{channel_id}/{what}") for what in ("wake", "sent", "closed")}


@dataclass
class Swept:
    """What one sweep did: the channels it closed (idle) and the records it deleted."""

    closed: list[str]
    deleted: list[str]


async def sweep(node: A2ANode, *, now: float, idle_seconds: float = IDLE_CLOSE_SECONDS,
                retain_seconds: float = RETAIN_CLOSED_SECONDS) -> Swept:
    """Close the channels idle for `idle_seconds` and delete the records closed `retain_seconds`
    ago, both measured against the store's own stamps at `now` (the duty's clock)."""
    book = ChannelBook(node.coord)
    done = Swept([], [])
    for channel in await book.all():
        if channel.is_open and now - channel.opened_at >= idle_seconds:
            closed = await book.close(channel, closed_by="", turn_id="", reason="idle", message_count=channel.message_count)
            if closed is not None:
                done.closed.append(channel.channel_id)
                log.warning("a2a_channel_swept", extra={"channel_id": channel.channel_id, "requester": channel.requester,
                                                        "responder": channel.responder, "idle_seconds": int(now - channel.opened_at)})
                await _record(node, _closed_event(closed, _root(channel.trace_id), uuid.uuid4()))
        elif not channel.is_open and channel.closed_at is not None and now - channel.closed_at >= retain_seconds:
            if await book.delete(channel):
                done.deleted.append(channel.channel_id)
                log.info("a2a_channel_deleted", extra={"channel_id": channel.channel_id})
    return done


def _closed_event(channel: Channel, trace: TraceContext, event_id: uuid.UUID, **seat: str) -> Event:
    """a2a_channel_closed for a closed record: both participants, the count, the duration from
    the record's own stamps; closed_by and the turn only when a turn closed it."""
    return new(A2AChannelClosed(**seat, channel_id=channel.channel_id, requester=channel.requester,
                                responder=channel.responder, turn_id=channel.turn_id, closed_by=channel.closed_by,
                                reason=channel.reason, message_count=channel.message_count, duration_ms=channel.duration_ms,
                                opened_at=utc(channel.opened_at), closed_at=utc(channel.closed_at)),
               trace, source="a2a", id=event_id)


def _seat_fields(company, handle: str) -> dict[str, str]:
    seat = company.seat_by_handle(handle) if company is not None else None
    return {"agent_id": str(company.agent_id_for(handle)) if company is not None else "", "agent_handle": handle,
            "agent_role": (seat.role if seat is not None else "") or ""}


def _root(trace_id: str = "") -> TraceContext:
    return TraceContext(trace_id or new_trace_id(), new_span_id(), "")


async def _record(node: A2ANode, event: Event) -> None:
    """Publish a record on `crewlet.events.{type}`; a failure is logged, never raised (the
    wakes and the channel record are what the exchange stands on; these are its history)."""
    try:
        await node.queue.publish(topics.event_subject(event.type), event, dedupe_id=str(event.id))
    except Exception as exc:
        log.warning("event_publish_failed", extra={"type": event.type, "error": str(exc)})

