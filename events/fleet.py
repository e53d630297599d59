"""Reading the fleet's history (seed 000, "Reading the fleet's history"; the Go original's
internal/eventfan, ADR-0021).

Each node's store holds what that node published (and the custody batches it keeps), so no
one store is the company's history. `FleetReads` answers the turn-level reads -- a page of
events, one event, a trace, the live projection's seed -- the way the seed says every one of
them crosses the fleet:

- The question travels, not the data: the asker reads its own store directly and asks every
  other live node the same question over the broker's ephemeral request/reply (`Transport`;
  the node supplies one over its queue). The roster is the fleet's live presence leases
  (`Roster`).
- Every question is asked at one instant, read once, to the microsecond, and sent with it;
  every node floors the history at that instant (events.questions, events.retention).
- Every answer says who answered: `coverage {nodes: [{id, answered, error}], complete}`;
  complete only when every live node answered inside the 2-second fleet read budget, in this
  protocol version, readably, without its own read failing.
- The merges are exact (events.merge).
- `history_partial`: a read that came back without every node is logged under that name with
  the fraction of this node's recent reads that did, and counted in `stats`.

Without a transport (a process that runs no node: a test, `manage.py runserver`) it reads
this store alone and says so in the same coverage.
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS

from events import merge, queries
from events.questions import PROTOCOL_VERSION, Question, read_part
from events.envelope import format_timestamp
from events.retention import HISTORY_HOURS

log = logging.getLogger("events.fleet")

FLEET_READ_SECONDS = 2.0  # seed 000: "the 2-second fleet read budget"
PARTIAL_WINDOW = 100      # history_partial's fraction is over this node's last 100 fleet reads
PARTIAL_LOG_SECONDS = 10.0  # a partial read is logged at most this often; every one is counted


class AskFailed(Exception):
    """A node that gave no answer: `kind` (timeout, no_responders, unreachable) and why."""

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind
        self.detail = detail
        super().__init__(f"{kind}: {detail}")


class Transport(Protocol):
    """How a question reaches another node (the node's queue, over request/reply)."""

    async def ask(self, node_id: str, question: bytes, timeout: float) -> bytes:
        """The node's encoded answer; AskFailed when none came."""


Roster = Callable[[], Awaitable[list[str]]]  # the live nodes' ids, this one included or not
ReadRunner = Callable[..., Awaitable[Any]]   # runs a blocking store read off the event loop


@dataclass(frozen=True)
class NodeCoverage:
    id: str
    answered: bool
    error: str = ""


@dataclass(frozen=True)
class Coverage:
    """Who answered one question."""

    nodes: tuple[NodeCoverage, ...]

    @property
    def complete(self) -> bool:
        return all(n.answered for n in self.nodes)

    @property
    def missing(self) -> list[NodeCoverage]:
        return [n for n in self.nodes if not n.answered]

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": [{"id": n.id, "answered": n.answered, "error": n.error} for n in self.nodes],
                "complete": self.complete}


@dataclass(frozen=True)
class Answers:
    """Every part that came back for one question, and who answered."""

    question: Question
    parts: list[dict[str, Any]]
    coverage: Coverage


@dataclass
class FleetStats:
    reads: int = 0
    partial: int = 0


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def _on_this_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await sync_to_async(fn, thread_sensitive=True)(*args, **kwargs)


