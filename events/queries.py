"""Reads of the event store (seed 002, "Querying events"; seed 000, "Reading the fleet's history").

Plain functions, so the REST routes and the dashboard's socket answer from one
implementation. Every item is the event's wire form (the envelope with its typed fields
flat) plus the row's `category` and `summary`.

A page is newest first and its cursor is the position of its last row, (event_time,
event_id), opaque to the caller: the next page starts strictly below it, so a walk of the
pages lists every row once, however many rows share one microsecond.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connections

from events import categories
from events.envelope import format_timestamp
from events.errors import EventError
from events.store import db_time

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TYPES = 50  # a filter is a handful of types; 50 keeps a crafted URL from building a huge query

# A handle or an id -> the agent ids it names. The node installs the org's resolver at boot.
AgentResolver = Callable[[str], Iterable[str]]


class EventQueryError(EventError):
    """A query parameter the store cannot answer. `param` names it; the API answers 422."""

    def __init__(self, param: str, reason: str) -> None:
        self.param = param
        self.reason = reason
        super().__init__(f"{param}: {reason}", field=param)

    @property
    def detail(self) -> str:
        return f"{self.param}: {self.reason}"


def _as_given(agent: str) -> Iterable[str]:
    return (agent,)


_agent_resolver: AgentResolver = _as_given


def install_agent_resolver(resolver: AgentResolver | None) -> None:
    """Make `resolver` the default for `events_page(agent=...)`; None restores "treat it as an id"."""
    global _agent_resolver
    _agent_resolver = resolver or _as_given


# -- parameters -------------------------------------------------------------------------

_OFFSET_WITHOUT_PLUS = re.compile(r" (\d{2}:?\d{2})$")


def parse_time(value: Any, param: str) -> datetime | None:
    """An RFC 3339 time (with an offset) as an aware UTC datetime; None passes through."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise EventQueryError(param, "a time needs a UTC offset")
        return value.astimezone(timezone.utc)
    if not isinstance(value, str):
        raise EventQueryError(param, f"expected an RFC 3339 time, got {type(value).__name__}")
    text = value.strip()
    # An unencoded '+' in a query string arrives as a space.
    text = _OFFSET_WITHOUT_PLUS.sub(r"+\1", text)
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise EventQueryError(param, f"expected an RFC 3339 time such as 2025-01-31T09:30:00Z, got {value!r}") from None
    if "T" not in text.upper() or parsed.tzinfo is None:
        raise EventQueryError(param, f"expected an RFC 3339 time with a date, a time and an offset, got {value!r}")
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in the year 10000 in UTC
        raise EventQueryError(param, f"{value!r} lies outside the years 1 to 9999 in UTC") from None


def parse_event_id(value: Any, param: str = "id") -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise EventQueryError(param, f"expected an event id (a UUID), got {value!r}") from None


def encode_cursor(event_time: datetime, event_id: uuid.UUID) -> str:
    """The opaque position after which the next page starts."""
    raw = f"{format_timestamp(event_time)}|{event_id.hex}".encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    refused = EventQueryError("cursor", "not a cursor this store issued; start again without one")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
        when, _, ident = raw.partition("|")
        event_time = datetime.fromisoformat(when.replace("Z", "+00:00"))
        event_id = uuid.UUID(hex=ident)
    except (ValueError, UnicodeError, binascii.Error):
        raise refused from None
    if event_time.tzinfo is None or len(ident) != 32:
        raise refused
    try:
        return event_time.astimezone(timezone.utc), event_id
    except OverflowError:
        raise refused from None


