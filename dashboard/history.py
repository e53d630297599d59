"""What the projection reads back when it starts (seed 002, "What gets stored": the activity feed
is "a ring of the whole company's last few hundred events"; seed 000, "Event Types": a seat's
state is folded from its recent state events).

`read_history` is one blocking read of this node's store, up to an instant: the feed, each
agent seat's recent state events (its last pause first, so a pause older than the turns
replayed still shows), and the completed turns per minute of the last day. The projection runs
it on the dashboard's read threads, up to the instant its live subscription began, so nothing
is counted twice.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

from dashboard.seatstate import PAUSE_TYPES, STORED_MOVES
from dashboard.totals import WINDOW_MINUTES
from events.envelope import Event, format_timestamp
from events.queries import events_page, turns_by_minute

SEAT_REPLAY = 50  # a seat's newest state events replayed through the reducer


@dataclass(frozen=True)
class History:
    feed: list[dict[str, Any]]               # newest first, as events_page lists them
    seats: dict[str, list[Event]]            # handle -> its state events, oldest first
    turns: list[tuple[int, str, int, int]]   # (minute, agent id, turns, tokens)


def read_history(agent_handles: Iterable[str], until: datetime, feed_size: int) -> History:
    """The store as of `until` (exclusive); see the module docstring."""
    cut = format_timestamp(until)
    feed = events_page(feed_only=True, until=cut, limit=min(feed_size, 500))["items"]
    seats: dict[str, list[Event]] = {}
    for handle in agent_handles:
        recent = events_page(types=list(STORED_MOVES), agent=handle, until=cut, limit=SEAT_REPLAY)["items"]
        pause = events_page(types=list(PAUSE_TYPES), agent=handle, until=cut, limit=1)["items"]
        items = {i["id"]: i for i in [*pause, *recent]}  # oldest first, a pause before its turns
        ordered = sorted(items.values(), key=lambda i: (i["timestamp"], i["id"]))
        seats[handle] = [Event.from_wire(_wire(i)) for i in ordered]
    turns = turns_by_minute(until - timedelta(minutes=WINDOW_MINUTES + 1), until)
    return History(feed, seats, turns)


def _wire(item: dict[str, Any]) -> dict[str, Any]:
    """An events_page item back to its wire form (the row's category and summary are not the event's)."""
    return {k: v for k, v in item.items() if k not in ("category", "summary")}
