"""What the dashboard reads (seed 002, "Querying events": the Event log reads over the same
/ws/stream query channel the REST routes use, "so both surfaces answer from one
implementation").

A socket query names a REST route, and is answered by that route's own function: the
function is found by its path on the app's Router, its arguments are validated against
its own signature (as django-ninja validates a query string), and an `HttpError` it raises
becomes the same status and detail the REST route answers. Nothing here re-states what a
route returns. The socket authenticates itself (dashboard.consumers), so a route's bearer
check is the one step the socket path does not take.

Beside them: the projection's seed reads (a seat's recent state events, turns and tokens per
minute over the last day), all reads of the one node store.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import typing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import pydantic
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest
from ninja.errors import HttpError

from events.store import db_time

log = logging.getLogger("dashboard.queries")

# Reads run on their own threads (one SQLite connection each, kept): a page of the log never
# waits behind the store writer's thread or Django's one sync thread.
QUERY_THREADS = 8
_pool = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="dashboard-read")


async def run_read(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking read on the dashboard's read threads."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool, functools.partial(fn, *args, **kwargs))


class QueryFailed(Exception):
    """A query the route refused: `status` and `detail` as the REST route answers them."""

    def __init__(self, status: int, detail: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{status}: {detail}")


# -- routes as queries -----------------------------------------------------------------------
# query name -> (the app module holding the Router, the route's method and path on it). The
# socket answers READS only; ACTIONS are the writes a dashboard form makes (a staff user's).
READS: dict[str, tuple[str, str, str]] = {
    "events_page": ("events.api", "GET", ""),
    "event": ("events.api", "GET", "/{event_id}"),
    "trace": ("events.api", "GET", "/trace/{trace_id}"),
    "seat": ("seats.api", "GET", "/seats/{handle}"),
    "seats": ("seats.api", "GET", "/seats"),
    "budgets": ("seats.api", "GET", "/budgets"),
}
ACTIONS: dict[str, tuple[str, str, str]] = {
    "seat_pause": ("seats.api", "POST", "/seats/{handle}/pause"),
    "seat_resume": ("seats.api", "POST", "/seats/{handle}/resume"),
}


@dataclass(frozen=True)
class RouteQuery:
    """One REST route's function and the model its arguments are validated with."""

    name: str
    func: Callable[..., Any]
    args_model: type[pydantic.BaseModel]
    body: str | None = None  # the parameter a POST route's JSON body fills, if any

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    def bind(self, args: Any) -> dict[str, Any]:
        """The keyword arguments for the route's function; QueryFailed(422) naming a bad one."""
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise QueryFailed(422, "args: expected an object of the route's parameters")
        if self.body and self.body not in args:
            # A form gives the body's fields beside the path's, as a REST caller's URL and body do.
            path_params = set(self.args_model.model_fields) - {self.body}
            args = {**{k: v for k, v in args.items() if k in path_params},
                    self.body: {k: v for k, v in args.items() if k not in path_params}}
        try:
            parsed = self.args_model.model_validate(args)
        except pydantic.ValidationError as exc:
            problems = [f"{'.'.join(str(p) for p in e.get('loc', ())) or 'args'}: {e.get('msg', 'invalid')}" for e in exc.errors()]
            raise QueryFailed(422, "; ".join(problems)) from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}


def _body_param(func: Callable[..., Any]) -> str | None:
    """The one parameter typed as a schema (ninja reads it from the JSON body), if any."""
    hints = typing.get_type_hints(func)
    found = [n for n, t in hints.items() if isinstance(t, type) and issubclass(t, pydantic.BaseModel)]
    return found[0] if len(found) == 1 else None


def _args_model(name: str, func: Callable[..., Any]) -> type[pydantic.BaseModel]:
    """A pydantic model of the function's parameters after `request`: a ninja `Query(...)`
    default is a pydantic FieldInfo, so an alias (`type` for `types`) holds here too."""
    hints = typing.get_type_hints(func)
    fields: dict[str, Any] = {}
    for param in list(inspect.signature(func).parameters.values())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    config = pydantic.ConfigDict(extra="forbid", populate_by_name=True)
    return pydantic.create_model(f"{name}_args", __config__=config, **fields)


