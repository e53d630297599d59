"""Reads of the event store (seed 002, "Querying events"; seed 000, "Reading the fleet's history").

Plain functions, so the REST routes and the dashboard's socket answer from one
implementation. Every item is the event's wire form (the envelope with its typed fields
flat) plus the row's `category` and `summary`.

A page is newest first and its cursor is the position of its last row, (event_time,
event_id), opaque to the caller: the next page starts strictly below it, so a walk of the
pages lists every row once, however many rows share one microsecond.

`floor` is the history's horizon (seed 000, "Every question is asked at one instant": every
node floors the 30-day history at the asker's instant): a row older than it is not read, by
any of these functions, whatever else the caller asks.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connections

from events import categories
from events.custody import UNSETTLED_IDS
from events.envelope import format_timestamp
from events.errors import EventError
from events.store import db_time

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TYPES = 50  # a filter is a handful of types; 50 keeps a crafted URL from building a huge query

# A handle or an id -> the agent ids it names (the caller's company knows; the store does not).
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


@dataclass(frozen=True)
class EventFilter:
    """`events_page`'s filters, checked: each bad value refused by name (EventQueryError)."""

    category: str | None
    types: list[str]
    agents: list[str]
    trace_id: str | None
    since: datetime | None
    until: datetime | None
    feed_only: bool
    after: tuple[datetime, uuid.UUID] | None
    limit: int
    floor: datetime | None = None

    @classmethod
    def check(cls, *, category: Any, types: Any, agent: Any, trace_id: Any, since: Any, until: Any,
              feed_only: Any, cursor: Any, limit: Any, resolve_agent: AgentResolver | None,
              floor: datetime | None = None) -> "EventFilter":
        agents: list[str] = []
        if agent:
            resolver = resolve_agent or _as_given
            agents = list(dict.fromkeys([agent, *(str(a) for a in resolver(agent) if a)]))
        return cls(category=_check_category(category), types=_check_types(types), agents=agents,
                   trace_id=trace_id or None, since=parse_time(since, "since"), until=parse_time(until, "until"),
                   feed_only=bool(feed_only), after=decode_cursor(cursor) if cursor else None,
                   limit=_check_limit(limit), floor=floor)

    def conditions(self, alias: str, one_type: str | None = None) -> tuple[list[str], list[Any]]:
        """The WHERE clauses on the event row. Time and position go on whichever table drives
        the scan (`alias`), so its index carries the range and the order."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.category:
            clauses.append("e.category = %s")
            params.append(self.category)
        if one_type is not None:
            clauses.append("e.event_type = %s")
            params.append(one_type)
        elif self.types:
            clauses.append(f"e.event_type IN ({', '.join(['%s'] * len(self.types))})")
            params.extend(self.types)
        if self.trace_id:
            clauses.append("e.trace_id = %s")
            params.append(self.trace_id)
        if self.feed_only:
            clauses.append("e.feed = 1")
        if self.since is not None:
            clauses.append(f"{alias}.event_time >= %s")
            params.append(db_time(self.since))
        if self.floor is not None:
            clauses.append(f"{alias}.event_time >= %s")
            params.append(db_time(self.floor))
        if self.until is not None:
            clauses.append(f"{alias}.event_time < %s")
            params.append(db_time(self.until))
        if self.after is not None:
            clauses.append(f"({alias}.event_time, {alias}.event_id) < (%s, %s)")
            params.extend([db_time(self.after[0]), self.after[1].hex])
        return clauses, params


def _by_agents(f: EventFilter, fetch: int) -> tuple[str, list[Any]]:
    """One ordered seek of the parties index per name, each stopping at `fetch` rows: the page's
    rows are among the union of each name's first rows."""
    branches, params = [], []
    for name in f.agents:
        clauses, branch_params = f.conditions("p")
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
    return sql, [*params, fetch]


