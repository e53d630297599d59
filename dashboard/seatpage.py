"""The Seat page's reads and its two writes (the issue: "state, holder, mailbox depth, recent
turns and events, pause/resume buttons for an admin ... that calls the same function the REST
route calls"; seed 000, "Event Types": seat_paused / seat_resumed).

The seat's live row comes from the projection; what the seats app knows of it (mailbox
depth, holds, its pause record) from the `GET /seats/{handle}` route's own function, and its
history from `events.queries`. Pause and resume go through the functions the
`POST /seats/{handle}/pause|resume` routes call, with the signed-in user as the actor.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest

from dashboard import projection as live
from dashboard import queries
from engine import runtime
from events.queries import events_page

log = logging.getLogger("dashboard.seats")

RECENT_TURNS = 10
RECENT_EVENTS = 25


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str


def _history(handle: str) -> tuple[list[dict], list[dict]]:
    turns = events_page(types=["agent_turn_completed"], agent=handle, limit=RECENT_TURNS)["items"]
    recent = events_page(agent=handle, limit=RECENT_EVENTS)["items"]
    return turns, recent


def _company() -> Any:
    node = runtime.current()
    return getattr(node, "company", None)


async def context(handle: str, request: HttpRequest) -> dict[str, Any] | None:
    """Everything the Seat page is served with; None for a handle the company lacks."""
    projection = live.current()
    row = None
    if projection is not None and handle in projection.seats:
        row = projection.seat_row(handle)
    company = _company()
    seat = company.seat_by_handle(handle) if company is not None else None
    if row is None and seat is None:
        return None
    if row is None:  # no projection here: the roster alone, and no state it could vouch for
        row = {"handle": handle, "kind": seat.kind, "role": seat.role or "", "title": seat.title or "", "state": None}
    detail, detail_error = None, None
    if row.get("kind") == "agent":
        try:
            detail = await queries.answer("seat", {"handle": handle}, queries.socket_request(f"user:{request.user.get_username()}", request.user))
        except queries.QueryFailed as exc:
            detail_error = exc.detail
    turns, recent = await queries.run_read(_history, handle)
    return {"seat": row, "detail": detail, "detail_error": detail_error, "turns": turns, "recent": recent,
            "handle": handle, "mailbox_depth": (detail or {}).get("mailbox_depth"), "holds": (detail or {}).get("holds") or []}


async def pause(request: HttpRequest, handle: str, *, reason: str, stop_running: bool) -> Outcome:
    return await _act(request, handle, "pause", {"reason": reason, "stop_running": stop_running})


async def resume(request: HttpRequest, handle: str) -> Outcome:
    return await _act(request, handle, "resume", {})


async def _act(request: HttpRequest, handle: str, verb: str, body: dict[str, Any]) -> Outcome:
    node = runtime.current()
    if node is None or node.stopping:
        return Outcome(False, f"{verb}: this node is not serving; try again shortly")
    actor = f"user:{request.user.get_username()}"
    try:
        result = await queries.act(f"seat_{verb}", {"handle": handle, **body}, queries.socket_request(actor, request.user))
    except queries.QueryFailed as exc:
        return Outcome(False, f"{verb} {handle}: {exc.detail}")
    log.info("dashboard_seat_action", extra={"seat": handle, "verb": verb, "actor": actor})
    changed = result.get("changed", True) if isinstance(result, dict) else True
    if verb == "pause":
        return Outcome(True, f"{handle} is paused" if changed else f"{handle} was already paused")
    return Outcome(True, f"{handle} is resumed" if changed else f"{handle} was not paused")
