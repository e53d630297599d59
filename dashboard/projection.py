"""The live projection: what the dashboard shows, kept current from the broadcast stream
(seed 000, "Broadcast Streams": the in-process api/stream "both updates the live-state
projection and fans every event out to every connected WebSocket"; "Event Types": the
placement pair, turns, pauses, holds and parks, provider and budget stops drive it; seed
002, "What gets stored": the activity feed is "a ring of the whole company's last few
hundred events", and the stored-not-fed class never takes a row of it).

One `LiveProjection` runs on each ingress node (engine.node.services). At start it subscribes
to `crewlet.events.>` once, reads back this node's store up to that instant
(`dashboard.history`), the pause records and the seat leases, and then folds every event into
the seats (`dashboard.roster`) and the feed and hands each frame, encoded once, to every
connected socket (`dashboard.fanout`). A socket that falls behind misses frames and is told
how many; it never slows the projection, and the projection never slows the engine (the
subscription itself is a bounded broadcast buffer, counted in `missed`).

It is honest about what it does not know: `history` says whether the seed read worked, and
`missed` how many events the projection itself lost (after which it re-reads what it can).
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from datetime import datetime, timezone
from typing import Any

from dashboard.fanout import Fanout
from dashboard.history import History, read_history
from dashboard.node import DashboardNode
from dashboard.outbox import Outbox, encode
from dashboard.roster import Roster
from dashboard.seatstate import TURN_COMPLETED, SeatView, budget_stops, tokens_of, windows_of_snapshot
from dashboard.totals import WINDOW_MINUTES, Totals
from engine.config import Company
from engine.coord.contract import CoordError
from engine.coord.leases import seat_key
from engine.queue import topics
from engine.queue.contract import StreamSubscription
from events import categories
from events.envelope import Event, format_timestamp
from events.queries import minute_of
from seats import queries as seats
from seats.errors import SeatRefused

log = logging.getLogger("dashboard.projection")

FEED_SIZE = 300              # "the last few hundred" fed events (seed 002)
STREAM_BUFFER = 8192         # the projection's own broadcast buffer: ~16 s at 500 events/s
REFRESH_SECONDS = 15.0       # the seat leases re-read: a node that died says nothing itself


def item_of(event: Event) -> dict[str, Any]:
    """An event as `events.queries` lists it: its wire form plus `category` and `summary`."""
    item = event.to_wire()
    item["category"] = categories.category_of(event.type)
    item["summary"] = event.summary()
    return item


class LiveProjection:
    """The node service behind /ws/stream (engine.node.services: built on ingress nodes)."""

    name = "live_projection"

    def __init__(self, node: DashboardNode, *, feed_size: int = FEED_SIZE, stream_buffer: int = STREAM_BUFFER) -> None:
        self.node = node
        self.roster = Roster()
        self.fanout = Fanout()
        self.feed: collections.deque[dict[str, Any]] = collections.deque(maxlen=feed_size)
        self.totals = Totals()
        self.budgets: dict[str, Any] | None = None   # the newest budget_meters snapshot
        self.history = "not read"                    # "ok" | why the seed read failed
        self.missed = 0                              # events the projection itself lost
        self.started_at: str | None = None
        self._stream_buffer = stream_buffer
        self._sub: StreamSubscription | None = None
        self._since: datetime | None = None          # live counting starts here; the seed ends here
        self._pending: list[Event] | None = None     # events that arrived while seeding
        self._seeded_ids: set[str] = set()           # what the seed read, skipped when replayed
        self._tasks: list[asyncio.Task] = []
        self._resync_task: asyncio.Task | None = None

    @property
    def seats(self) -> dict[str, SeatView]:
        return self.roster.seats

    @property
    def company(self) -> Company | None:
        return self.roster.company

    # -- the service ----------------------------------------------------------------------
    async def on_company(self, company: Company) -> None:
        """The roster follows the active revision: new seats appear, removed ones go."""
        self.roster.follow(company)
        if self.started_at is not None:
            self.fanout.broadcast({"type": "seats", "seats": self.seat_rows()})

    async def start(self) -> None:
        if self.roster.company is None and self.node.company is not None:
            self.roster.follow(self.node.company)
        self._pending = []
        self._since = datetime.now(timezone.utc)
        self._sub = await self.node.queue.subscribe_stream(topics.EVENTS_ALL, self._on_event, buffer=self._stream_buffer)
        await self._seed_then_replay()
        self.started_at = format_timestamp(datetime.now(timezone.utc))
        await self._refresh_holders()
        await self._read_budgets()
        self._tasks.append(asyncio.create_task(self._refresh_loop(), name="projection-refresh"))
        log.info("live_projection_started", extra={"seats": len(self.seats), "feed": len(self.feed), "history": self.history})

    async def stop(self, cut: bool) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._sub.close(), 1.0 if cut else 5.0)
        self.fanout.broadcast({"type": "closing", "reason": "the node is draining"})

    # -- seeding --------------------------------------------------------------------------
    async def seed(self) -> None:
        """The feed, each seat's state and the day's turns from the fleet's history, read up to
        the instant the subscription began (so nothing is counted twice); then the pauses."""
        writer = self.node.writer
        try:
            if writer is not None:  # what this node published before subscribing is written first
                await asyncio.to_thread(writer.flush, 5.0)
            handles = [view.handle for view in self.roster.agents()]
            history = await read_history(self.node.history, handles, self._since, self.feed.maxlen or FEED_SIZE)
        except Exception as exc:
            self.history = f"unavailable: {exc}"
            log.warning("live_projection_seed_failed", extra={"error": str(exc)})
        else:
            self._fold_history(history)
        await self._read_pauses()

    def _fold_history(self, history: History) -> None:
        seen: set[str] = set()
        for item in reversed(history.feed):
            self.feed.appendleft(item)
            seen.add(item["id"])
        for handle, events in history.seats.items():
            view = self.seats.get(handle)
            for event in events:
                if view is not None:
                    view.apply(event)
                seen.add(str(event.id))
        for minute, agent, count, tokens in history.turns:
            self.totals.add(minute, self.roster.handle_for(agent) or agent, count, tokens)
        self._seeded_ids = seen
        # The fleet's history: "ok"; "unavailable" when this node's own store could not be read;
        # else which nodes did not answer (their part is missing).
        missing = [n for n in history.coverage["nodes"] if not n["answered"]]
        mine = [n for n in missing if n["id"] == self.node.node_id]
        self.history = (f"unavailable: {mine[0]['error']}" if mine else
                        f"partial: {', '.join(n['id'] for n in missing)} did not answer" if missing else "ok")

    async def _read_pauses(self) -> None:
        """The pauses as the fleet records them (seats.pauses, in the coordination store): the
        truth the seat_paused / seat_resumed events announce, so a pause older than the
        events replayed still shows."""
        try:
            pauses = await self.node.pauses.all()
        except Exception as exc:
            log.warning("live_projection_pauses_unread", extra={"error": str(exc)})
            return
        for view in self.roster.agents():
            pause = pauses.get(view.handle)
            if pause is None:
                view.paused = None
                continue
            record = pause.to_dict()
            by = record.get("paused_by_seat") or record.get("paused_by") or ""
            view.paused = {"at": record.get("paused_at"), "by": by, "reason": record.get("reason") or "",
                           "stop_running": bool(record.get("stop_running")), "summary": f"paused by {by or 'someone'}",
                           "event_id": None, "type": "seat_paused", "trace_id": ""}

    async def _refresh_holders(self) -> None:
        """Which node holds each seat, as the seat leases say (seed 002: whether a seat still
        runs anywhere is the seat leases' to say). Placement events keep it current between."""
        try:
            records = await self.node.leases.list(seat_key(""))
        except Exception as exc:
            log.warning("live_projection_leases_unread", extra={"error": str(exc)})
            return
        now = time.time()  # lease expiry is wall-clock: a lease record is read by every node
        holders = {r.key.removeprefix(seat_key("")): r.holder for r in records if not r.expired(now)}
        changed = []
        for view in self.roster.agents():
            if view.holder != holders.get(view.handle):
                view.holder = holders.get(view.handle)
                changed.append(view.handle)
        if changed and self.started_at is not None:
            self.fanout.broadcast({"type": "seats", "seats": [self.seat_row(h) for h in changed]})

    async def _read_budgets(self) -> None:
        """The budget windows as GET /budgets reads them (the same function), read once at the
        start: budget_meters is live only, never stored, so until the next report arrives (every
        node publishes one every 15 s while a window is capped, seats.meters) this is what says
        a seat is `stopped` on its budget."""
        try:
            snapshot = await seats.budgets(self.node)
        except SeatRefused as exc:
            log.debug("live_projection_budgets_unread", extra={"error": exc.detail})
            return
        except CoordError as exc:  # a store that did not answer (a cluster still electing): the meters' next report says it
            log.warning("live_projection_budgets_unread", extra={"error": str(exc)})
            return
        changed = self._apply_budgets(windows_of_snapshot(snapshot), format_timestamp(datetime.now(timezone.utc)))
        if changed and self.started_at is not None:
            self.fanout.broadcast({"type": "seats", "seats": [self.seat_row(h) for h in changed]})

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            await self._refresh_holders()

    # -- the live stream ------------------------------------------------------------------
    async def _on_event(self, event: Event) -> None:
        if self._pending is not None:
            self._pending.append(event)
            return
        self.apply(event)
        missed = self._sub.missed if self._sub is not None else 0
        if missed > self.missed:
            lost, self.missed = missed - self.missed, missed
            log.warning("live_projection_missed_events", extra={"missed": lost})
            self.fanout.broadcast({"type": "gap", "missed": lost, "where": "projection"})
            if self._resync_task is None or self._resync_task.done():
                self._resync_task = asyncio.create_task(self._resync(), name="projection-resync")
                self._tasks.append(self._resync_task)

    async def _seed_then_replay(self) -> None:
        """Read the store, then apply what the live stream delivered while it was read (held in
        `_pending`, which this ends); seen-at-seed ids are skipped by `apply`."""
        try:
            await self.seed()
        finally:
            pending, self._pending = self._pending or [], None
        for event in pending:
            self.apply(event, seeded=True)

    async def _resync(self) -> None:
        """After the projection itself lost events: read everything again, and send every screen
        a fresh snapshot in place of what it holds."""
        self._pending = []
        self._since = datetime.now(timezone.utc)
        self.feed.clear()
        self.totals = Totals()
        for view in self.seats.values():
            view.working = view.held = view.parked = view.provider_stop = view.last_turn = view.last_error = None
            view.paused = None
        await self._seed_then_replay()
        await self._refresh_holders()
        self.fanout.broadcast(self.snapshot())

    def apply(self, event: Event, *, seeded: bool = False) -> None:
        """Fold one event in and hand it to every socket. `seeded`: skip what the seed read."""
        if seeded and str(event.id) in self._seeded_ids:
            return
        changed: list[str] = []
        handle = self.roster.handle_of(event)
        view = self.seats.get(handle) if handle else None
        if view is not None and view.apply(event):
            changed.append(view.handle)
        if event.type == "org_started":  # a node (re)started: what it was running is over
            changed.extend(v.handle for v in self.roster.agents() if v.node_started(event.node))
        if event.type == "budget_meters":
            taken = event.get("taken_at")
            changed.extend(self._apply_budgets(list(event.get("windows") or []),
                                               taken.isoformat() if taken else format_timestamp(event.timestamp)))
        totals = None
        if event.type == TURN_COMPLETED and not event.get("suspended") and event.timestamp >= (self._since or event.timestamp):
            self.totals.add(minute_of(event.timestamp), handle or str(event.get("agent_id") or ""), 1, tokens_of(event))
            totals = self.totals_row()
            if handle and handle not in changed:
                changed.append(handle)
        fed = categories.is_fed(event.type)
        item = item_of(event)
        if fed:
            self.feed.appendleft(item)
        frame: dict[str, Any] = {"type": "event", "fed": fed, "event": item}
        if changed:
            frame["seats"] = [self.seat_row(h) for h in dict.fromkeys(changed)]
        if totals is not None:
            frame["totals"] = totals
        self.fanout.broadcast(frame)

    def _apply_budgets(self, windows: list[dict[str, Any]], taken_at: str) -> list[str]:
        """Each agent seat's `stopped`/`budget` from the windows: the handles that changed."""
        self.budgets = {"windows": windows, "taken_at": taken_at}
        company, per_seat = budget_stops(windows)
        changed = []
        for view in self.roster.agents():
            stop = per_seat.get(view.handle) or company
            if stop != view.budget_stop:
                view.budget_stop = stop
                changed.append(view.handle)
        return changed

    # -- what the screens read ------------------------------------------------------------
    def _now_minute(self) -> int:
        return minute_of(datetime.now(timezone.utc))

    def seat_row(self, handle: str) -> dict[str, Any]:
        view = self.seats[handle]
        view.turns_24h, view.tokens_24h = self.totals.seat(handle, self._now_minute())
        return view.row()

    def seat_rows(self) -> list[dict[str, Any]]:
        return [self.seat_row(h) for h in self.seats]

    def totals_row(self) -> dict[str, Any]:
        turns, tokens = self.totals.company(self._now_minute())
        return {"turns_24h": turns, "tokens_24h": tokens, "window_minutes": WINDOW_MINUTES}

    def snapshot(self) -> dict[str, Any]:
        """The first frame a socket gets: everything the screens show, as of now."""
        return {
            "type": "snapshot",
            "node": self.node.node_id,
            "company": self.company.name if self.company is not None else None,
            "revision": self.node.revision,
            "seats": self.seat_rows(),
            "feed": list(self.feed),
            "totals": self.totals_row(),
            "budgets": self.budgets,
            "projection": {"started_at": self.started_at, "history": self.history, "missed": self.missed,
                           "feed_size": self.feed.maxlen},
        }

    def attach(self, outbox: Outbox) -> str:
        """Register a socket and return its snapshot frame, in one step (nothing runs between,
        so the socket sees every event after its snapshot and none twice)."""
        self.fanout.attach(outbox)
        return encode(self.snapshot())

    def detach(self, outbox: Outbox) -> None:
        self.fanout.detach(outbox)
