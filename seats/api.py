"""The seats over REST: `GET /seats`, `GET /seats/{handle}`, `POST /seats/{handle}/pause` and
`/resume`, `POST /seats/{handle}/tasks`, `GET /budgets` (seed 000, "Routing"; seed 002, "Token
Budgets": `crewlet budgets show` reads the durable counters from a running node).

Any node answers: who holds a seat comes from its lease, the pause from the fleet's record, the
mailbox depth from the broker; what only the holder knows (its holds, the running and last
turn, the last error) is shown when the node answering holds the seat. Reads need the read
grant, writes the admin grant. Every error is JSON `{"detail": ...}` naming what was wrong.
"""
from __future__ import annotations

import asyncio
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.responses import Status
from ninja.errors import HttpError

from crewlet_site.auth import TokenAuth
from engine import runtime
from engine.coord.leases import seat_key
from engine.queue import topics
from seats.budgets import Budgets
from seats.pauses import PauseBook, pause_seat, resume_seat
from seats.runtime import seat_runtime
from seats.tasks import TaskRefused, publish_task

router = Router(tags=["seats"])

READ, ADMIN = TokenAuth("read"), TokenAuth("admin")


class PauseIn(Schema):
    reason: str = ""
    stop_running: bool = False


class TaskIn(Schema):
    text: str


def _serving() -> Any:
    """The running node with a company, else a 503 that says why."""
    node = runtime.current()
    if node is None:
        raise HttpError(503, "this process runs no node; start one with `manage.py crewlet_node`")
    if getattr(node, "stopping", False):
        raise HttpError(503, "this node is draining; ask another node")
    if node.company is None:
        raise HttpError(503, "no company revision is active on this node yet; import one with PUT /config")
    return node


def _seat(node: Any, handle: str) -> Any:
    seat = node.company.seat_by_handle(handle)
    if seat is None:
        raise HttpError(404, f"handle: {handle!r} is no seat of the company")
    return seat


def _agent(node: Any, handle: str) -> Any:
    seat = _seat(node, handle)
    if not seat.is_agent:
        raise HttpError(422, f"handle: {handle!r} is a human seat; only agent seats can be paused or given tasks")
    return seat


def _pauses(node: Any) -> PauseBook:
    service = seat_runtime(node)
    return service.pauses if service is not None else PauseBook(node.coord)


def _budgets(node: Any) -> Budgets:
    service = seat_runtime(node)
    return service.budgets if service is not None else Budgets(node.coord)


async def _publish_record(node: Any, event) -> None:
    await node.queue.publish(topics.event_subject(event.type), event)


async def _describe(node: Any, seat: Any, pauses: dict) -> dict[str, Any]:
    """One seat as GET /seats shows it."""
    company, handle = node.company, seat.handle
    out: dict[str, Any] = {
        "handle": handle, "kind": seat.kind, "role": seat.role, "title": seat.title,
        "agent_id": str(company.agent_id_for(handle)), "state": None, "holder": None, "holds": [],
        "paused": None, "running": None, "last_turn": None, "last_error": None, "mailbox_depth": None,
    }
    if not seat.is_agent:
        return out
    pause = pauses.get(handle)
    out["paused"] = pause.to_dict() if pause is not None else None
    record = await node.leases.holder(seat_key(handle)) if getattr(node, "leases", None) is not None else None
    out["holder"] = record.holder if record is not None else None
    try:
        out["mailbox_depth"] = await node.queue.pending(topics.agent_inbox(handle), topics.inbox_group(handle))
    except Exception:  # no mailbox yet (a revision this node has not applied): unknown, not zero
        out["mailbox_depth"] = None
    service = seat_runtime(node)
    local = service.describe(handle) if service is not None else None
    if local is not None:
        out.update(local)
        out["holder"] = out["holder"] or node.node_id
    elif pause is not None:
        out["state"] = "paused"
    else:
        out["state"] = "idle" if record is not None else "unplaced"
    return out


@router.get("/seats", auth=READ, summary="Every seat of the company, agent and human")
async def list_seats(request: HttpRequest) -> dict[str, Any]:
    node = _serving()
    pauses = await _pauses(node).all()
    seats = await asyncio.gather(*(_describe(node, s, pauses) for s in node.company.org.seats))
    return {"node": node.node_id, "items": list(seats)}


@router.get("/seats/{handle}", auth=READ, summary="One seat")
async def get_seat(request: HttpRequest, handle: str) -> dict[str, Any]:
    node = _serving()
    seat = _seat(node, handle)
    pause = await _pauses(node).get(handle) if seat.is_agent else None
    return await _describe(node, seat, {handle: pause} if pause is not None else {})


@router.post("/seats/{handle}/pause", auth=ADMIN, summary="Pause a seat (hold its inbox; optionally stop its turn)")
async def pause(request: HttpRequest, handle: str, body: PauseIn) -> dict[str, Any]:
    node = _serving()
    _agent(node, handle)
    recorded, changed = await pause_seat(_pauses(node), lambda e: _publish_record(node, e), node.company, handle,
                                         reason=body.reason, stop_running=body.stop_running,
                                         paused_by=str(request.auth or ""))
    return {"handle": handle, "changed": changed, "paused": recorded.to_dict()}


@router.post("/seats/{handle}/resume", auth=ADMIN, summary="Lift a seat's pause")
async def resume(request: HttpRequest, handle: str) -> dict[str, Any]:
    node = _serving()
    _agent(node, handle)
    ended = await resume_seat(_pauses(node), lambda e: _publish_record(node, e), node.company, handle,
                              resumed_by=str(request.auth or ""))
    return {"handle": handle, "changed": ended is not None, "ended": ended.to_dict() if ended else None}


@router.post("/seats/{handle}/tasks", auth=ADMIN, response={202: dict}, summary="Assign a task to an agent seat")
async def assign_task(request: HttpRequest, handle: str, body: TaskIn):
    node = _serving()
    try:
        event = await publish_task(node.queue, node.company, handle, body.text, f"token:{request.auth}")
    except TaskRefused as exc:
        raise HttpError(exc.status, exc.detail) from None
    return Status(202, {"event_id": str(event.id), "handle": handle})


@router.get("/budgets", auth=READ, summary="The token counters of the company and every agent seat")
async def budgets(request: HttpRequest) -> dict[str, Any]:
    node = _serving()
    return await _budgets(node).snapshot(node.company)
