"""How a node comes to serve a company revision (seed 002, "Running the Engine + API"; DESIGN.md,
"Configuration"): importing a file as a revision, activating a document on the fleet's pointer,
and applying the active revision without a restart -- every agent seat's mailbox first, then
the services that follow the company.

`RevisionApplier` holds the company this node serves and its generation. It is built once the
queue and the coordination store are open, with what it needs named in its constructor.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Awaitable, Callable, Mapping

from asgiref.sync import sync_to_async

from engine import revisions
from engine.config import Company, ConfigError, parse_company
from engine.config.keyring import Keyring
from engine.coord.contract import CoordStore
from engine.node.errors import EXIT_CONFIG, BootError
from engine.node.probes import NodeState
from engine.queue import topics
from engine.queue.contract import EventQueue
from events.envelope import Event, EventData
from events.types.lifecycle import ConfigRevisionActivated, ConfigRevisionApplied

log = logging.getLogger("engine.node")

# A broker makes one stream's consumers one at a time, under that stream's lock, and with
# `sync: always` each create fsyncs three new files (its config, checksum and state). Requests
# in flight overlap the round trip and the broker's work outside the lock: on a quiet 2-core
# host 1,000 creates on one stream took 2.6-2.9 s one by one, 1.3-2.1 s four at a time and
# no better sixteen or sixty-four at a time; with the disk busy with other fsyncs, sixteen at
# a time measured slower than one by one, while spreading them over two streams doubled the
# rate. So a few in flight per stream, and the streams side by side (benchmarks/fleet.py).
MAILBOX_CREATES_PER_STREAM = 4

Record = Callable[[EventData], Awaitable[Event | None]]
Follow = Callable[[Company], Awaitable[None]]


class RevisionApplier:
    """The company this node serves, and how it keeps up with the fleet's active revision.

    `record(data)` publishes an event about the engine (returning it, or None when it could not);
    `follow(company)` tells the node's services of a revision it applied."""

    def __init__(self, *, node_id: str, queue: EventQueue, coord: CoordStore, keyring: Keyring,
                 env: Mapping[str, str] | None, state: NodeState, record: Record, follow: Follow,
                 imported_by: str) -> None:
        self.node_id = node_id
        self.queue = queue
        self.coord = coord
        self.keyring = keyring
        self.env = env
        self.state = state
        self.record = record
        self.follow = follow
        self.imported_by = imported_by
        self.company: Company | None = None
        self.generation: int | None = None
        self._nudge = asyncio.Event()
        self._nudges = None  # the broadcast subscription that carries the fleet's nudges

    # -- preparing -------------------------------------------------------------------------
    async def import_file(self, path: str) -> None:
        """`--company PATH`: make the file the active revision when it differs from it."""
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise BootError(f"--company {path}: {exc.strerror or exc}", EXIT_CONFIG) from None
        try:
            company = parse_company(text, env=self.env)
        except ConfigError as exc:
            raise BootError(f"--company {path}: {exc}", EXIT_CONFIG) from None
        await self.activate_document(text, company, self.imported_by, source="file")

    async def reactivate_from_store(self) -> None:
        """Without --company: keep serving the active revision. The pointer is durable, so this
        re-announces the store's newest revision only to a coordination store that lost it
        (a stream store wiped, or one from before the pointer was kept on the broker)."""
        pointer = await revisions.read_pointer(self.coord, self.keyring)
        row = await sync_to_async(revisions.latest_activated, thread_sensitive=True)()
        if row is None:
            return
        if pointer is None or (row.digest != pointer.digest and row.activated_at.isoformat() > pointer.imported_at):
            try:
                company = parse_company(row.document, env=self.env)
            except ConfigError as exc:
                log.error("config_revision_invalid", extra={"error": str(exc)})
                return
            await self.activate_document(row.document, company, row.imported_by, source=row.source)

    async def activate_document(self, text: str, company: Company, imported_by: str, source: str = "api") -> revisions.Activation:
        """Make a validated document the fleet's active revision and nudge every node."""
        previous = self.generation
        floor = await sync_to_async(revisions.highest_generation, thread_sensitive=True)(company.digest())  # only grow
        activation = await revisions.activate(self.coord, self.keyring, text, company, imported_by, floor=floor)
        await sync_to_async(revisions.store_revision, thread_sensitive=True)(text, company, imported_by, source, activation.generation)
        if activation.changed:  # the document the pointer already names is no news
            # One event, two subjects: the record, and the nudge every node listens for. The
            # store keeps it once (its row is keyed on the event's time and id).
            event = await self.record(ConfigRevisionActivated(revision=str(activation.generation), digest=activation.digest,
                                                              previous_revision=str(previous or ""), activated_by=imported_by))
            if event is not None:
                await self.queue.publish(topics.CONFIG_REVISION_ACTIVATED, event)
        self._nudge.set()
        return activation

    async def apply_pointer(self, woken_by: str = "boot") -> bool:
        """Apply the active revision when it is newer than what this node serves; True if applied.
        `woken_by` says in the log line what prompted the look: the boot, the fleet's nudge or the poll.

        A revision that fails validation here (say, a ${VAR} this node's environment lacks) is
        refused with the field path and the active one keeps serving.
        """
        pointer = await revisions.read_pointer(self.coord, self.keyring)
        if pointer is None or pointer.generation == self.generation:
            return False
        began = time.monotonic()
        reached = "validated"
        try:
            company = parse_company(pointer.document, env=self.env)
        except ConfigError as exc:
            log.error("config_revision_refused", extra={"generation": pointer.generation, "error": str(exc)})
            await self._applied(pointer, False, "received", began, error=str(exc))
            self.generation = pointer.generation  # refused once; wait for the next revision
            return False
        await sync_to_async(revisions.store_revision, thread_sensitive=True)(pointer.document, company, pointer.imported_by, "fleet", pointer.generation)
        reached = "stored"
        await self.ensure_mailboxes(company)
        reached = "mailboxes"
        self.company, self.generation = company, pointer.generation
        self.state.configured, self.state.revision = True, pointer.generation
        await self.follow(company)
        reached = "services"
        await self._applied(pointer, True, reached, began)
        log.info("config_revision_applied", extra={"generation": pointer.generation, "company": company.name,
                                                   "woken_by": woken_by})
        return True

    async def _applied(self, pointer: revisions.Activation, applied: bool, reached: str, began: float, error: str = "") -> None:
        duration = int((time.monotonic() - began) * 1000)
        with contextlib.suppress(Exception):
            await revisions.report_applied(self.coord, self.node_id, pointer.generation, "applied" if applied else "refused", reached, error)
        await self.record(ConfigRevisionApplied(revision=str(pointer.generation), digest=pointer.digest, applied=applied,
                                                reached=reached, error=error, duration_ms=duration))

    async def ensure_mailboxes(self, company: Company) -> None:
        """Every agent seat's inbox and control mailbox, before any seat is claimed (seed 000,
        "A seat's mailbox exists before the seat is running"): not this node's share, all.

        The broker is asked once which mailboxes it already holds, so a restart or an apply
        creates only what is missing; the creates overlap a few at a time (each is a round
        trip and, with `sync: always`, fsyncs on the broker: see MAILBOX_CREATES_PER_STREAM)."""
        began = time.monotonic()
        seats = company.agent_seats()
        wanted = []
        for seat in seats:
            wanted.append((topics.agent_inbox(seat.handle), topics.inbox_group(seat.handle)))
            wanted.append((topics.agent_control(seat.handle), topics.control_group(seat.handle)))
        existing: set[tuple[str, str]] = set()
        try:
            for kind in ("inbox", "control"):
                existing |= set(await self.queue.list_subscriptions(topics.agent_pattern(kind)))
        except Exception as exc:  # listing is an optimisation; creating is idempotent anyway
            log.warning("mailbox_listing_failed", extra={"error": str(exc)})
        missing = [pair for pair in wanted if pair not in existing]
        lanes: dict[str, asyncio.Semaphore] = {}

        async def ensure(pair: tuple[str, str]) -> None:
            lane = lanes.setdefault(topics.stream_for(pair[0]).name, asyncio.Semaphore(MAILBOX_CREATES_PER_STREAM))
            async with lane:
                await self.queue.ensure_subscription(*pair)

        await asyncio.gather(*(ensure(pair) for pair in missing))
        log.info("mailboxes_ensured", extra={"seats": len(seats), "mailboxes_created": len(missing),
                                             "duration_ms": int((time.monotonic() - began) * 1000)})

    # -- serving ---------------------------------------------------------------------------
    async def keep_up(self, stopping: asyncio.Event, poll_seconds: float) -> None:
        """Apply each new active revision: at once on the fleet's nudge
        (`config_revision_activated`), and on a poll every `poll_seconds` as the backstop."""
        with contextlib.suppress(Exception):
            self._nudges = await self.queue.subscribe_stream(topics.CONFIG_REVISION_ACTIVATED, self._on_nudge)
        try:
            while not stopping.is_set():
                # The poll's clock starts again after every look, whichever woke it.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), poll_seconds)
                woken_by = "nudge" if self._nudge.is_set() else "poll"
                self._nudge.clear()
                if stopping.is_set():
                    return
                try:
                    await self.apply_pointer(woken_by)
                except Exception:
                    log.exception("config_revision_poll_failed")
        finally:
            if self._nudges is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._nudges.close(), 1.0)

    async def _on_nudge(self, event: Event) -> None:
        self._nudge.set()
