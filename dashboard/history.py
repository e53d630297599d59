"""What the projection reads back when it starts (seed 002, "What gets stored": the activity feed
is "a ring of the whole company's last few hundred events"; seed 000, "Event Types": a seat's
state is folded from its recent state events; "Reading the fleet's history": "The same scatter
seeds the live projection when a node starts ... so a restarted node's screens show the
company rather than the part of it this node published").

`read_history` is one fleet question, up to an instant: the feed, each agent seat's recent
state events (its last pause first, so a pause older than the turns replayed still shows), and
the completed turns per minute of the last day, every row counted once (events.fleet). The
projection asks it up to the instant its live subscription began, so nothing is counted twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from dashboard.seatstate import PAUSE_TYPES, STORED_MOVES
from dashboard.totals import WINDOW_MINUTES
from events.envelope import Event
from events.fleet import FleetReads

SEAT_REPLAY = 50  # a seat's newest state events replayed through the reducer


@dataclass(frozen=True)
class History:
    feed: list[dict[str, Any]]               # newest first, as events_page lists them
    seats: dict[str, list[Event]]            # handle -> its state events, oldest first
    turns: list[tuple[int, str, int, int]]   # (minute, agent id, turns, tokens)
    coverage: dict[str, Any] = field(default_factory=lambda: {"nodes": [], "complete": True})


async def read_history(reads: FleetReads, agent_handles: Iterable[str], until: datetime, feed_size: int) -> History:
    """The fleet's history as of `until` (exclusive); see the module docstring."""
    handles = list(agent_handles)
    answer = await reads.seed(handles=handles, move_types=list(STORED_MOVES), pause_types=list(PAUSE_TYPES), until=until,
                              turns_since=until - timedelta(minutes=WINDOW_MINUTES + 1), feed_size=min(feed_size, 500),
                              seat_replay=SEAT_REPLAY)
    seats: dict[str, list[Event]] = {}
    for handle in handles:
        view = answer["seats"].get(handle, {})
        items = {i["id"]: i for i in [*view.get("pause", []), *view.get("recent", [])]}  # a pause before its turns
        ordered = sorted(items.values(), key=lambda i: (i["timestamp"], i["id"]))
        seats[handle] = [Event.from_wire(_wire(i)) for i in ordered]
    return History(answer["feed"], seats, [tuple(t) for t in answer["turns"]], answer["coverage"])


def _wire(item: dict[str, Any]) -> dict[str, Any]:
    """An events_page item back to its wire form (the row's category and summary are not the event's)."""
    return {k: v for k, v in item.items() if k not in ("category", "summary")}
