"""What the dashboard reads, and the socket's queries (seed 002, "Querying events": the Event log
reads over the same /ws/stream query channel the REST routes use, "so both surfaces answer
from one implementation").

A socket query names one of READS; each is a plain query function an app exports -- the
function its REST route calls -- so a query answers exactly what the route answers, and a
refusal carries the route's status and detail. The socket authenticates itself
(dashboard.consumers); writes never ride it.

Store reads run on the dashboard's read threads, each keeping one SQLite connection, so a page
of the log never waits behind the store writer's thread or Django's one sync thread.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from django.db import DEFAULT_DB_ALIAS, connections

from dashboard import waterfall
from dashboard.errors import QueryFailed
from dashboard.node import DashboardNode
from events import queries as events
from events.queries import EventQueryError
from seats import queries as seats
from seats.errors import SeatRefused

log = logging.getLogger("dashboard.reads")

# Threads for store reads. Process-wide like Django's own connection handling: they hold
# nothing of a node but a connection to the process's one store.
QUERY_THREADS = 8
_pool = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="dashboard-read")


async def run_read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking store read on the dashboard's read threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool, functools.partial(_closing, fn, *args, **kwargs))


def _closing(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    finally:
        # A read thread keeps its connection; a broken one is dropped, not reused.
        connections[DEFAULT_DB_ALIAS].close_if_unusable_or_obsolete()


# -- the socket's queries ------------------------------------------------------------------------
def _event(event_id: str) -> dict[str, Any]:
    item = events.get_event(event_id)
    if item is None:
        raise QueryFailed(404, f"id: no event {event_id} in this node's store")
    return item


def _trace(trace_id: str) -> dict[str, Any]:
    return {"trace_id": trace_id, "items": events.trace(trace_id)}


# What a parameter's JSON value may be: the kinds a REST query string's value decodes to.
TEXT, WHOLE, FLAG, TEXTS = "text", "a whole number", "true or false", "a list of text"
_KINDS: dict[str, Callable[[Any], bool]] = {
    TEXT: lambda v: isinstance(v, str),
    WHOLE: lambda v: isinstance(v, int) and not isinstance(v, bool),
    FLAG: lambda v: isinstance(v, bool),
    TEXTS: lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(t, str) for t in v)),
}


@dataclass(frozen=True)
class Read:
    """One socket query: the function that answers it and the parameters it takes, each with
    the kind of value it accepts (an alias maps a REST parameter's name onto the function's,
    as `type` does for `types`)."""

    answer: Callable[..., Any]
    params: tuple[tuple[str, str], ...] = ()
    required: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    on_node: bool = False  # an async read of the node (seats), rather than a store read

    def bind(self, args: Any) -> dict[str, Any]:
        """The keyword arguments for `answer`; QueryFailed(422) naming each bad one."""
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise QueryFailed(422, "args: expected an object of the query's parameters")
        kinds, renamed = dict(self.params), dict(self.aliases)
        problems, kwargs = [], {}
        for given, value in args.items():
            name = renamed.get(given, given)
            if name not in kinds:
                problems.append(f"{given}: not a parameter of this query")
            elif value is not None and not _KINDS[kinds[name]](value):
                problems.append(f"{given}: expected {kinds[name]}")
            else:
                kwargs[name] = value
        problems += [f"{k}: required" for k in self.required if kwargs.get(k) is None]
        if problems:
            raise QueryFailed(422, "; ".join(problems))
        return kwargs


READS: dict[str, Read] = {
    "events_page": Read(events.events_page, (
        ("category", TEXT), ("types", TEXTS), ("agent", TEXT), ("trace_id", TEXT), ("since", TEXT),
        ("until", TEXT), ("feed_only", FLAG), ("cursor", TEXT), ("limit", WHOLE)), aliases=(("type", "types"),)),
    "event": Read(_event, (("event_id", TEXT),), ("event_id",)),
    "trace": Read(_trace, (("trace_id", TEXT),), ("trace_id",)),
    "waterfall": Read(waterfall.waterfall, (("trace_id", TEXT),), ("trace_id",)),
    "seat": Read(seats.get_seat, (("handle", TEXT),), ("handle",), on_node=True),
    "seats": Read(seats.list_seats, on_node=True),
    "budgets": Read(seats.budgets, on_node=True),
}


async def answer(name: str, args: Any, node: DashboardNode | None) -> Any:
    """What query `name` answers for `args`; QueryFailed as its REST route refuses."""
    read = READS.get(name)
    if read is None:
        raise QueryFailed(404, f"query: {name!r} is not a query this node answers (it answers {', '.join(READS)})")
    kwargs = read.bind(args)
    try:
        if read.on_node:
            call: Awaitable[Any] = read.answer(node, **kwargs)
            return await call
        return await run_read(read.answer, **kwargs)
    except EventQueryError as exc:
        raise QueryFailed(422, exc.detail) from None
    except SeatRefused as exc:
        raise QueryFailed(exc.status, exc.detail) from None
    except QueryFailed:
        raise
    except Exception:
        log.exception("dashboard_query_failed", extra={"query": name})
        raise QueryFailed(500, "internal error; the node logged it") from None