def _route_function(module_name: str, method: str, path: str) -> Callable[..., Any] | None:
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:
        return None
    router = getattr(module, "router", None)
    path_view = getattr(router, "path_operations", {}).get(path)
    for operation in getattr(path_view, "operations", ()):
        if method in operation.methods:
            return operation.view_func
    return None


@functools.lru_cache(maxsize=None)
def route_query(name: str) -> RouteQuery | None:
    """The read or action `name` as its REST route answers it; None when this build serves no
    such route."""
    where = READS.get(name) or ACTIONS.get(name)
    func = _route_function(*where) if where else None
    if func is None:
        return None
    return RouteQuery(name, func, _args_model(name, func), _body_param(func))


def socket_request(actor: str, user: Any = None) -> HttpRequest:
    """The request a route function is handed for a socket query: `auth` names the actor
    (a token id, or `user:<name>` for a signed-in person), as a bearer check would."""
    request = HttpRequest()
    request.method = "GET"
    request.auth = actor
    if user is not None:
        request.user = user
    return request


def _call_sync(query: RouteQuery, request: HttpRequest, kwargs: dict[str, Any]) -> Any:
    try:
        return query.func(request, **kwargs)
    finally:
        # A read thread keeps its connection; a broken one is dropped, not reused.
        connections[DEFAULT_DB_ALIAS].close_if_unusable_or_obsolete()


async def answer(name: str, args: Any, request: HttpRequest) -> Any:
    """What the REST read behind query `name` answers for `args`; QueryFailed as it refuses."""
    if name not in READS or route_query(name) is None:
        known = ", ".join(n for n in READS if route_query(n) is not None)
        raise QueryFailed(404, f"query: {name!r} is not a query this node answers (it answers {known})")
    return await _run(route_query(name), args, request)


async def act(name: str, args: Any, request: HttpRequest) -> Any:
    """Make the write behind action `name` as its REST route does; QueryFailed as it refuses."""
    if name not in ACTIONS or route_query(name) is None:
        raise QueryFailed(501, f"{name}: this build serves no {' '.join(ACTIONS.get(name, ('', '?', '?'))[1:])} route")
    return await _run(route_query(name), args, request)


async def _run(query: RouteQuery, args: Any, request: HttpRequest) -> Any:
    name = query.name
    kwargs = query.bind(args)
    try:
        if query.is_async:
            return await query.func(request, **kwargs)
        return await run_read(_call_sync, query, request, kwargs)
    except HttpError as exc:
        raise QueryFailed(exc.status_code, str(exc)) from None
    except QueryFailed:
        raise
    except Exception:
        log.exception("dashboard_query_failed", extra={"query": name})
        raise QueryFailed(500, "internal error; the node logged it") from None


# -- the projection's seed reads ----------------------------------------------------------------
def _rows(sql: str, params: list[Any], using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def turns_by_minute(since: datetime, until: datetime, using: str = DEFAULT_DB_ALIAS) -> list[tuple[int, str, int, int]]:
    """Completed turns per (minute, agent) in [since, until): (minute since the epoch, agent id,
    turns, tokens). A parked segment (`suspended`) is not a completed turn. One seek of the type
    index, folded by SQLite rather than hauling a day of payloads back."""
    sql = (
        "SELECT CAST(strftime('%%s', substr(event_time, 1, 16) || ':00') AS INTEGER) / 60 AS minute, agent_id, "
        "COUNT(*), COALESCE(SUM(COALESCE(json_extract(payload, '$.tokens_in'), 0) + "
        "COALESCE(json_extract(payload, '$.tokens_out'), 0)), 0) "
        "FROM crewlet_events WHERE event_type = %s AND event_time >= %s AND event_time < %s "
        "AND COALESCE(json_extract(payload, '$.suspended'), 0) = 0 "
        "GROUP BY minute, agent_id"
    )
    rows = _rows(sql, ["agent_turn_completed", db_time(since), db_time(until)], using)
    return [(int(m), str(a or ""), int(n), int(t or 0)) for m, a, n, t in rows]


def minute_of(moment: datetime) -> int:
    """Minutes since the epoch (UTC) of `moment`: the bucket a turn is counted in."""
    return int(moment.astimezone(timezone.utc).timestamp() // 60)
