"""The node's company (seed 002, "Running the Engine + API"; DESIGN.md, "Configuration"):
importing a file as a revision, activating a document on the fleet's pointer, and applying
the active revision without a restart -- every agent seat's mailbox first, then the services.

A mixin of `engine.node.Node`: it reads and writes the node's `company`, `generation`,
`queue`, `coord`, `keyring` and `state`.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from asgiref.sync import sync_to_async

from engine import revisions
from engine.config import Company, ConfigError, parse_company
from engine.errors import EXIT_CONFIG, BootError
from engine.queue import topics
from engine.services import call_hook
from events.envelope import Event
from events.types.lifecycle import ConfigRevisionActivated, ConfigRevisionApplied

log = logging.getLogger("engine.node")

MAILBOX_CREATES_IN_FLIGHT = 8  # overlapping creates hides round trips; the broker's fsync bounds the rest


class CompanyApplier:
    """How a node comes to serve a company revision, and keeps up with the fleet's."""

    async def _import_file(self, path: str) -> None:
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

    async def _reactivate_from_store(self) -> None:
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
            event = self._event(ConfigRevisionActivated(revision=str(activation.generation), digest=activation.digest,
                                                        previous_revision=str(previous or ""), activated_by=imported_by))
            await self._publish_event(event)
            await self.queue.publish(topics.CONFIG_REVISION_ACTIVATED, event)
        self._nudge.set()
        return activation

    async def apply_pointer(self) -> bool:
        """Apply the active revision when it is newer than what this node serves; True if applied.

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
        for service in self.services:
            await call_hook(service, "on_company", company)
        reached = "services"
        await self._applied(pointer, True, reached, began)
        log.info("config_revision_applied", extra={"generation": pointer.generation, "company": company.name})
        return True

    async def _applied(self, pointer, applied: bool, reached: str, began: float, error: str = "") -> None:
        duration = int((time.monotonic() - began) * 1000)
        with contextlib.suppress(Exception):
            await revisions.report_applied(self.coord, self.node_id, pointer.generation, "applied" if applied else "refused", reached, error)
        await self._record(ConfigRevisionApplied(revision=str(pointer.generation), digest=pointer.digest, applied=applied,
                                                 reached=reached, error=error, duration_ms=duration))

    async def ensure_mailboxes(self, company: Company) -> None:
        """Every agent seat's inbox and control mailbox, before any seat is claimed (seed 000,
        "A seat's mailbox exists before the seat is running"): not this node's share, all.

        The broker is asked once which mailboxes it already holds, so a restart or an apply
        creates only what is missing; the creates overlap a few at a time (each is a round
        trip and, with `sync: always`, an fsync on the broker)."""
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
        gate = asyncio.Semaphore(MAILBOX_CREATES_IN_FLIGHT)

        async def ensure(pair: tuple[str, str]) -> None:
            async with gate:
                await self.queue.ensure_subscription(*pair)

        await asyncio.gather(*(ensure(pair) for pair in missing))
        log.info("mailboxes_ensured", extra={"seats": len(seats), "mailboxes_created": len(missing),
                                             "duration_ms": int((time.monotonic() - began) * 1000)})

    async def _revision_loop(self) -> None:
        with contextlib.suppress(Exception):
            self._nudge_sub = await self.queue.subscribe_stream(topics.CONFIG_REVISION_ACTIVATED, self._on_nudge)
        while not self.stopping:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), self.timings.revision_poll_seconds)
            self._nudge.clear()
            if self.stopping:
                return
            try:
                await self.apply_pointer()
            except Exception:
                log.exception("config_revision_poll_failed")

    async def _on_nudge(self, event: Event) -> None:
        self._nudge.set()

