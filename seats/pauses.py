"""Pausing a seat (seed 000, "Event Types": seat_paused is "published once" per change; seed 000,
"Busy agents queue; held agents wait on the broker": a held seat receives nothing, and its
mail waits on the broker with its order and counts intact).

The pause is the fleet's, so it lives in the coordination store -- bucket `crewlet_seats`,
key `pause:<handle>` -- whichever node the request reached. Every change is a compare-and-set,
and only the caller whose write landed publishes: a second pause of a paused seat publishes
nothing, an amendment that adds `stop_running` re-announces, a resume publishes once. The node
holding the seat learns of it from the event (or, as a backstop, its next poll) and holds the
inbox under the `paused` hold; `stop_running` ends the running turn at its next round.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Awaitable, Callable

from engine.coord.contract import KeyExists, RevisionMismatch
from engine.queue import topics
from events.envelope import Event, new
from events.tracing import trace_of
from events.types.lifecycle import SeatPaused, SeatResumed
from seats.errors import SeatsError

SEATS_BUCKET = "crewlet_seats"
CAS_ATTEMPTS = 16

Publish = Callable[[Event], Awaitable[None]]


class PauseContention(SeatsError):
    """A pause or resume lost every compare-and-set race it ran."""


@dataclass(frozen=True)
class Pause:
    """A seat's pause as the fleet records it; `paused_at` is seconds since the epoch."""

    handle: str
    reason: str
    stop_running: bool
    paused_by: str
    paused_by_seat: str
    paused_at: float

    def to_dict(self) -> dict:
        out = asdict(self)
        out["paused_at"] = datetime.fromtimestamp(self.paused_at, timezone.utc).isoformat()
        return out


def pause_key(handle: str) -> str:
    return f"pause:{handle}"


class PauseBook:
    """The fleet's pauses, read and changed by compare-and-set."""

    def __init__(self, coord, *, clock: Callable[[], float] = time.time) -> None:
        self.coord = coord
        self.clock = clock
        self._provisioned = False

    async def provision(self) -> None:
        await self.coord.ensure_bucket(SEATS_BUCKET)
        self._provisioned = True

    async def get(self, handle: str) -> Pause | None:
        """The seat's pause, or None when it is not paused."""
        entry = await self._entry(handle)
        return None if entry is None else _decode(handle, entry.value)

    async def all(self) -> dict[str, Pause]:
        """Every paused seat by handle."""
        await self._ready()
        out = {}
        for key in await self.coord.keys(SEATS_BUCKET, prefix="pause:"):
            handle = key.removeprefix("pause:")
            if (pause := await self.get(handle)) is not None:
                out[handle] = pause
        return out

    async def pause(self, handle: str, *, reason: str, stop_running: bool, paused_by: str,
                    paused_by_seat: str = "") -> tuple[Pause, bool]:
        """Pause the seat; (the pause now recorded, whether this call changed it). A paused seat
        stays as it is, unless this call adds `stop_running` to it (an amendment)."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self._entry(handle)
            if entry is None:
                pause = Pause(handle, reason, bool(stop_running), paused_by, paused_by_seat, self.clock())
                try:
                    await self.coord.create(SEATS_BUCKET, pause_key(handle), _encode(pause))
                except KeyExists:
                    continue  # somebody else paused it first: read theirs
                return pause, True
            current = _decode(handle, entry.value)
            if not stop_running or current.stop_running:
                return current, False
            amended = Pause(handle, reason or current.reason, True, paused_by, paused_by_seat, current.paused_at)
            try:
                await self.coord.update(SEATS_BUCKET, pause_key(handle), _encode(amended), entry.revision)
            except RevisionMismatch:
                continue
            return amended, True
        raise PauseContention(f"pause of {handle}: lost {CAS_ATTEMPTS} compare-and-set races")

    async def resume(self, handle: str) -> Pause | None:
        """Lift the seat's pause; the pause this call ended, or None when it was not paused."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self._entry(handle)
            if entry is None:
                return None
            try:
                await self.coord.delete(SEATS_BUCKET, pause_key(handle), expected_revision=entry.revision)
            except RevisionMismatch:
                continue
            return _decode(handle, entry.value)
        raise PauseContention(f"resume of {handle}: lost {CAS_ATTEMPTS} compare-and-set races")

    async def _entry(self, handle: str):
        await self._ready()
        return await self.coord.get(SEATS_BUCKET, pause_key(handle))

    async def _ready(self) -> None:
        if not self._provisioned:
            await self.provision()


async def pause_seat(book: PauseBook, publish: Publish, company, handle: str, *, reason: str, stop_running: bool,
                     paused_by: str, paused_by_seat: str = "") -> tuple[Pause, bool]:
    """Pause and, when this call changed the pause, publish `seat_paused` (once per change)."""
    pause, changed = await book.pause(handle, reason=reason, stop_running=stop_running,
                                      paused_by=paused_by, paused_by_seat=paused_by_seat)
    if changed:
        await publish(new(SeatPaused(
            **_seat_fields(company, handle), paused_by=pause.paused_by, paused_by_seat=pause.paused_by_seat,
            reason=pause.reason, stop_running=pause.stop_running,
            paused_at=datetime.fromtimestamp(pause.paused_at, timezone.utc)), trace_of(), source="operator"))
    return pause, changed


async def resume_seat(book: PauseBook, publish: Publish, company, handle: str, *, resumed_by: str,
                      resumed_by_seat: str = "") -> Pause | None:
    """Resume and, when this call ended a pause, publish `seat_resumed` naming it."""
    ended = await book.resume(handle)
    if ended is not None:
        await publish(new(SeatResumed(
            **_seat_fields(company, handle), resumed_by=resumed_by, resumed_by_seat=resumed_by_seat,
            paused_by=ended.paused_by, paused_at=datetime.fromtimestamp(ended.paused_at, timezone.utc)),
            trace_of(), source="operator"))
    return ended


def _seat_fields(company, handle: str) -> dict:
    seat = company.seat_by_handle(handle) if company is not None else None
    return {"agent_id": str(company.agent_id_for(handle)) if company is not None else "",
            "agent_handle": handle, "agent_role": (seat.role if seat is not None else "") or ""}


def _encode(pause: Pause) -> bytes:
    return json.dumps(asdict(pause), sort_keys=True).encode()


def _decode(handle: str, raw: bytes) -> Pause:
    data = json.loads(raw)
    return Pause(handle=handle, reason=str(data.get("reason") or ""), stop_running=bool(data.get("stop_running")),
                 paused_by=str(data.get("paused_by") or ""), paused_by_seat=str(data.get("paused_by_seat") or ""),
                 paused_at=float(data.get("paused_at") or 0.0))


async def watch_pauses(queue, on_change: Callable[[str], Awaitable[None]]) -> list:
    """Broadcast subscriptions that call `on_change(handle)` whenever any node publishes a
    seat_paused or seat_resumed; the caller re-reads the pause from the store (the event is the
    nudge, the store the truth) and closes the returned subscriptions when it stops."""
    async def nudge(event: Event) -> None:
        handle = event.get("agent_handle")
        if handle:
            await on_change(str(handle))

    return [await queue.subscribe_stream(topics.event_subject(t), nudge) for t in ("seat_paused", "seat_resumed")]
