"""The event store's read-only REST routes, mounted at /events (seed 002, "Querying events").

Every route needs a bearer token with the read (or admin) grant (crewlet_site mounts the
router with it), and answers from `events.queries`, the implementation the dashboard's socket
calls too. A parameter the store cannot answer is a 422 naming it; an absent event is a 404.
Each route declares its answer and its refusals (`events.answers`), which is what
/api/openapi.json documents.
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema
from ninja.errors import HttpError
from pydantic import BaseModel, ConfigDict

from events import queries
from events.answers import refusals

router = Router(tags=["events"])


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


class EventPage(Schema):
    items: list[EventItem]
    next_cursor: str | None


class TraceItems(Schema):
    trace_id: str
    items: list[EventItem]


def _answer(call, *args, **kwargs) -> Any:
    try:
        return call(*args, **kwargs)
    except queries.EventQueryError as exc:
        raise HttpError(422, exc.detail) from None


@router.get("", response={200: EventPage, **refusals(422)}, summary="A page of events, newest first")
def list_events(
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
    """`{"items": [...], "next_cursor": ...}`: pass `next_cursor` back as `cursor` for the next page."""
    return _answer(
        queries.events_page,
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


@router.get("/trace/{trace_id}", response={200: TraceItems, **refusals(422)}, summary="Every event of one trace, oldest first")
def get_trace(request: HttpRequest, trace_id: str) -> dict[str, Any]:
    return {"trace_id": trace_id, "items": _answer(queries.trace, trace_id)}


@router.get("/{event_id}", response={200: EventItem, **refusals(404, 422)}, summary="One event")
def get_event(request: HttpRequest, event_id: str) -> dict[str, Any]:
    item = _answer(queries.get_event, event_id)
    if item is None:
        raise HttpError(404, f"id: no event {event_id} in this node's store")
    return item
