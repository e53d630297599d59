"""The Seat page's reads and its three writes (the issue: "state, holder, mailbox depth, recent
turns and events, pause/resume buttons for an admin ... that calls the same function the REST
route calls"; "the seat page has a 'give a task' box (admin grant only, CSRF-protected, the same
route)"; seed 000, "Event Types": seat_paused / seat_resumed, task_assigned).

The seat's live row comes from the projection; what the seats app knows of it (mailbox
depth, holds, its pause record) from `seats.queries.get_seat`, the function `GET
/seats/{handle}` calls, its open A2A channels from `a2a.queries.list_channels` (seed 000,
"Ephemeral A2A channels"), and its history from every live node (`events.fleet`): its turns as
a list with each one's outcome, duration, tokens and trigger. Pause, resume and a task go
through the functions the `POST /seats/{handle}/pause|resume|tasks` routes call, with the
signed-in user as the actor -- recorded by user name, and as the seat whose handle that name
is, if there is one.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from a2a import queries as a2a
from a2a.errors import A2ARefused
from dashboard.node import DashboardNode
from dashboard.reads import history_of
from seats import queries as seats
from seats.errors import SeatRefused

log = logging.getLogger("dashboard.seats")

RECENT_TURNS = 10
RECENT_EVENTS = 25
FLUSH_SECONDS = 2.0  # at most what the fleet's answers are waited for (events.fleet)


@dataclass(frozen=True)
class Done:
    """What a pause, resume or task from the Seat page came to, as the page's message says it;
    a task's `answer` is what POST /seats/{handle}/tasks answers, `status` a refusal's."""

    ok: bool
    message: str
    status: int = 200
    answer: dict[str, Any] | None = None


async def _history(node: DashboardNode | None, handle: str) -> tuple[list[dict], list[dict], list[str]]:
    """The seat's last turns and events from every live node (a seat's turns are stored where
    they ran, or kept by a data node), and the nodes that did not answer. This node's own
    writes are flushed first, so the page a pause or a task redirects to lists its event."""
    writer = node.writer if node is not None else None
    if writer is not None:
        await asyncio.to_thread(writer.flush, FLUSH_SECONDS)
    reads = history_of(node)
    turns, recent = await asyncio.gather(
        reads.events_page(types=["agent_turn_completed"], agent=handle, limit=RECENT_TURNS),
        reads.events_page(agent=handle, limit=RECENT_EVENTS))
    unanswered = sorted({n["id"] for page in (turns, recent) for n in page["coverage"]["nodes"] if not n["answered"]})
    return [turn_row(t) for t in turns["items"]], recent["items"], unanswered


def turn_row(item: dict[str, Any]) -> dict[str, Any]:
    """One completed turn as the Seat page lists it: outcome, duration, tokens, trigger, links."""
    outcome = item.get("outcome") or ("failed" if item.get("failed") else "completed")
    return {"id": item["id"], "timestamp": item.get("timestamp"), "trace_id": item.get("trace_id") or "",
            "outcome": outcome, "failed": outcome in ("failed", "llm_unavailable", "budget_exhausted") or bool(item.get("failed")),
            "duration_ms": item.get("duration_ms") or 0, "tokens_in": item.get("tokens_in") or 0,
            "tokens_out": item.get("tokens_out") or 0, "trigger_type": item.get("trigger_type") or "",
            "trigger_id": item.get("trigger_id") or "", "error": item.get("error") or "",
            "response": (item.get("response") or "")[:300]}


def actor_of(request: HttpRequest) -> tuple[str, str]:
    """(who, which seat): the signed-in user's name, and that name as a seat handle (the seats
    app keeps it only when the company has such a seat)."""
    name = request.user.get_username()
    return name, name


async def context(node: DashboardNode | None, handle: str) -> dict[str, Any] | None:
    """Everything the Seat page is served with; None for a handle the company lacks."""
    projection = node.projection if node is not None else None
    row = None
    if projection is not None and handle in projection.seats:
        row = projection.seat_row(handle)
    company = node.company if node is not None else None
    seat = company.seat_by_handle(handle) if company is not None else None
    if row is None and seat is None:
        return None
    if row is None:  # no projection here: the roster alone, and no state it could vouch for
        row = {"handle": handle, "kind": seat.kind, "role": seat.role or "", "title": seat.title or "", "state": None}
    detail, detail_error = None, None
    if row.get("kind") == "agent":
        try:
            detail = await seats.get_seat(node, handle)
        except SeatRefused as exc:
            detail_error = exc.detail
    turns, recent, unanswered = await _history(node, handle)
    channels, channels_error = await open_channels(node, handle) if row.get("kind") == "agent" else ([], None)
    return {"seat": row, "detail": detail, "detail_error": detail_error, "turns": turns, "recent": recent,
            "unanswered": unanswered, "channels": channels, "channels_error": channels_error,
            "handle": handle, "mailbox_depth": (detail or {}).get("mailbox_depth"), "holds": (detail or {}).get("holds") or []}


async def open_channels(node: DashboardNode | None, handle: str) -> tuple[list[dict], str | None]:
    """The seat's open A2A channels, either side (what `GET /a2a/channels?seat=&state=open` answers)."""
    try:
        return (await a2a.list_channels(node, seat=handle, state="open"))["items"], None
    except A2ARefused as exc:
        return [], exc.detail


async def pause(node: DashboardNode | None, request: HttpRequest, handle: str, *, reason: str,
                stop_running: bool) -> Done:
    actor, seat = actor_of(request)
    try:
        result = await seats.pause(node, handle, reason=reason, stop_running=stop_running, actor=actor,
                                   actor_seat_handle=seat)
    except SeatRefused as exc:
        return Done(False, f"pause {handle}: {exc.detail}")
    log.info("dashboard_seat_action", extra={"seat": handle, "verb": "pause", "actor": actor})
    return Done(True, f"{handle} is paused" if result["changed"] else f"{handle} was already paused")


async def resume(node: DashboardNode | None, request: HttpRequest, handle: str) -> Done:
    actor, seat = actor_of(request)
    try:
        result = await seats.resume(node, handle, actor=actor, actor_seat_handle=seat)
    except SeatRefused as exc:
        return Done(False, f"resume {handle}: {exc.detail}")
    log.info("dashboard_seat_action", extra={"seat": handle, "verb": "resume", "actor": actor})
    return Done(True, f"{handle} is resumed" if result["changed"] else f"{handle} was not paused")


async def give_task(node: DashboardNode | None, request: HttpRequest, handle: str, text: str) -> Done:
    """Assign `text` to the seat, as POST /seats/{handle}/tasks does; the route's answer."""
    actor, seat = actor_of(request)
    try:
        event = await seats.assign_task(node, handle, text, actor=actor, actor_seat_handle=seat)
    except SeatRefused as exc:
        return Done(False, f"task for {handle}: {exc.detail}", status=exc.status)
    log.info("dashboard_seat_action", extra={"seat": handle, "verb": "task", "actor": actor})
    trace = reverse("dashboard:trace", args=[event.trace_id])
    answer = {"event_id": str(event.id), "task_id": str(event.get("task_id") or ""), "trace_id": event.trace_id,
              "handle": handle, "trace_url": request.build_absolute_uri(trace)}
    return Done(True, f"{handle} has the task; its turn will appear in trace {event.trace_id[:8]}", answer=answer)