def _by_types(f: EventFilter, fetch: int) -> tuple[str, list[Any]]:
    """Several types: the same shape over the type index, one ordered seek per type."""
    branches, params = [], []
    for one in f.types:
        clauses, branch_params = f.conditions("e", one)
        branches.append(
            f"SELECT * FROM (SELECT {_COLUMNS} FROM crewlet_events e "
            f"WHERE {' AND '.join(clauses)} {_NEWEST_FIRST.format(a='e')} LIMIT %s)"
        )
        params.extend([*branch_params, fetch])
    sql = f"{' UNION ALL '.join(branches)} ORDER BY event_time DESC, event_id DESC LIMIT %s"
    return sql, [*params, fetch]


def _by_time(f: EventFilter, fetch: int) -> tuple[str, list[Any]]:
    """Everything else: one ordered scan of the time index."""
    clauses, params = f.conditions("e")
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return f"SELECT {_COLUMNS} FROM crewlet_events e{where} {_NEWEST_FIRST.format(a='e')} LIMIT %s", [*params, fetch]


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
    floor: datetime | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> dict[str, Any]:
    """One page of events, newest first: `{"items": [...], "next_cursor": str | None}`.

    Filters combine with AND. `types` matches the row label (an inbound delivery's
    `webhook:<event>`); `agent` is a handle or an agent id (`resolve_agent` maps a handle to
    the ids it names), matched against every agent the event involves; `since` is inclusive
    and `until` exclusive; `feed_only` leaves out the stored-not-fed class. `next_cursor` is
    None on the last page. Raises EventQueryError naming the parameter for a bad cursor,
    time, category or limit.
    """
    f = EventFilter.check(category=category, types=types, agent=agent, trace_id=trace_id, since=since, until=until,
                          feed_only=feed_only, cursor=cursor, limit=limit, resolve_agent=resolve_agent, floor=floor)
    fetch = f.limit + 1  # one more than the page says whether another page exists
    shape = _by_agents if f.agents else _by_types if len(f.types) > 1 else _by_time
    rows = _fetch(*shape(f, fetch), using)
    page = rows[:f.limit]
    next_cursor = encode_cursor(*_position(page[-1])) if len(rows) > f.limit else None
    return {"items": [_item(r) for r in page], "next_cursor": next_cursor}


def get_event(event_id: uuid.UUID | str, *, floor: datetime | None = None,
              using: str = DEFAULT_DB_ALIAS) -> dict[str, Any] | None:
    """The stored event with this id (its wire form plus category and summary), or None."""
    ident = parse_event_id(event_id)
    above, params = _floored(floor)
    rows = _fetch(
        f"SELECT {_COLUMNS} FROM crewlet_events e WHERE e.event_id = %s{above} {_NEWEST_FIRST.format(a='e')} LIMIT 1",
        [ident.hex, *params],
        using,
    )
    return _item(rows[0]) if rows else None


def _floored(floor: datetime | None) -> tuple[str, list[Any]]:
    return ("", []) if floor is None else (" AND e.event_time >= %s", [db_time(floor)])


def check_trace_id(trace_id: Any) -> str:
    if not isinstance(trace_id, str) or not trace_id.strip():
        raise EventQueryError("trace_id", "expected a trace id")
    return trace_id.strip()


def trace(trace_id: str, *, floor: datetime | None = None, using: str = DEFAULT_DB_ALIAS) -> list[dict[str, Any]]:
    """Every stored event of one trace, oldest first (the order the dashboard builds its tree in)."""
    trace_id = check_trace_id(trace_id)
    above, params = _floored(floor)
    rows = _fetch(
        f"SELECT {_COLUMNS} FROM crewlet_events e WHERE e.trace_id = %s{above} ORDER BY e.event_time, e.event_id",
        [trace_id, *params],
        using,
    )
    return [_item(r) for r in rows]


