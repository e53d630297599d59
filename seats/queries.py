"""The seats' reads and writes as plain functions of the node (seed 000, "Routing"; seed 002,
"Token Budgets": `crewlet budgets show` reads the durable counters from a running node).

The REST routes (`seats.api`) and the dashboard call these same functions, so the two surfaces
answer alike. Any node answers: who holds a seat comes from its lease, the pause from the
fleet's record, the mailbox depth from the broker; what only the holder knows (its holds, the
running and last turn, the last error) is added when the node answering holds the seat. A
refusal is a `SeatRefused` carrying the status the REST route answers with and a detail that
names what was wrong.
"""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

from engine.config import Company, Seat
from engine.coord.leases import duty_key, seat_key
from engine.queue import topics
from events.envelope import Event
from seats.errors import SeatRefused
from seats.node import SeatsNode
from seats.pauses import Pause, pause_seat, resume_seat
from seats.schedules import FireBook, describe, publish_fire
from seats.tasks import publish_task


def serving(node: SeatsNode | None) -> Company:
    """The company the node serves, or a 503 refusal that says why it cannot answer."""
    if node is None:
        raise SeatRefused(503, "this process runs no node; start one with `manage.py crewlet_node`")
    if node.stopping:
        raise SeatRefused(503, "this node is draining; ask another node")
    if node.company is None:
        raise SeatRefused(503, "no company revision is active on this node yet; import one with PUT /config")
    return node.company


def seat_of(company: Company, handle: str) -> Seat:
    """The seat `handle` names; 404 naming the handle when the company has none."""
    seat = company.seat_by_handle(handle)
    if seat is None:
        raise SeatRefused(404, f"handle: {handle!r} is no seat of the company")
    return seat


def agent_of(company: Company, handle: str) -> Seat:
    """The agent seat `handle` names; 422 for a human seat."""
    seat = seat_of(company, handle)
    if not seat.is_agent:
        raise SeatRefused(422, f"handle: {handle!r} is a human seat; only agent seats can be paused or given tasks")
    return seat


async def _describe(node: SeatsNode, company: Company, seat: Seat, pause: Pause | None) -> dict[str, Any]:
    """One seat as GET /seats shows it."""
    handle = seat.handle
    out: dict[str, Any] = {
        "handle": handle, "kind": seat.kind, "role": seat.role, "title": seat.title,
        "agent_id": str(company.agent_id_for(handle)), "state": None, "holder": None, "holds": [],
        "paused": None, "running": None, "last_turn": None, "last_error": None, "mailbox_depth": None,
        "mailbox": None,
    }
    if not seat.is_agent:
        return out
    out["paused"] = pause.to_dict() if pause is not None else None
    record = await node.leases.holder(seat_key(handle))
    out["holder"] = record.holder if record is not None else None
    out["mailbox"] = await mailbox(node, handle)
    out["mailbox_depth"] = out["mailbox"]["total"] if out["mailbox"] is not None else None
    runtime = node.seat_runtime
    local = runtime.describe(handle) if runtime is not None else None
    if local is not None:
        out.update(local)
        out["holder"] = out["holder"] or node.node_id
    elif pause is not None:
        out["state"] = "paused"
    else:
        out["state"] = "idle" if record is not None else "unplaced"
    return out


DEAD_LETTER_WINDOW_SECONDS = 24 * 3600.0  # the Overview's "dead letters in the last 24 h"


async def mailbox(node: SeatsNode, handle: str) -> dict[str, Any] | None:
    """The seat's inbox as the broker counts it: `pending` (never delivered), `in_flight`
    (delivered, unsettled), `total`, `oldest_age_seconds` and `dead_letters_24h`; None when the
    mailbox does not exist yet (a revision this node has not applied): unknown, not zero."""
    topic, group = topics.agent_inbox(handle), topics.inbox_group(handle)
    try:
        depth = await node.queue.depth(topic, group)
        dead = await node.queue.dead_letters(topic, group, DEAD_LETTER_WINDOW_SECONDS)
    except Exception:
        return None
    age = depth.oldest_age_seconds
    return {"pending": depth.pending, "in_flight": depth.in_flight, "total": depth.total,
            "oldest_age_seconds": round(age, 3) if age is not None else None, "dead_letters_24h": dead}


