"""The event store's read-only REST routes, mounted at /events (seed 002, "Querying events";
seed 000, "Reading the fleet's history").

Every route needs a bearer token with the read (or admin) grant (crewlet_site mounts the
router with it), and answers from `events.fleet.FleetReads` -- the node's own store and every
live peer's, asked at one instant -- which the dashboard's socket reads through too. Every
answer carries `coverage {nodes: [{id, answered, error}], complete}`: an event's fields sit
beside it, a 404 says who was asked. A parameter the store cannot answer is a 422 naming it.
Each route declares its answer and its refusals (`events.answers`), which is what
/api/openapi.json documents.
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from ninja.responses import Status
from pydantic import BaseModel, ConfigDict

from events import queries
from events.answers import Detail, refusals
from events.fleet import absent_detail
from events.node import history_of

router = Router(tags=["events"])


class NodeAnswered(Schema):
    """One node asked for its share of the answer: whether it answered, and why not."""

    id: str
    answered: bool
    error: str


class Coverage(Schema):
    """Who was asked: every live node, and `complete` when each answered."""

    nodes: list[NodeAnswered]
    complete: bool


class EventItem(BaseModel):
    """One stored event: its wire form (the envelope and the type's own fields, flat), with the
    row's `category` and `summary`. A type's fields vary by type, so further keys are allowed
    (a plain pydantic model: ninja's Schema reads declared attributes only, dropping the rest)."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: str
    timestamp: str
    source: str
    trace_id: str
    span_id: str
    parent_span_id: str
    category: str
    summary: str


class FoundEvent(EventItem):
    """One event, and who was asked for it."""

    coverage: Coverage


class EventPage(Schema):
    items: list[EventItem]
    next_cursor: str | None
    coverage: Coverage


class TraceItems(Schema):
    trace_id: str
    items: list[EventItem]
    cut: int
    coverage: Coverage


class Absent(Detail):
    """No live node holds the event: who was asked."""

    coverage: Coverage


def _scope(request: HttpRequest) -> dict[str, Any] | None:
    return getattr(request, "scope", None)


async def _answer(call, *args, **kwargs) -> Any:
    try:
        return await call(*args, **kwargs)
    except queries.EventQueryError as exc:
        raise HttpError(422, exc.detail) from None


@router.get("", response={200: EventPage, **refusals(422)}, summary="A page of events, newest first, from every live node")
async def list_events(
    request: HttpRequest,
    category: str | None = None,
    types: list[str] | None = Query(None, alias="type"),
    agent: str | None = None,
    trace_id: str | None = None,
    since: str | None = None,
    until: str | None = None,
    feed_only: bool = False,
    cursor: str | None = None,
    limit: int = queries.DEFAULT_LIMIT,
) -> dict[str, Any]:
    """`{"items": [...], "next_cursor": ..., "coverage": ...}`: pass `next_cursor` back as
    `cursor` for the next page; a walk of the pages lists every row once."""
    return await _answer(
        history_of(_scope(request)).events_page,
        category=category,
        types=types,
        agent=agent,
        trace_id=trace_id,
        since=since,
        until=until,
        feed_only=feed_only,
        cursor=cursor,
        limit=limit,
    )


@router.get("/trace/{trace_id}", response={200: TraceItems, **refusals(422)}, summary="Every event of one trace, oldest first, from every live node")
async def get_trace(request: HttpRequest, trace_id: str) -> dict[str, Any]:
    return await _answer(history_of(_scope(request)).trace, trace_id)


@router.get("/{event_id}", response={200: FoundEvent, **refusals(422), 404: Absent}, summary="One event, from whichever node holds it")
async def get_event(request: HttpRequest, event_id: str):
    found = await _answer(history_of(_scope(request)).get_event, event_id)
    if found["item"] is None:
        return Status(404, {"detail": absent_detail(event_id, found["coverage"]), "coverage": found["coverage"]})
    return {**found["item"], "coverage": found["coverage"]}