MIN_TRACE_PREFIX = 6   # hex characters: shorter than this matches too much of a busy log to be a name
MAX_CANDIDATES = 10    # traces an ambiguous prefix lists before it asks for more characters
MAX_TASK_ROWS = 100    # a task's rows read to find its trace: its assignment and the turns it woke
_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class TraceMatch:
    """What the trace box's text named: `trace_id` when it named one trace, `via` how (`trace`,
    `prefix`, `event` or `task`), and `candidates` when a short prefix matched several."""

    trace_id: str | None
    via: str = ""
    candidates: tuple[str, ...] = ()
    assigned: bool = False  # via `task`: the trace is the one its own task_assigned names


def find_trace(text: Any, *, using: str = DEFAULT_DB_ALIAS) -> TraceMatch:
    """The trace an operator's pasted text names (seed 002, "Dashboard Trace View": "paste the id
    into the search box"): a full trace id, a prefix of one (the 8 characters the tables show),
    an event id (its trace), or a task id (the trace of its task_assigned). Every lookup is a seek
    of an index: a prefix is a range on the trace index (`>= prefix AND < prefix + 'g'`, which
    bounds every hex continuation), never a LIKE scan. EventQueryError naming `q` for text that
    can be none of these."""
    given = check_find_text(text)
    compact = given.replace("-", "")
    if len(compact) == 32 and _trace_exists(compact, using):
        return TraceMatch(compact, "trace")
    if len(compact) == 32:
        row = _fetch("SELECT trace_id FROM crewlet_events WHERE event_id = %s AND trace_id != '' LIMIT 1", [compact], using)
        if row:
            return TraceMatch(row[0][0], "event")
        task = str(uuid.UUID(hex=compact))
        # A seek of the partial task index (its own condition, `NOT (task_id = '')`, spelled as
        # the index spells it, is what lets SQLite use it); a task has a
        # handful of rows. Its own task_assigned names its trace, else its earliest row.
        rows = _fetch("SELECT event_type, event_time, trace_id FROM crewlet_events WHERE task_id IN (%s, %s) "
                      "AND NOT (task_id = '') AND trace_id != '' LIMIT %s", [task, given, MAX_TASK_ROWS], using)
        if not rows:
            return TraceMatch(None)
        first = min(rows, key=lambda r: (r[0] != "task_assigned", str(r[1])))
        return TraceMatch(first[2], "task", assigned=first[0] == "task_assigned")
    candidates = _trace_prefix(compact, using)
    if len(candidates) == 1:
        return TraceMatch(candidates[0], "prefix")
    return TraceMatch(None, "prefix", tuple(candidates))


def check_find_text(text: Any) -> str:
    """The trace box's text, trimmed and lower-cased, when it can name a trace (`find_trace`);
    EventQueryError naming `q` otherwise. Checked before a question travels to the fleet."""
    if not isinstance(text, str) or not text.strip():
        raise EventQueryError("q", "paste a trace id (full or its first characters), an event id or a task id")
    given = text.strip().lower()
    compact = given.replace("-", "")
    if not _HEX.match(compact) or len(compact) > 32:
        raise EventQueryError("q", f"expected a trace id, an event id or a task id (hex, with or without dashes), got {text.strip()[:80]!r}")
    if len(compact) < 32 and ("-" in given or len(compact) < MIN_TRACE_PREFIX):
        raise EventQueryError("q", f"a short trace id needs at least {MIN_TRACE_PREFIX} characters; an event or task id all 36")
    return given


def _trace_exists(trace_id: str, using: str) -> bool:
    return bool(_fetch("SELECT 1 FROM crewlet_events WHERE trace_id = %s LIMIT 1", [trace_id], using))