def actor_seat(company: Company | None, seat: str) -> str:
    """`seat` when it names a seat of the company (a token's or a user's person), else ""."""
    return seat if seat and company is not None and company.seat_by_handle(seat) is not None else ""


async def list_seats(node: SeatsNode | None) -> dict[str, Any]:
    """Every seat of the company, agent and human: `{"node", "items"}`."""
    company = serving(node)
    pauses = await node.pauses.all()
    items = await asyncio.gather(*(_describe(node, company, s, pauses.get(s.handle)) for s in company.org.seats))
    return {"node": node.node_id, "items": list(items)}


async def get_seat(node: SeatsNode | None, handle: str) -> dict[str, Any]:
    """One seat, as `list_seats` shows each."""
    company = serving(node)
    seat = seat_of(company, handle)
    pause = await node.pauses.get(handle) if seat.is_agent else None
    return await _describe(node, company, seat, pause)


async def pause(node: SeatsNode | None, handle: str, *, reason: str, stop_running: bool, actor: str,
                actor_seat_handle: str = "") -> dict[str, Any]:
    """Pause an agent seat (hold its inbox; `stop_running` also ends its running turn). `actor`
    is who asked (a token's id, a user's name); `actor_seat_handle` the seat they are, if any."""
    company = serving(node)
    agent_of(company, handle)
    recorded, changed = await pause_seat(node.pauses, lambda e: _publish_record(node, e), company, handle,
                                         reason=reason, stop_running=stop_running, paused_by=actor,
                                         paused_by_seat=actor_seat(company, actor_seat_handle))
    return {"handle": handle, "changed": changed, "paused": recorded.to_dict()}


async def resume(node: SeatsNode | None, handle: str, *, actor: str, actor_seat_handle: str = "") -> dict[str, Any]:
    """Lift an agent seat's pause; `changed` false when it was not paused."""
    company = serving(node)
    agent_of(company, handle)
    ended = await resume_seat(node.pauses, lambda e: _publish_record(node, e), company, handle, resumed_by=actor,
                              resumed_by_seat=actor_seat(company, actor_seat_handle))
    return {"handle": handle, "changed": ended is not None, "ended": ended.to_dict() if ended else None}


async def assign_task(node: SeatsNode | None, handle: str, text: str, *, actor: str, actor_seat_handle: str = "") -> Event:
    """Publish a task to an agent seat's inbox (and record it); the event the inbox took."""
    company = serving(node)
    return await publish_task(node.queue, company, handle, text, actor, actor_seat(company, actor_seat_handle))


async def budgets(node: SeatsNode | None) -> dict[str, Any]:
    """The token counters of the company and every agent seat."""
    company = serving(node)
    return await node.budgets.snapshot(company)


async def _publish_record(node: SeatsNode, event: Event) -> None:
    await node.queue.publish(topics.event_subject(event.type), event)


async def schedules(node: SeatsNode | None) -> dict[str, Any]:
    """Every schedule of the company: its next fires, its last fire and the duty's holder
    (seats.schedules.describe): `{"node", "timezone", "items"}`."""
    company = serving(node)
    holder = await node.leases.holder(duty_key("scheduler"))
    now = datetime.now(timezone.utc)
    return {"node": node.node_id, "timezone": company.timezone,
            "items": await describe(FireBook(node.coord), company, now, holder)}


async def fire_schedule(node: SeatsNode | None, name: str, *, actor: str) -> dict[str, Any]:
    """Fire one schedule now, through the path the scheduler takes (seats.schedules.publish_fire);
    an operator's fire moves no due time. 404 naming `name` for a schedule the company lacks."""
    company = serving(node)
    schedule = next((s for s in company.schedules if s.name == name), None)
    if schedule is None:
        known = ", ".join(s.name for s in company.schedules) or "none"
        raise SeatRefused(404, f"name: {name!r} is no schedule of the company (its schedules: {known})")
    now = datetime.now(timezone.utc)
    event = await publish_fire(node.queue, company, schedule=name, seat=schedule.seat, task=schedule.task,
                               cron=schedule.cron, due=now, manual=True, fired_by=actor)
    await FireBook(node.coord).record_manual(name, actor, now, str(event.id))
    return {"schedule": name, "seat": schedule.seat, "event_id": str(event.id), "task_id": event.get("task_id")}
