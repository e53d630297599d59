"""Merging the fleet's answers (seed 000, "Reading the fleet's history": "The merges are exact").

Every merge holds a row once by its (timestamp, id) -- a custody batch's row can sit on two
data nodes until the one that lost its claim settles it. A page is merged newest first and
"stops at the newest point any node's page stopped at, so paging with the cursor visits every
row once": below that point some node may hold rows it has not sent yet, above it every node
has sent all it holds. Counts are summed, and a row a node named instead of counting (one of
its unsettled custody batches) is added once, unless a node that keeps it counted it already.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Iterable

from events.envelope import parse_timestamp
from events.queries import MAX_CANDIDATES, TraceMatch, encode_cursor

Position = tuple[datetime, uuid.UUID]


def position(item: dict[str, Any]) -> Position:
    """Where a row sits in the history: (timestamp, id), the order every page walks."""
    return parse_timestamp(item["timestamp"]), uuid.UUID(str(item["id"]))


def _unique(parts: Iterable[list[dict[str, Any]]]) -> dict[Position, dict[str, Any]]:
    rows: dict[Position, dict[str, Any]] = {}
    for items in parts:
        for item in items:
            rows.setdefault(position(item), item)
    return rows


def merge_page(parts: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the fleet, newest first, from each node's page (`items`, `more`), and the
    cursor of the next page (None on the last)."""
    rows = _unique(p["items"] for p in parts)
    stops = [position(p["items"][-1]) for p in parts if p.get("more") and p["items"]]
    ordered = sorted(rows.items(), key=lambda kv: kv[0], reverse=True)
    if stops:
        stop = max(stops)  # the newest point a node stopped at: every row above it is known
        ordered = [kv for kv in ordered if kv[0] >= stop]
    page = ordered[:limit]
    more = len(ordered) > limit or bool(stops)
    cursor = encode_cursor(*page[-1][0]) if more and page else None
    return [item for _, item in page], cursor


def newest(parts: list[list[dict[str, Any]]], limit: int) -> list[dict[str, Any]]:
    """The newest `limit` rows of several newest-first lists, each once."""
    rows = _unique(parts)
    return [rows[k] for k in sorted(rows, reverse=True)[:limit]]


def merge_trace(parts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """A trace's rows from every node, oldest first, each once; and how many rows the nodes
    said they left out to fit their replies."""
    rows = _unique(p["items"] for p in parts)
    return [rows[k] for k in sorted(rows)], sum(int(p.get("cut") or 0) for p in parts)


def first_event(parts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one event any node holds (every copy of one event is the same row)."""
    for part in parts:
        if part.get("item") is not None:
            return part["item"]
    return None


def sum_turns(parts: list[dict[str, Any]]) -> dict[tuple[int, str], list[int]]:
    """Completed turns per (minute, agent) summed over the nodes' kept rows: [turns, tokens]."""
    totals: dict[tuple[int, str], list[int]] = {}
    for part in parts:
        for minute, agent, count, tokens in part["turns"]:
            slot = totals.setdefault((int(minute), str(agent)), [0, 0])
            slot[0] += int(count)
            slot[1] += int(tokens)
    return totals


def named_turns(parts: list[dict[str, Any]]) -> dict[str, tuple[int, str, int]]:
    """The turns nodes named rather than counted (rows of custody batches not yet settled), each
    once by id: id -> (minute, agent, tokens)."""
    named: dict[str, tuple[int, str, int]] = {}
    for part in parts:
        for ident, minute, agent, tokens in part.get("unsettled") or []:
            named.setdefault(str(ident), (int(minute), str(agent), int(tokens)))
    return named


def add_named(totals: dict[tuple[int, str], list[int]], named: dict[str, tuple[int, str, int]],
              kept: set[str]) -> list[tuple[int, str, int, int]]:
    """The fleet's turn counts: the kept rows' sums plus each named row once, unless a node
    that keeps it counted it already. (minute, agent, turns, tokens) rows."""
    for ident, (minute, agent, tokens) in named.items():
        if ident in kept:
            continue
        slot = totals.setdefault((minute, agent), [0, 0])
        slot[0] += 1
        slot[1] += tokens
    return [(m, a, n, t) for (m, a), (n, t) in sorted(totals.items())]


FOUND_BY = ("trace", "event", "task")  # what a node's find answer names its trace by, surest first


def found_trace(parts: list[dict[str, Any]]) -> TraceMatch:
    """The trace box's match over every node's `find` answer: a trace, an event or a task one
    node holds names its trace (a task by the node holding its own task_assigned, when one
    does); otherwise a prefix names the one trace it begins on any node, or lists the traces it
    begins across the fleet (the first MAX_CANDIDATES, in order)."""
    for via in FOUND_BY:
        named = [p for p in parts if p.get("via") == via and p.get("trace_id")]
        if named:
            best = max(named, key=lambda p: bool(p.get("assigned")))
            return TraceMatch(best["trace_id"], via, assigned=bool(best.get("assigned")))
    prefix = any(p.get("via") == "prefix" for p in parts)
    begun = sorted({*(p["trace_id"] for p in parts if p.get("trace_id")),
                    *(c for p in parts for c in p.get("candidates") or ())})
    if len(begun) == 1:
        return TraceMatch(begun[0], "prefix")
    return TraceMatch(None, "prefix" if prefix else "", tuple(begun[:MAX_CANDIDATES]))
