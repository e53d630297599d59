"""The seats over REST: `GET /seats`, `GET /seats/{handle}`, `POST /seats/{handle}/pause` and
`/resume`, `POST /seats/{handle}/tasks`, `GET /budgets`, `GET /schedules` and `POST
/schedules/{name}/fire` (seed 000, "Routing"; seed 002, "Token Budgets"). Each route is one call of `seats.queries`, the functions the dashboard calls too.

crewlet_site mounts the router with the bearer check: reads need the read grant, writes the
admin grant, and `request.auth` is the token's `Caller`, whose seat (else its id) is who an
action is recorded as. A `SeatRefused` leaves as its status and `{"detail": ...}`
(crewlet_site.api). Each route declares its answer and its refusals (`events.answers`).
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from ninja import Router, Schema
from ninja.responses import Status
from pydantic import BaseModel, ConfigDict

from engine.config.tokens import Caller
from events.answers import refusals
from seats import queries
from seats.node import node_in

router = Router(tags=["seats"])


class PauseIn(Schema):
    reason: str = ""
    stop_running: bool = False


class TaskIn(Schema):
    text: str


class Mailbox(Schema):
    """The seat's inbox as the broker counts it."""

    pending: int
    in_flight: int
    total: int
    oldest_age_seconds: float | None
    dead_letters_24h: int


class SeatOut(BaseModel):
    """One seat. An agent seat's state, holder, pause and mailbox; what only its holder knows
    (running turn, last turn and error, holds) when the node answering holds it. Further keys
    are allowed (a plain pydantic model keeps them; ninja's Schema would drop them)."""

    model_config = ConfigDict(extra="allow")

    handle: str
    kind: str
    role: str | None
    title: str | None
    agent_id: str
    state: str | None
    holder: str | None
    holds: list[str]
    paused: dict[str, Any] | None
    running: dict[str, Any] | None
    last_turn: dict[str, Any] | None
    last_error: dict[str, Any] | None
    mailbox_depth: int | None
    mailbox: Mailbox | None


class SeatList(Schema):
    node: str
    items: list[SeatOut]


class Budgets(Schema):
    """Every scope's windows: {period: {label, spend, ceiling, state, resets_at, refused_at}}."""

    company: dict[str, dict[str, Any]]
    seats: dict[str, dict[str, dict[str, Any]]]


class Paused(Schema):
    handle: str
    changed: bool
    paused: dict[str, Any]


class Resumed(Schema):
    handle: str
    changed: bool
    ended: dict[str, Any] | None


class TaskAccepted(Schema):
    """A task on the seat's inbox: the event's id, the task's, the trace its turn will join, and
    where the dashboard shows that trace."""

    event_id: str
    task_id: str
    trace_id: str
    handle: str
    trace_url: str


def _caller(request: HttpRequest) -> Caller:
    auth = request.auth
    return auth if isinstance(auth, Caller) else Caller(str(auth or ""))


def trace_url(request: HttpRequest, trace_id: str) -> str:
    """The dashboard's page of a trace, as this request reached the node."""
    try:
        path = reverse("dashboard:trace", args=[trace_id])
    except NoReverseMatch:  # a site that mounts no dashboard
        path = f"/dashboard/traces/{trace_id}/"
    return request.build_absolute_uri(path)


@router.get("/seats", response={200: SeatList, **refusals()}, summary="Every seat of the company, agent and human")
async def list_seats(request: HttpRequest) -> dict[str, Any]:
    return await queries.list_seats(node_in(request.scope))


@router.get("/seats/{handle}", response={200: SeatOut, **refusals(404)}, summary="One seat")
async def get_seat(request: HttpRequest, handle: str) -> dict[str, Any]:
    return await queries.get_seat(node_in(request.scope), handle)


@router.get("/budgets", response={200: Budgets, **refusals()}, summary="The token counters of the company and every agent seat")
async def budgets(request: HttpRequest) -> dict[str, Any]:
    return await queries.budgets(node_in(request.scope))


@router.post("/seats/{handle}/pause", response={200: Paused, **refusals(400, 404, 422)},
             summary="Pause a seat (hold its inbox; optionally stop its turn)")
async def pause(request: HttpRequest, handle: str, body: PauseIn) -> dict[str, Any]:
    caller = _caller(request)
    return await queries.pause(node_in(request.scope), handle, reason=body.reason, stop_running=body.stop_running,
                               actor=caller.token_id, actor_seat_handle=caller.seat)


@router.post("/seats/{handle}/resume", response={200: Resumed, **refusals(404, 422)}, summary="Lift a seat's pause")
async def resume(request: HttpRequest, handle: str) -> dict[str, Any]:
    caller = _caller(request)
    return await queries.resume(node_in(request.scope), handle, actor=caller.token_id, actor_seat_handle=caller.seat)


@router.post("/seats/{handle}/tasks", response={202: TaskAccepted, **refusals(400, 404, 422)},
             summary="Assign a task to an agent seat")
async def assign_task(request: HttpRequest, handle: str, body: TaskIn):
    caller = _caller(request)
    event = await queries.assign_task(node_in(request.scope), handle, body.text, actor=caller.token_id,
                                      actor_seat_handle=caller.seat)
    return Status(202, {"event_id": str(event.id), "task_id": str(event.get("task_id") or ""), "trace_id": event.trace_id,
                        "handle": handle, "trace_url": trace_url(request, event.trace_id)})


class LastFire(Schema):
    due: str
    state: str
    missed: int
    node: str
    epoch: int


class ManualFire(Schema):
    fired_by: str
    at: str
    event_id: str


class DutyHolder(Schema):
    node: str
    epoch: int


class ScheduleOut(Schema):
    name: str
    seat: str
    cron: str
    task: str
    timezone: str
    next_fires: list[str]
    last_fire: LastFire | None
    counting_since: str | None
    last_manual_fire: ManualFire | None
    holder: DutyHolder | None


class ScheduleList(Schema):
    node: str
    timezone: str
    items: list[ScheduleOut]


class Fired(Schema):
    schedule: str
    seat: str
    event_id: str
    task_id: str


@router.get("/schedules", response={200: ScheduleList, **refusals()},
            summary="Every schedule: its next fires, its last fire, the scheduler duty's holder")
async def schedules(request: HttpRequest) -> dict[str, Any]:
    return await queries.schedules(node_in(request.scope))


@router.post("/schedules/{name}/fire", response={202: Fired, **refusals(404)},
             summary="Fire a schedule now, as the scheduler would")
async def fire_schedule(request: HttpRequest, name: str):
    return Status(202, await queries.fire_schedule(node_in(request.scope), name, actor=str(_caller(request))))