class FleetReads:
    """The fleet's history, asked of every live node; see the module docstring."""

    def __init__(self, *, node_id: str, horizon_hours: float = HISTORY_HOURS, transport: Transport | None = None,
                 roster: Roster | None = None, run_read: ReadRunner | None = None,
                 clock: Callable[[], datetime] = _now, budget_seconds: float = FLEET_READ_SECONDS,
                 using: str = DEFAULT_DB_ALIAS) -> None:
        self.node_id = node_id
        self.horizon_hours = horizon_hours
        self.transport = transport
        self.roster = roster
        self.run_read = run_read or _on_this_thread
        self.clock = clock
        self.budget_seconds = budget_seconds
        self.using = using
        self.stats = FleetStats()
        self._recent: deque[bool] = deque(maxlen=PARTIAL_WINDOW)
        self._last_partial_log = 0.0

    # -- the reads ---------------------------------------------------------------------------
    async def events_page(self, category: str | None = None, types: Any = None, agent: str | None = None,
                          trace_id: str | None = None, since: Any = None, until: Any = None, feed_only: bool = False,
                          cursor: str | None = None, limit: int = queries.DEFAULT_LIMIT) -> dict[str, Any]:
        """`events.queries.events_page` over the fleet: `{items, next_cursor, coverage}`.
        EventQueryError (a 422) for a parameter no store could answer, before anyone is asked."""
        checked = queries.EventFilter.check(category=category, types=types, agent=agent, trace_id=trace_id, since=since,
                                            until=until, feed_only=feed_only, cursor=cursor, limit=limit, resolve_agent=None)
        args = {"category": checked.category, "types": checked.types, "agent": agent or None, "trace_id": trace_id or None,
                "since": _text_time(checked.since), "until": _text_time(checked.until), "feed_only": checked.feed_only,
                "cursor": cursor or None, "limit": checked.limit}
        answers = await self.ask("events_page", {k: v for k, v in args.items() if v not in (None, [], False)})
        items, next_cursor = merge.merge_page(answers.parts, checked.limit)
        return {"items": items, "next_cursor": next_cursor, "coverage": answers.coverage.to_dict()}

    async def get_event(self, event_id: Any) -> dict[str, Any]:
        """One event from whichever node holds it: `{item (None when no node does), coverage}`."""
        ident = queries.parse_event_id(event_id)
        answers = await self.ask("event", {"event_id": ident.hex})
        return {"item": merge.first_event(answers.parts), "coverage": answers.coverage.to_dict()}

    async def trace(self, trace_id: Any) -> dict[str, Any]:
        """Every event of one trace on every node, oldest first: `{trace_id, items, cut, coverage}`;
        `cut` counts rows nodes left out to fit their replies (0 when the trace is whole)."""
        trace_id = queries.check_trace_id(trace_id)
        answers = await self.ask("trace", {"trace_id": trace_id})
        items, cut = merge.merge_trace(answers.parts)
        return {"trace_id": trace_id, "items": items, "cut": cut, "coverage": answers.coverage.to_dict()}

    async def find_trace(self, text: Any) -> dict[str, Any]:
        """The trace the dashboard's trace box names, looked for on every node (a trace, an event
        or a task stored on a peer is found as one stored here): `{match, coverage}`, `match` an
        events.queries.TraceMatch. EventQueryError naming `q`, before anyone is asked, for text
        that can name nothing."""
        answers = await self.ask("find", {"q": queries.check_find_text(text)})
        return {"match": merge.found_trace(answers.parts), "coverage": answers.coverage.to_dict()}

    async def seed(self, *, handles: list[str], move_types: list[str], pause_types: list[str], until: datetime,
                   turns_since: datetime, feed_size: int, seat_replay: int) -> dict[str, Any]:
        """What the live projection starts from, over the fleet: the feed (newest first), each
        seat's recent state events and last pause (newest first), and the completed turns per
        minute with every row counted once. `{feed, seats: {handle: {recent, pause}}, turns, cut, coverage}`."""
        args = {"handles": handles, "move_types": move_types, "pause_types": pause_types, "until": format_timestamp(until),
                "turns_since": format_timestamp(turns_since), "feed_size": feed_size, "seat_replay": seat_replay}
        answers = await self.ask("seed", args)
        parts = answers.parts
        seats = {h: {"recent": merge.newest([p["seats"].get(h, {}).get("recent", []) for p in parts], seat_replay),
                     "pause": merge.newest([p["seats"].get(h, {}).get("pause", []) for p in parts], 1)}
                 for h in handles}
        named = merge.named_turns(parts)
        kept: set[str] = set()
        if named:  # asked only while a custody batch is in flight somewhere
            kept_answers = await self.ask("kept", {"ids": sorted(named)})
            kept = {i for part in kept_answers.parts for i in part["ids"]}
        turns = merge.add_named(merge.sum_turns(parts), named, kept)
        return {"feed": merge.newest([p["feed"] for p in parts], feed_size), "seats": seats, "turns": turns,
                "cut": sum(int(p.get("cut") or 0) for p in parts), "coverage": answers.coverage.to_dict()}

    # -- asking ----------------------------------------------------------------------------------
    async def ask(self, name: str, args: dict[str, Any]) -> Answers:
        """Ask this node's store and every other live node `name` at one instant; every part
        that came back and who answered. An EventQueryError from this node's own read is raised
        (the question is wrong, not the fleet)."""
        question = Question(name=name, at=self.clock(), args=args)
        local = asyncio.ensure_future(self.run_read(read_part, question, horizon_hours=self.horizon_hours, using=self.using))
        deadline = asyncio.get_running_loop().time() + self.budget_seconds  # one budget: the roster's read and the answers
        peers, roster_error = await self._peers()
        raw = question.encode()
        remote = [asyncio.ensure_future(self._ask(peer, raw, deadline)) for peer in peers]
        try:
            mine = await local
            error = ""
        except queries.EventQueryError:
            for task in remote:
                task.cancel()
            raise
        except Exception as exc:
            mine, error = None, f"read_failed: {type(exc).__name__}: {exc}"
        parts = [mine] if mine is not None else []
        covered = [NodeCoverage(self.node_id, mine is not None, error)]
        for peer, task in zip(peers, remote, strict=True):
            part, why = await task
            if part is not None:
                parts.append(part)
            covered.append(NodeCoverage(peer, part is not None, why))
        if roster_error:
            covered.append(NodeCoverage("(roster)", False, roster_error))
        coverage = Coverage(tuple(covered))
        self._count(name, coverage)
        return Answers(question, parts, coverage)

    async def _peers(self) -> tuple[list[str], str]:
        """The other live nodes, and why they could not be listed (empty when they could)."""
        if self.transport is None or self.roster is None:
            return [], ""
        try:
            live = await asyncio.wait_for(self.roster(), self.budget_seconds)
        except Exception as exc:
            return [], f"roster: the live nodes could not be read ({type(exc).__name__}: {exc})"
        return sorted({n for n in live if n and n != self.node_id}), ""

    async def _ask(self, peer: str, raw: bytes, deadline: float) -> tuple[dict[str, Any] | None, str]:
        """One peer's part, or None and why it is missing."""
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return None, f"timeout: no answer inside the {self.budget_seconds:g} s fleet read budget"
        try:
            reply = await self.transport.ask(peer, raw, left)
        except AskFailed as exc:
            return None, str(exc)
        except Exception as exc:
            return None, f"unreachable: {type(exc).__name__}: {exc}"
        try:
            body = json.loads(reply)
        except (ValueError, UnicodeDecodeError):
            return None, "unreadable: the answer is not JSON"
        if not isinstance(body, dict):
            return None, "unreadable: the answer is not an object"
        if body.get("v") != PROTOCOL_VERSION:
            return None, f"version: the node answered in history protocol {body.get('v')!r}, this one speaks {PROTOCOL_VERSION}"
        if body.get("error"):
            return None, str(body["error"])
        part = body.get("part")
        if not isinstance(part, dict):
            return None, "unreadable: the answer carries no part"
        return part, ""

    def _count(self, name: str, coverage: Coverage) -> None:
        self.stats.reads += 1
        partial = not coverage.complete
        self._recent.append(partial)
        if not partial:
            return
        self.stats.partial += 1
        now = asyncio.get_running_loop().time()
        if self._last_partial_log and now - self._last_partial_log < PARTIAL_LOG_SECONDS:
            return
        self._last_partial_log = now
        fraction = sum(self._recent) / len(self._recent)
        log.warning("history_partial", extra={
            "question": name, "missing": ",".join(n.id for n in coverage.missing),
            "errors": "; ".join(f"{n.id}: {n.error}" for n in coverage.missing),
            "fraction": round(fraction, 3), "window": len(self._recent)})


def absent_detail(event_id: str, coverage: dict[str, Any]) -> str:
    """Why an event was not found, naming whether every live node was asked."""
    if coverage["complete"]:
        return f"id: no event {event_id} in the fleet's history (every live node answered)"
    missing = ", ".join(n["id"] for n in coverage["nodes"] if not n["answered"])
    return f"id: no event {event_id} among the nodes that answered (not answered: {missing})"


def _text_time(value: datetime | None) -> str | None:
    return format_timestamp(value) if value is not None else None
