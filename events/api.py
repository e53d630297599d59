"""The event store's read-only REST routes, mounted at /events (seed 002, "Querying events";
seed 000, "Reading the fleet's history").

Every route needs a bearer token with the read (or admin) grant (crewlet_site mounts the
router with it), and answers from `events.fleet.FleetReads` -- the node's own store and every
live peer's, asked at one instant -- which the dashboard's socket reads through too. Every
answer carries `coverage {nodes: [{id, answered, error}], complete}`: an event's fields sit
beside it, a 404 says who was asked. A parameter the store cannot answer is a 422 naming it.
"""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router
from ninja.errors import HttpError
from ninja.responses import Status

from events import queries
from events.fleet import absent_detail
from events.node import history_of

router = Router(tags=["events"])


def _scope(request: HttpRequest) -> dict[str, Any] | None:
    return getattr(request, "scope", None)


async def _answer(call, *args, **kwargs) -> Any:
    try:
        return await call(*args, **kwargs)
    except queries.EventQueryError as exc:
        raise HttpError(422, exc.detail) from None


@router.get("", summary="A page of events, newest first, from every live node")
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


@router.get("/trace/{trace_id}", summary="Every event of one trace, oldest first, from every live node")
async def get_trace(request: HttpRequest, trace_id: str) -> dict[str, Any]:
    return await _answer(history_of(_scope(request)).trace, trace_id)


@router.get("/{event_id}", response={200: dict, 404: dict}, summary="One event, from whichever node holds it")
async def get_event(request: HttpRequest, event_id: str):
    found = await _answer(history_of(_scope(request)).get_event, event_id)
    if found["item"] is None:
        return Status(404, {"detail": absent_detail(event_id, found["coverage"]), "coverage": found["coverage"]})
    return {**found["item"], "coverage": found["coverage"]}