def _trace_prefix(prefix: str, using: str) -> list[str]:
    """The distinct traces starting with `prefix`, at most MAX_CANDIDATES: one seek per distinct
    trace (each next one strictly after the last), so a trace of a thousand rows costs one step."""
    found: list[str] = []
    low, high = prefix, prefix + "g"  # 'g' sorts after every hex digit: the range is the prefix
    while len(found) < MAX_CANDIDATES:
        row = _fetch("SELECT trace_id FROM crewlet_events WHERE trace_id > %s AND trace_id < %s ORDER BY trace_id LIMIT 1"
                     if found else
                     "SELECT trace_id FROM crewlet_events WHERE trace_id >= %s AND trace_id < %s ORDER BY trace_id LIMIT 1",
                     [low, high], using)
        if not row:
            break
        found.append(row[0][0])
        low = row[0][0]
    return found


def turns_by_minute(since: datetime, until: datetime, *, kept_only: bool = False,
                    using: str = DEFAULT_DB_ALIAS) -> list[tuple[int, str, int, int]]:
    """Completed turns per (minute, agent) in [since, until): (minute since the epoch, agent id,
    turns, tokens). A parked segment (`suspended`) is not a completed turn. One seek of the type
    index, folded by SQLite rather than hauling a day of payloads back. `kept_only` leaves out
    the rows of custody batches not yet settled here (events.custody), which a fleet read
    counts once by name instead."""
    kept = f"AND event_id NOT IN ({UNSETTLED_IDS}) " if kept_only else ""
    sql = (
        "SELECT CAST(strftime('%%s', substr(event_time, 1, 16) || ':00') AS INTEGER) / 60 AS minute, agent_id, "
        "COUNT(*), COALESCE(SUM(COALESCE(json_extract(payload, '$.tokens_in'), 0) + "
        "COALESCE(json_extract(payload, '$.tokens_out'), 0)), 0) "
        "FROM crewlet_events WHERE event_type = %s AND event_time >= %s AND event_time < %s "
        f"AND COALESCE(json_extract(payload, '$.suspended'), 0) = 0 {kept}"
        "GROUP BY minute, agent_id"
    )
    rows = _fetch(sql, ["agent_turn_completed", db_time(since), db_time(until)], using)
    return [(int(m), str(a or ""), int(n), int(t or 0)) for m, a, n, t in rows]


# What ends a turn in the record: its completion, whatever its outcome, or -- for a turn that
# raised in its own frames, which publishes no completion (seats.host) -- its guard breach.
TURN_ENDS: tuple[str, ...] = ("agent_turn_completed", "turn.guard_breach")


def unended_turns(node: str, *, using: str = DEFAULT_DB_ALIAS) -> list[dict[str, Any]]:
    """The `agent_turn_started` events `node` published since its last `org_started` whose turn
    has no end in this store (TURN_ENDS, same trace and turn_id), oldest first, as events_page
    lists items. Since the last boot: a node closes its open turns at every boot
    (seats.interrupted), so nothing older is open. One seek of the type index for the starts,
    one of the trace index for each one's end."""
    booted = _fetch(
        "SELECT event_time FROM crewlet_events WHERE event_type = %s AND node = %s "
        "ORDER BY event_time DESC LIMIT 1", ["org_started", node], using)
    since = booted[0][0] if booted else "0"
    ends = ", ".join(["%s"] * len(TURN_ENDS))
    rows = _fetch(
        f"SELECT {_COLUMNS} FROM crewlet_events e WHERE e.event_type = %s AND e.node = %s AND e.event_time >= %s "
        f"AND NOT EXISTS (SELECT 1 FROM crewlet_events x WHERE x.trace_id = e.trace_id AND x.event_type IN ({ends}) "
        "AND json_extract(x.payload, '$.turn_id') = json_extract(e.payload, '$.turn_id')) "
        "ORDER BY e.event_time, e.event_id",
        ["agent_turn_started", node, since, *TURN_ENDS], using)
    return [_item(r) for r in rows]


def minute_of(moment: datetime) -> int:
    """Minutes since the epoch (UTC) of `moment`: the bucket a turn is counted in."""
    return int(moment.astimezone(timezone.utc).timestamp() // 60)