def _check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise EventQueryError("limit", f"expected a whole number, got {limit!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise EventQueryError("limit", f"must be between 1 and {MAX_LIMIT}, got {limit}")
    return limit


def _check_types(types: Any) -> list[str]:
    if types is None:
        return []
    if isinstance(types, str):
        types = [types]
    wanted = list(dict.fromkeys(t.strip() for t in types if isinstance(t, str) and t.strip()))
    if len(wanted) > MAX_TYPES:
        raise EventQueryError("type", f"at most {MAX_TYPES} types in one query, got {len(wanted)}")
    return wanted


def _check_category(category: Any) -> str | None:
    if category is None or category == "":
        return None
    if category not in categories.CATEGORIES:
        raise EventQueryError("category", f"expected one of {', '.join(sorted(categories.CATEGORIES))}, got {category!r}")
    return category


# -- reading rows -----------------------------------------------------------------------

_COLUMNS = "e.event_time, e.event_id, e.category, e.summary, e.payload"
_NEWEST_FIRST = "ORDER BY {a}.event_time DESC, {a}.event_id DESC"


def _item(row: tuple) -> dict[str, Any]:
    _, _, category, summary, payload = row
    wire = json.loads(payload) if isinstance(payload, str) else dict(payload)
    wire["category"] = category
    wire["summary"] = summary
    return wire


def _position(row: tuple) -> tuple[datetime, uuid.UUID]:
    event_time = datetime.fromisoformat(row[0]) if isinstance(row[0], str) else row[0]
    if event_time.tzinfo is None:
        event_time = event_time.replace(tzinfo=timezone.utc)
    return event_time, uuid.UUID(hex=row[1]) if isinstance(row[1], str) else row[1]


def _fetch(sql: str, params: list[Any], using: str) -> list[tuple]:
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def events_page(
    category: str | None = None,
    types: Iterable[str] | str | None = None,
    agent: str | None = None,
    trace_id: str | None = None,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    feed_only: bool = False,
    cursor: str | None = None,
    limit: int = DEFAULT_LIMIT,
    *,
    resolve_agent: AgentResolver | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> dict[str, Any]:
    """One page of events, newest first: `{"items": [...], "next_cursor": str | None}`.

    Filters combine with AND. `types` matches the row label (an inbound delivery's
    `webhook:<event>`); `agent` is a handle or an agent id, matched against every agent the
    event involves; `since` is inclusive and `until` exclusive; `feed_only` leaves out the
    stored-not-fed class. `next_cursor` is None on the last page. Raises EventQueryError
    naming the parameter for a bad cursor, time, category or limit.
    """
    category = _check_category(category)
    wanted_types = _check_types(types)
    limit = _check_limit(limit)
    since_t = parse_time(since, "since")
    until_t = parse_time(until, "until")
    after = decode_cursor(cursor) if cursor else None
    agents: list[str] = []
    if agent:
        resolver = resolve_agent or _agent_resolver
        agents = list(dict.fromkeys([agent, *(str(a) for a in resolver(agent) if a)]))

    # Filters on the event row itself. Time and position go on whichever table drives the
    # scan (`a`), so its index carries the range and the order.
    def where(a: str, one_type: str | None) -> tuple[list[str], list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if category:
            clauses.append("e.category = %s")
            params.append(category)
        if one_type is not None:
            clauses.append("e.event_type = %s")
            params.append(one_type)
        elif wanted_types:
            clauses.append(f"e.event_type IN ({', '.join(['%s'] * len(wanted_types))})")
            params.extend(wanted_types)
        if trace_id:
            clauses.append("e.trace_id = %s")
            params.append(trace_id)
        if feed_only:
            clauses.append("e.feed = 1")
        if since_t is not None:
            clauses.append(f"{a}.event_time >= %s")
            params.append(db_time(since_t))
        if until_t is not None:
            clauses.append(f"{a}.event_time < %s")
            params.append(db_time(until_t))
        if after is not None:
            clauses.append(f"({a}.event_time, {a}.event_id) < (%s, %s)")
            params.extend([db_time(after[0]), after[1].hex])
        return clauses, params

    fetch = limit + 1  # one more than the page says whether another page exists
    params: list[Any] = []
    if agents:
        # One ordered seek of the parties index per name, each stopping at `fetch` rows:
        # the page's rows are among the union of each name's first rows.
        branches = []
        for name in agents:
            clauses, branch_params = where("p", None)
            clauses.insert(0, "p.agent_id = %s")
            branches.append(
                "SELECT * FROM (SELECT p.event_time, p.event_id FROM crewlet_event_parties p "
                "JOIN crewlet_events e ON e.event_time = p.event_time AND e.event_id = p.event_id "
                f"WHERE {' AND '.join(clauses)} {_NEWEST_FIRST.format(a='p')} LIMIT %s)"
            )
            params.extend([name, *branch_params, fetch])
        sql = (
            f"WITH hits(event_time, event_id) AS ({' UNION '.join(branches)}) "
            f"SELECT {_COLUMNS} FROM hits h JOIN crewlet_events e "
            "ON e.event_time = h.event_time AND e.event_id = h.event_id "
            f"{_NEWEST_FIRST.format(a='e')} LIMIT %s"
        )
        params.append(fetch)
    elif len(wanted_types) > 1:
        # Several types: the same shape over the type index, one ordered seek per type.
        branches = []
        for one in wanted_types:
            clauses, branch_params = where("e", one)
            branches.append(
                f"SELECT * FROM (SELECT {_COLUMNS} FROM crewlet_events e "
                f"WHERE {' AND '.join(clauses)} {_NEWEST_FIRST.format(a='e')} LIMIT %s)"
            )
            params.extend([*branch_params, fetch])
        sql = f"{' UNION ALL '.join(branches)} ORDER BY event_time DESC, event_id DESC LIMIT %s"
        params.append(fetch)
    else:
        clauses, params = where("e", None)
        sql = f"SELECT {_COLUMNS} FROM crewlet_events e"
        if clauses:
            sql += f" WHERE {' AND '.join(clauses)}"
        sql += f" {_NEWEST_FIRST.format(a='e')} LIMIT %s"
        params.append(fetch)

    rows = _fetch(sql, params, using)
    page = rows[:limit]
    next_cursor = encode_cursor(*_position(page[-1])) if len(rows) > limit else None
    return {"items": [_item(r) for r in page], "next_cursor": next_cursor}


def get_event(event_id: uuid.UUID | str, *, using: str = DEFAULT_DB_ALIAS) -> dict[str, Any] | None:
    """The stored event with this id (its wire form plus category and summary), or None."""
    ident = parse_event_id(event_id)
    rows = _fetch(
        f"SELECT {_COLUMNS} FROM crewlet_events e WHERE e.event_id = %s {_NEWEST_FIRST.format(a='e')} LIMIT 1",
        [ident.hex],
        using,
    )
    return _item(rows[0]) if rows else None


def trace(trace_id: str, *, using: str = DEFAULT_DB_ALIAS) -> list[dict[str, Any]]:
    """Every stored event of one trace, oldest first (the order the dashboard builds its tree in)."""
    if not isinstance(trace_id, str) or not trace_id.strip():
        raise EventQueryError("trace_id", "expected a trace id")
    rows = _fetch(
        f"SELECT {_COLUMNS} FROM crewlet_events e WHERE e.trace_id = %s ORDER BY e.event_time, e.event_id",
        [trace_id.strip()],
        using,
    )
    return [_item(r) for r in rows]
