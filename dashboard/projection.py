"""The live projection: what the dashboard shows, kept current from the broadcast stream
(seed 000, "Broadcast Streams": the in-process api/stream "both updates the live-state
projection and fans every event out to every connected WebSocket"; "Event Types": the
placement pair, turns, pauses, holds and parks, provider and budget stops drive it; seed
002, "What gets stored": the activity feed is "a ring of the whole company's last few
hundred events", and the stored-not-fed class never takes a row of it).

One `LiveProjection` runs on each ingress node (engine.services). At start it subscribes to
`crewlet.events.>` once, seeds itself from this node's event store and the seat leases, and
then folds every event into the seats and the feed and hands each event, encoded once, to
every connected socket's `Outbox`. A socket that falls behind misses events and is told how
many; it never slows the projection, and the projection never slows the engine (the
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
from datetime import datetime, timedelta, timezone
from typing import Any

from dashboard import queries
from dashboard.outbox import Outbox, encode
from dashboard.totals import WINDOW_MINUTES, Totals
from dashboard.seatstate import (PAUSE_TYPES, STORED_MOVES, TURN_COMPLETED, SeatView, budget_stops, tokens_of,
                                 windows_of_snapshot)
from engine.coord.leases import seat_key
from engine.queue import topics
from events import categories
from events.envelope import Event, format_timestamp
from events.queries import events_page

log = logging.getLogger("dashboard.projection")

FEED_SIZE = 300              # "the last few hundred" fed events (seed 002)
STREAM_BUFFER = 8192         # the projection's own broadcast buffer: ~16 s at 500 events/s
SEAT_REPLAY = 50             # a seat's newest state events replayed through the reducer at seed
REFRESH_SECONDS = 15.0       # the seat leases re-read: a node that died says nothing itself

_running: "LiveProjection | None" = None


def current() -> "LiveProjection | None":
    """The projection this process runs (the socket consumer's source), or None."""
    return _running


def item_of(event: Event) -> dict[str, Any]:
    """An event as `events.queries` lists it: its wire form plus `category` and `summary`."""
    item = event.to_wire()
    item["category"] = categories.category_of(event.type)
    item["summary"] = event.summary()
    return item


class LiveProjection:
    """The node service behind /ws/stream (engine.services: built on ingress nodes)."""

    name = "live_projection"

    def __init__(self, node: Any, *, feed_size: int = FEED_SIZE, stream_buffer: int = STREAM_BUFFER) -> None:
        self.node = node
        self.seats: dict[str, SeatView] = {}
        self.feed: collections.deque[dict[str, Any]] = collections.deque(maxlen=feed_size)
        self.totals = Totals()
        self.budgets: dict[str, Any] | None = None   # the newest budget_meters snapshot
        self.history = "not read"                    # "ok" | why the seed read failed
        self.missed = 0                              # events the projection itself lost
        self.started_at: str | None = None
        self.outboxes: set[Outbox] = set()
        self._stream_buffer = stream_buffer
        self.company: Any = None                     # the revision the roster follows
        self._agent_handles: dict[str, str] = {}     # agent id -> handle
        self._sub: Any = None
        self._since: datetime | None = None          # live counting starts here; the seed ends here
        self._pending: list[Event] | None = None     # events that arrived while seeding
        self._seeded_ids: set[str] = set()           # what the seed read, skipped when replayed
        self._tasks: list[asyncio.Task] = []
        self._resync_task: asyncio.Task | None = None

    # -- the service ----------------------------------------------------------------------
    async def on_company(self, company: Any) -> None:
        """The roster follows the active revision: new seats appear, removed ones go."""
        self.company = company
        self._agent_handles = {str(company.agent_id_for(s.handle)): s.handle for s in company.org.seats}
        roster = {}
        for seat in company.org.seats:
            view = self.seats.get(seat.handle) or SeatView(seat.handle)
            view.kind, view.role, view.title = seat.kind, seat.role or "", seat.title or ""
            view.reports_to = seat.reports_to or ""
            roster[seat.handle] = view
        self.seats = roster
        if self.started_at is not None:
            self._broadcast({"type": "seats", "seats": self.seat_rows()})

    async def start(self) -> None:
        global _running
        if self.company is None and getattr(self.node, "company", None) is not None:
            await self.on_company(self.node.company)
        self._pending = []
        self._since = datetime.now(timezone.utc)
        self._sub = await self.node.queue.subscribe_stream(topics.EVENTS_ALL, self._on_event, buffer=self._stream_buffer)
        await self._seed_then_replay()
        self.started_at = format_timestamp(datetime.now(timezone.utc))
        await self._refresh_holders()
        await self._refresh_budgets()
        self._tasks.append(asyncio.create_task(self._refresh_loop(), name="projection-refresh"))
        _running = self
        log.info("live_projection_started", extra={"seats": len(self.seats), "feed": len(self.feed), "history": self.history})

    async def stop(self, cut: bool) -> None:
        global _running
        if _running is self:
            _running = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._sub.close(), 1.0 if cut else 5.0)
        self._broadcast({"type": "closing", "reason": "the node is draining"})

    # -- seeding --------------------------------------------------------------------------
    async def seed(self) -> None:
        """The feed, each seat's state and the day's turns from this node's store, read up to
        the instant the subscription began (so nothing is counted twice)."""
        writer = getattr(self.node, "writer", None)
        try:
            if writer is not None:  # what this node published before subscribing is written first
                await asyncio.to_thread(writer.flush, 5.0)
            feed, seats, turns = await queries.run_read(self._read_history, self._since)
        except Exception as exc:
            self.history = f"unavailable: {exc}"
            log.warning("live_projection_seed_failed", extra={"error": str(exc)})
        else:
            self._fold_history(feed, seats, turns)
        await self._read_pauses()

    def _fold_history(self, feed: list[dict], seats: dict[str, list[Event]], turns: list[tuple]) -> None:
        seen: set[str] = set()
        for item in reversed(feed):
            self.feed.appendleft(item)
            seen.add(item["id"])
        for handle, events in seats.items():
            view = self.seats.get(handle)
            for event in events:
                if view is not None:
                    view.apply(event)
                seen.add(str(event.id))
        for minute, agent, count, tokens in turns:
            self.totals.add(minute, self._handle_for(agent) or agent, count, tokens)
        self._seeded_ids = seen
        self.history = "ok"

    async def _read_pauses(self) -> None:
        """The pauses as the fleet records them (seats.pauses, in the coordination store): the
        truth the seat_paused / seat_resumed events announce, so a pause older than the
        events replayed above still shows."""
        coord = getattr(self.node, "coord", None)
        if coord is None:
            return
        try:
            from seats.pauses import PauseBook

            pauses = await PauseBook(coord).all()
        except Exception as exc:
            log.warning("live_projection_pauses_unread", extra={"error": str(exc)})
            return
        for view in self.seats.values():
            pause = pauses.get(view.handle)
            if not view.is_agent:
                continue
            if pause is None:
                view.paused = None
                continue
            record = pause.to_dict()
            by = record.get("paused_by_seat") or record.get("paused_by") or ""
            view.paused = {"at": record.get("paused_at"), "by": by, "reason": record.get("reason") or "",
                           "stop_running": bool(record.get("stop_running")), "summary": f"paused by {by or 'someone'}",
                           "event_id": None, "type": "seat_paused", "trace_id": ""}

    def _read_history(self, until: datetime) -> tuple[list[dict], dict[str, list[Event]], list[tuple]]:
        cut = format_timestamp(until)
        feed = events_page(feed_only=True, until=cut, limit=min(self.feed.maxlen or FEED_SIZE, 500))["items"]
        seats: dict[str, list[Event]] = {}
        for view in self.seats.values():
            if not view.is_agent:
                continue
            recent = events_page(types=list(STORED_MOVES), agent=view.handle, until=cut, limit=SEAT_REPLAY)["items"]
            pause = events_page(types=list(PAUSE_TYPES), agent=view.handle, until=cut, limit=1)["items"]
            items = {i["id"]: i for i in [*pause, *recent]}  # oldest first, a pause before its turns
            ordered = sorted(items.values(), key=lambda i: (i["timestamp"], i["id"]))
            seats[view.handle] = [Event.from_wire(_wire(i)) for i in ordered]
        turns = queries.turns_by_minute(until - timedelta(minutes=WINDOW_MINUTES + 1), until)
        return feed, seats, turns

    async def _refresh_holders(self) -> None:
        """Which node holds each seat, as the seat leases say (seed 002: whether a seat still
        runs anywhere is the seat leases' to say). Placement events keep it current between."""
        leases = getattr(self.node, "leases", None)
        if leases is None:
            return
        try:
            records = await leases.list(seat_key(""))
        except Exception as exc:
            log.warning("live_projection_leases_unread", extra={"error": str(exc)})
            return
        now = time.time()  # lease expiry is wall-clock: a lease record is read by every node
        holders = {r.key.removeprefix(seat_key("")): r.holder for r in records if not r.expired(now)}
        changed = []
        for view in self.seats.values():
            if view.is_agent and view.holder != holders.get(view.handle):
                view.holder = holders.get(view.handle)
                changed.append(view.handle)
        if changed and self.started_at is not None:
            self._broadcast({"type": "seats", "seats": [self.seat_row(h) for h in changed]})

    async def _refresh_budgets(self) -> None:
        """The budget windows as GET /budgets reads them (its own function), read once at the
        start: budget_meters is live only, never stored, so until the next report arrives (every
        node publishes one every 15 s while a window is capped, seats.meters) this is what says
        a seat is `stopped` on its budget."""
        if queries.route_query("budgets") is None:
            return
        try:
            snapshot = await queries.answer("budgets", {}, queries.socket_request("projection"))
        except queries.QueryFailed as exc:
            log.debug("live_projection_budgets_unread", extra={"error": exc.detail})
            return
        changed = self._apply_budgets(windows_of_snapshot(snapshot), format_timestamp(datetime.now(timezone.utc)))
        if changed and self.started_at is not None:
            self._broadcast({"type": "seats", "seats": [self.seat_row(h) for h in changed]})

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
        missed = getattr(self._sub, "missed", 0)
        if missed > self.missed:
            lost, self.missed = missed - self.missed, missed
            log.warning("live_projection_missed_events", extra={"missed": lost})
            self._broadcast({"type": "gap", "missed": lost, "where": "projection"})
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
        self._broadcast(self.snapshot())

    def apply(self, event: Event, *, seeded: bool = False) -> None:
        """Fold one event in and hand it to every socket. `seeded`: skip what the seed read."""
        if seeded and str(event.id) in self._seeded_ids:
            return
        changed: list[str] = []
        handle = self._handle_of(event)
        view = self.seats.get(handle) if handle else None
        if view is not None and view.apply(event):
            changed.append(view.handle)
        if event.type == "budget_meters":
            taken = event.get("taken_at")
            changed.extend(self._apply_budgets(list(event.get("windows") or []),
                                               taken.isoformat() if taken else format_timestamp(event.timestamp)))
        totals = None
        if event.type == TURN_COMPLETED and not event.get("suspended") and event.timestamp >= (self._since or event.timestamp):
            self.totals.add(queries.minute_of(event.timestamp), handle or str(event.get("agent_id") or ""), 1, tokens_of(event))
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
        self._broadcast(frame)

    def _apply_budgets(self, windows: list[dict[str, Any]], taken_at: str) -> list[str]:
        """Each agent seat's `stopped`/`budget` from the windows: the handles that changed."""
        self.budgets = {"windows": windows, "taken_at": taken_at}
        company, per_seat = budget_stops(windows)
        changed = []
        for view in self.seats.values():
            if not view.is_agent:
                continue
            stop = per_seat.get(view.handle) or company
            if stop != view.budget_stop:
                view.budget_stop = stop
                changed.append(view.handle)
        return changed

    def _handle_of(self, event: Event) -> str | None:
        handle = event.get("agent_handle")
        if handle and handle in self.seats:
            return handle
        return self._handle_for(str(event.get("agent_id") or ""))

    def _handle_for(self, agent_id: str) -> str | None:
        if agent_id in self.seats:
            return agent_id
        return self._agent_handles.get(agent_id)

    # -- what the screens read ------------------------------------------------------------
    def _now_minute(self) -> int:
        return queries.minute_of(datetime.now(timezone.utc))

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
        node = self.node
        state = getattr(node, "state", None)
        return {
            "type": "snapshot",
            "node": getattr(node, "node_id", None),
            "company": getattr(self.company, "name", None),
            "revision": getattr(state, "revision", None),
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
        self.outboxes.add(outbox)
        return encode(self.snapshot())

    def detach(self, outbox: Outbox) -> None:
        self.outboxes.discard(outbox)

    def _broadcast(self, frame: dict[str, Any]) -> None:
        if not self.outboxes:
            return
        text = encode(frame)  # once, whatever the number of sockets
        for outbox in self.outboxes:
            outbox.offer(text)


def _wire(item: dict[str, Any]) -> dict[str, Any]:
    """An events_page item back to its wire form (the row's category and summary are not the event's)."""
    return {k: v for k, v in item.items() if k not in ("category", "summary")}
