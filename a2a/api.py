"""A2A over REST: `GET /a2a/channels/{id}`, `GET /a2a/channels?seat=&state=`, and the operator's
`POST /a2a/ask` (seed 000, "Ephemeral A2A channels"). Each route is one call of `a2a.queries`,
the functions the dashboard calls too.

crewlet_site mounts the router with the bearer check: reads need the read grant, the ask the
admin grant. An `A2ARefused` leaves as its status and `{"detail": ...}` (crewlet_site.api); a
refused ask answers with the reason the model would have read.
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.responses import Status

from a2a import queries
from a2a.errors import A2ARefused
from a2a.node import node_in
from events.answers import refusals

router = Router(tags=["a2a"])


class AskIn(Schema):
    asker: str
    target: str
    brief: str


class ChannelOut(Schema):
    channel_id: str
    requester: str
    responder: str
    state: str
    message_count: int
    opened_at: str
    closed_at: str | None
    closed_by: str
    turn_id: str
    reason: str
    ask_turn_id: str
    request_id: str
    brief_bytes: int
    depth: int
    trace_id: str
    revision: int
    duration_ms: int


class ChannelList(Schema):
    node: str
    items: list[ChannelOut]


class Asked(Schema):
    channel_id: str
    text: str


@router.get("/a2a/channels", response={200: ChannelList, **refusals(422)}, summary="The A2A channels, of one seat (either side) and in one state if asked")
async def list_channels(request: HttpRequest, seat: str | None = None, state: str | None = None) -> dict[str, Any]:
    return await queries.list_channels(node_in(request.scope), seat=seat, state=state)


@router.get("/a2a/channels/{channel_id}", response={200: ChannelOut, **refusals(404)},
            summary="One A2A channel's record, open or closed (kept 7 days after it closed)")
async def get_channel(request: HttpRequest, channel_id: str) -> dict[str, Any]:
    return await queries.get_channel(node_in(request.scope), channel_id)


@router.post("/a2a/ask", response={202: Asked, **refusals(404, 422)}, summary="Ask a seat as another agent seat would with a2a_ask")
async def ask(request: HttpRequest, body: AskIn):
    outcome = await queries.operator_ask(node_in(request.scope), asker=body.asker, target=body.target, brief=body.brief)
    if not outcome.ok:
        raise A2ARefused(outcome.status, outcome.text)
    return Status(202, {"channel_id": outcome.channel_id, "text": outcome.text})
