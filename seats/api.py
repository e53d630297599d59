"""The seats over REST: `GET /seats`, `GET /seats/{handle}`, `POST /seats/{handle}/pause` and
`/resume`, `POST /seats/{handle}/tasks`, `GET /budgets`, `GET /schedules` and `POST
/schedules/{name}/fire` (seed 000, "Routing"; seed 002, "Token Budgets"). Each route is one call of `seats.queries`, the functions the dashboard calls too.

crewlet_site mounts the router with the bearer check: reads need the read grant, writes the
admin grant. A `SeatRefused` leaves as its status and `{"detail": ...}` (crewlet_site.api).
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.responses import Status

from seats import queries
from seats.node import node_in

router = Router(tags=["seats"])


class PauseIn(Schema):
    reason: str = ""
    stop_running: bool = False


class TaskIn(Schema):
    text: str


@router.get("/seats", summary="Every seat of the company, agent and human")
async def list_seats(request: HttpRequest) -> dict[str, Any]:
    return await queries.list_seats(node_in(request.scope))


@router.get("/seats/{handle}", summary="One seat")
async def get_seat(request: HttpRequest, handle: str) -> dict[str, Any]:
    return await queries.get_seat(node_in(request.scope), handle)


@router.get("/budgets", summary="The token counters of the company and every agent seat")
async def budgets(request: HttpRequest) -> dict[str, Any]:
    return await queries.budgets(node_in(request.scope))


@router.post("/seats/{handle}/pause", summary="Pause a seat (hold its inbox; optionally stop its turn)")
async def pause(request: HttpRequest, handle: str, body: PauseIn) -> dict[str, Any]:
    return await queries.pause(node_in(request.scope), handle, reason=body.reason, stop_running=body.stop_running,
                               actor=str(request.auth or ""))


@router.post("/seats/{handle}/resume", summary="Lift a seat's pause")
async def resume(request: HttpRequest, handle: str) -> dict[str, Any]:
    return await queries.resume(node_in(request.scope), handle, actor=str(request.auth or ""))


@router.post("/seats/{handle}/tasks", response={202: dict}, summary="Assign a task to an agent seat")
async def assign_task(request: HttpRequest, handle: str, body: TaskIn):
    event = await queries.assign_task(node_in(request.scope), handle, body.text, actor=f"token:{request.auth}")
    return Status(202, {"event_id": str(event.id), "handle": handle})


@router.get("/schedules", summary="Every schedule: its next fires, its last fire, the scheduler duty's holder")
async def schedules(request: HttpRequest) -> dict[str, Any]:
    return await queries.schedules(node_in(request.scope))


@router.post("/schedules/{name}/fire", response={202: dict}, summary="Fire a schedule now, as the scheduler would")
async def fire_schedule(request: HttpRequest, name: str):
    return Status(202, await queries.fire_schedule(node_in(request.scope), name, actor=f"token:{request.auth}"))
