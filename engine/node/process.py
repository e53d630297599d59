"""The node: one process running the consume loops, the seat hosts and the singleton duties
(seed 002, "The single host", "Running the Engine + API", "Probes"; DESIGN.md, "Shape").

Boot order (the listener is bound by the caller before `run()` starts), one method a step:
  recovering -- `_open_store` (its migrations, whatever the roles; a data node's event-store
                writer), `_open_queue` (the broker and the queue), `_open_coordination` (the
                records on the broker's KV, the leases where coordination.type says, and what
                the apps share);                                              /health 503
  preparing  -- `_take_company` (import `--company` as a new revision when it differs from
                the active one), `_apply_active_revision` (EVERY agent seat's mailbox first),
                `_ensure_work_queue`, `_close_interrupted_turns` (a data node ends the turns its
                last life left open), `_take_presence`;                       /health 200 "starting"
  serving    -- `_watch_links` (both connections, for /ready), `_start_services`, then
                /ready 200 and `_start_loops` (claim seats, keep up with the fleet's revision,
                the watchdog);
  draining   -- SIGTERM/SIGINT: /ready 503 at once, new work refused, leases given back,
                the queue drained, the broker stopped, the writer flushed; exit 0.

The node is what every app's Protocol of the node describes (notify.node, seats.node,
dashboard.node): it is handed to each service it builds and to each request through the
ASGI scope (engine.node.surface), never looked up.

Exit codes (seed 002): 0 a clean drain, 1 a connection closed for good (or a boot that
failed), 2 a configuration refusal, 69 an embedded broker that died, 75 the watchdog.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Mapping

from asgiref.sync import sync_to_async
from django.conf import settings

from dashboard.projection import LiveProjection
from engine.config import Company, NodeConfig
from engine.config.keyring import Keyring
from engine.coord.contract import CoordStore, Unavailable
from engine.coord.dedupe import Dedupe
from engine.coord.keeper import LeaseKeeper
from engine.coord.leases import Lease, LeaseManager, presence_key
from engine.node.applier import RevisionApplier
from engine.node.bringup import BringUp
from engine.node.links import LinkWatch
from engine.node.errors import EXIT_FATAL, EXIT_OK, BootError
from engine.node.probes import DRAINING, PREPARING, SERVING, STOPPED, NodeState
from engine.node.services import Services, build_services
from engine.node.watchdog import EXIT_WATCHDOG, Watchdog
from engine.history.custody import CustodySender
from engine.history.eventfan import HistoryAnswerer, fleet_history
from engine.history.reads import StoreThreads
from engine.queue import topics
from engine.queue.contract import EventQueue
from events.envelope import Event, EventData, new
from events.fleet import FleetReads
from events.store import EventStoreWriter
from events.tracing import trace_of
from events.types.lifecycle import OrgStarted, OrgStopped
from events.types.placement import AgentSpawned, AgentTerminated
from notify.credentials import CredentialCache, Credentials
from notify.edge import ensure_work_queue
from seats.budgets import Budgets
from seats.interrupted import close_interrupted_turns, open_turns
from seats.pauses import PauseBook
from seats.placement import NodeProfile, SeatPlacement
from seats.runtime import SeatRuntime

log = logging.getLogger("engine.node")

STEP_SECONDS = 10.0     # a drain step's bound on a healthy broker
CUT_STEP_SECONDS = 1.0  # on a cut drain nothing can be acknowledged: give up on a step quickly


@dataclass(frozen=True)
class NodeTimings:
    """How often the node's loops run. Settings, so tests exercise the rules quickly."""

    revision_poll_seconds: float = 5.0
    sweep_seconds: float = 5.0
    lease_ttl_seconds: float | None = None  # None: coordination.lease_ttl_seconds
    budget_meters_seconds: float = 15.0     # seed 002: budget_meters "on a 15-second tick"


def freeze_heap() -> None:
    """Move what is alive once the node serves out of the cyclic collector's view.

    Modules, settings, the company, the clients and the services live as long as the node, yet
    a full (generation 2) collection walks every one of them: under webhook load that walk
    paused the event loop for 80-100 ms at a time, the whole of a request's p99 budget
    (README, "Performance"). Frozen, they are still freed by reference counting; only the
    cycle collector stops scanning them, so a full collection walks what serving allocates.
    Garbage is collected first, so none of it is frozen."""
    gc.collect()
    gc.freeze()


class Node:
    """One node's whole life: boot, serve, drain (see the module docstring)."""

    def __init__(self, cfg: NodeConfig, *, roles: tuple[str, ...], company_path: str | None = None,
                 env: Mapping[str, str] | None = None, timings: NodeTimings = NodeTimings(),
                 imported_by: str = "node") -> None:
        self.cfg = cfg
        self.roles = roles
        self.company_path = company_path
        self.env = env
        self.timings = timings
        self.imported_by = imported_by
        self.node_id: str = cfg.node.id or "node"
        self.state = NodeState(node_id=self.node_id, roles=roles)
        self.keyring = Keyring.from_config(cfg.secrets)
        self.ttl = timings.lease_ttl_seconds or cfg.coordination.lease_ttl_seconds
        # Opened by the boot, in order; None until their step ran.
        self.writer: EventStoreWriter | None = None
        # The fleet's history (engine.history): custody for a node without data, the store's
        # threads for its reads and custody writes, and the fleet reads themselves.
        self.custody: CustodySender | None = None
        self.store_reads = StoreThreads(4, "history-read")
        self.store_writes = StoreThreads(1, "custody-write")
        self._history: FleetReads | None = None
        self.answers: HistoryAnswerer | None = None
        self.broker: Any = None                       # the embedded broker's supervisor, if any
        self._queue: EventQueue | None = None
        self._coord: CoordStore | None = None         # the fleet's shared records (durable: the broker's KV)
        self._lease_store: CoordStore | None = None   # where leases live (coordination.type)
        self._leases: LeaseManager | None = None
        self._dedupe: Dedupe | None = None
        self._pauses: PauseBook | None = None
        self._budgets: Budgets | None = None
        self.revisions: RevisionApplier | None = None
        self.services = Services()
        self.presence: Lease | None = None
        self.keeper: LeaseKeeper | None = None
        self.placement: SeatPlacement | None = None
        self.watchdog: Watchdog | None = None
        self.links: LinkWatch | None = None
        self._credentials = CredentialCache(self.keyring)
        self._stopping = asyncio.Event()
        self._exit_code = EXIT_OK
        self._stop_reason = ""
        self._cut = False
        self._tasks: list[asyncio.Task] = []
        self.bring_up = BringUp(clustered=cfg.stream.clustered)  # the coordination steps' one budget

    # -- what the apps read (their Protocols of the node) ----------------------------------
    @property
    def queue(self) -> EventQueue:
        assert self._queue is not None, "the queue opens while the node recovers"
        return self._queue

    @property
    def coord(self) -> CoordStore:
        assert self._coord is not None, "the coordination store opens while the node recovers"
        return self._coord

    @property
    def leases(self) -> LeaseManager:
        assert self._leases is not None, "leases open with the coordination store"
        return self._leases

    @property
    def dedupe(self) -> Dedupe:
        assert self._dedupe is not None, "dedupe opens with the coordination store"
        return self._dedupe

    @property
    def pauses(self) -> PauseBook:
        assert self._pauses is not None, "the pause book opens with the coordination store"
        return self._pauses

    @property
    def budgets(self) -> Budgets:
        assert self._budgets is not None, "the budgets open with the coordination store"
        return self._budgets

    @property
    def company(self) -> Company | None:
        return self.revisions.company if self.revisions is not None else None

    @property
    def revision(self) -> int | None:
        return self.revisions.generation if self.revisions is not None else None

    @property
    def credentials(self) -> Credentials | None:
        return self._credentials.of(self.company)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def public_port(self) -> int | None:
        return self.cfg.api.public.port if self.cfg.api.public is not None else None

    @property
    def max_concurrent(self) -> int:
        return self.cfg.node.max_concurrent

    @property
    def sweep_seconds(self) -> float:
        return self.timings.sweep_seconds

    @property
    def history(self) -> FleetReads:
        assert self._history is not None, "the fleet's history opens with the coordination store"
        return self._history

    @property
    def horizon_hours(self) -> float:
        return float(self.cfg.stream.event_retention_hours)

    @property
    def seat_runtime(self) -> SeatRuntime | None:
        return self.services.seats

    @property
    def projection(self) -> LiveProjection | None:
        return self.services.projection

    async def activate_document(self, text: str, company: Company, imported_by: str, source: str = "api"):
        """PUT /config and the admin's "activate": make a validated document the fleet's active one."""
        if self.revisions is None:
            raise BootError("the node is not serving yet; try again shortly")
        return await self.revisions.activate_document(text, company, imported_by, source=source)

    # -- stopping --------------------------------------------------------------------------
    def request_stop(self, reason: str, exit_code: int = EXIT_OK, cut: bool = False) -> None:
        """Begin the drain. The first request decides the exit code; `cut` skips waiting on work
        that can no longer be acknowledged (a lost connection, a dead broker)."""
        if not self._stopping.is_set():
            self._exit_code, self._stop_reason, self._cut = exit_code, reason, cut
            if self.state.phase == SERVING:
                self.state.phase = DRAINING
            log.info("node_stopping", extra={"reason": reason, "exit_code": exit_code})
            self._stopping.set()

    # -- the whole life --------------------------------------------------------------------
    async def run(self) -> int:
        try:
            try:
                if not await self._unless_stopped(self._boot()):
                    await self._teardown()  # a signal or a fatal arrived during the boot
                    return self._exit_code
            except BootError as exc:
                log.error("node_boot_failed", extra={"error": str(exc)})
                self._print_fatal(str(exc))
                self._exit_code = exc.exit_code
                await self._teardown(boot_failed=True)
                return self._exit_code
            self._watch_links()
            if await self._unless_stopped(self._start_services()):
                # Ready only once what it serves runs: the projection behind /ws/stream, the
                # seat hosts, the notification consumer.
                self.state.phase = SERVING
                log.info("node_serving", extra={"node": self.node_id, "seats_role": "seats" in self.roles})
                company = self.company
                await self._record(OrgStarted(company=company.name if company else "", revision=str(self.revision or ""),
                                              seat_count=len(company.agent_seats()) if company else 0))
                self._start_loops()
                freeze_heap()
                await self._stopping.wait()
            self.state.phase = DRAINING
            await self._teardown()
            return self._exit_code
        finally:
            self.state.phase = STOPPED

    async def _boot(self) -> None:
        """Recover what the node holds, then prepare the company; BootError names what failed."""
        try:
            await self._open_store()
            await self._open_queue()
            await self._open_coordination()
            self.state.phase = PREPARING
            log.info("engine_recovered", extra={"node": self.node_id, "roles": ",".join(self.roles)})
            await self.bring_up.step("the company revision", self._take_company)
            await self.bring_up.step("the active revision", self._apply_active_revision)
            await self._ensure_work_queue()
            await self._close_interrupted_turns()
            await self.bring_up.step("the presence lease", self._take_presence)
        except BootError:
            raise
        except Exception as exc:  # a broker or store refusal: named, never a traceback
            log.debug("node_boot_error", exc_info=True)
            raise BootError(f"boot failed while {self.state.phase}: {exc}") from None

    async def _unless_stopped(self, step: Awaitable[None]) -> bool:
        """Run a step of the boot, abandoning it when a stop arrives first (a signal, or a fatal
        such as the broker dying mid-boot, must not wait for a step stuck on that broker).
        True when the step finished."""
        task = asyncio.ensure_future(step)
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if task.done():
            task.result()  # re-raises the step's own error
            return True
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        return False

    def _print_fatal(self, message: str) -> None:
        print(f"crewlet: {message}", file=sys.stderr)

    # -- recovering ------------------------------------------------------------------------
    async def _open_store(self) -> None:
        """This node's store: its directory writable and its migrations applied, whatever the
        roles (every role reads its own store, revisions at least; forward-only migrations make
        a second run a no-op: seed 002, "The store"); a data node's event-store writer."""
        path = Path(settings.DATABASES["default"]["NAME"])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BootError(f"store.path: {path}: cannot create its directory ({exc.strerror})") from None
        if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise BootError(f"store.path: {path}: not writable by this process")
        await sync_to_async(_migrate, thread_sensitive=True)()
        if "data" in self.roles:
            self.writer = EventStoreWriter()

    async def _open_queue(self) -> None:
        """The broker (an embedded one is started here) and the queue on it."""
        from engine.queue.contract import QueueError
        from engine.queue.factory import open_queue

        try:
            self._queue, self.broker = await open_queue(self.cfg, node_id=self.node_id, on_fatal=self._on_queue_fatal)
        except QueueError as exc:
            raise BootError(str(exc)) from None
        if self.writer is not None:
            self._queue.add_publish_listener(self.writer)
        else:  # seed 002, "Custody": a node without data hands its events to the data nodes
            self.custody = CustodySender(self._queue, self.node_id)
            self._queue.add_publish_listener(self.custody)
            await self.custody.start()
        self.state.broker_link = "up"

    async def _open_coordination(self) -> None:
        """The fleet's records on the stream's own broker (durable on every deployment), the
        leases where `coordination.type` says (their fencing epochs kept with the records), and
        what the apps share (dedupe slots, pauses, budget counters). The records' connection is
        watched as the queue's is: closed for good, it stops the node (seed 002, "either one
        closing for good stops the node")."""
        from engine.coord.factory import open_coordination
        from engine.queue.factory import dial_for

        try:  # the queue's own dial: URL list, token, credentials and TLS alike (seed 002)
            self._coord, self._lease_store = await open_coordination(
                self.cfg, dial=dial_for(self.cfg, self.broker), node_id=self.node_id,
                on_closed=lambda reason: self._on_queue_fatal(EXIT_FATAL, f"coordination: {reason}"))
        except Exception as exc:
            raise BootError(f"coordination: {exc}") from None
        self.state.coordination_link = "up"
        self._leases = LeaseManager(self._lease_store, self.node_id, self.ttl, epochs=self._coord)
        await self.bring_up.step("the lease buckets", self._leases.provision)
        self._dedupe = Dedupe(self._coord, node_id=self.node_id)
        self._pauses = PauseBook(self._coord)
        self._budgets = Budgets(self._coord)
        self._history = fleet_history(queue=self._queue, leases=self._leases, node_id=self.node_id,
                                      horizon_hours=self.horizon_hours, run_read=self.store_reads)
        self.revisions = RevisionApplier(node_id=self.node_id, queue=self._queue, coord=self._coord, keyring=self.keyring,
                                         env=self.env, state=self.state, record=self._record,
                                         follow=self._follow_company, imported_by=self.imported_by)

    def _on_queue_fatal(self, exit_code: int, reason: str) -> None:
        """The broker died (69) or the connection closed for good (1): stop, cutting the drain."""
        log.error("engine_fatal", extra={"exit_code": exit_code, "reason": reason})
        self._print_fatal(reason)
        self.state.broker_link = "down"
        self.request_stop(reason, exit_code=exit_code, cut=True)

    # -- preparing -------------------------------------------------------------------------
    async def _take_company(self) -> None:
        """`--company`: import the file as a new revision when it differs; without it, keep
        serving the store's active revision."""
        if self.company_path:
            await self.revisions.import_file(self.company_path)
        else:
            await self.revisions.reactivate_from_store()

    async def _apply_active_revision(self) -> None:
        await self.revisions.apply_pointer()

    async def _ensure_work_queue(self) -> None:
        """The inbound work queue exists before a webhook is taken (notify.edge)."""
        await ensure_work_queue(self.queue)

    async def _close_interrupted_turns(self) -> None:
        """A data node records the end of every turn its previous life left open (a SIGKILL, a
        forced exit), before the projection reads the store (seats.interrupted)."""
        if self.writer is None:
            return
        closed = await close_interrupted_turns(self.node_id, sync_to_async(_open_turns, thread_sensitive=True),
                                               self._publish)
        if closed:
            log.warning("turns_interrupted", extra={"count": len(closed), "turn_ids": ",".join(closed)})

    async def _publish(self, event: Event) -> None:
        await self.queue.publish(topics.event_subject(event.type), event)

    async def _take_presence(self) -> None:
        """This node's presence lease, held for the node's life: taken now, and taken again by
        the keeper whenever it is missed or lost (a stalled loop, a store that did not answer),
        so /ready recovers without a restart. The node answers the fleet's history questions
        first: the presence leases are the roster those questions go to (seed 000, "Reading the
        fleet's history"), so a node on it is one that answers."""
        self.answers = HistoryAnswerer(queue=self.queue, node_id=self.node_id, horizon_hours=self.horizon_hours,
                                       run_read=self.store_reads)
        await self.answers.start()
        labels = list(self.cfg.node.labels)
        self.presence = await self.leases.acquire_presence(list(self.roles), labels)
        self.state.presence_held = self.presence is not None
        self.keeper = LeaseKeeper(self.leases, on_lost=self._on_lease_lost)
        self.keeper.hold(presence_key(self.node_id), data={"roles": list(self.roles), "labels": labels},
                         lease=self.presence, on_taken=self._presence_taken)

    async def _presence_taken(self, lease: Lease) -> None:
        self.presence = lease
        self.state.presence_held = True
        log.info("presence_lease_retaken", extra={"epoch": lease.epoch})

    # -- serving ---------------------------------------------------------------------------
    async def _start_services(self) -> None:
        """Build what the roles run, tell those that follow the company of the revision this
        node applied while preparing (the seat runtime starts its tool servers), then start
        each in order."""
        self.services = build_services(self)
        if self.company is not None:
            await self._follow_company(self.company)
        for service in self.services.started_in_order():
            await service.start()
            log.info("service_started", extra={"service": service.name})

    async def _follow_company(self, company: Company) -> None:
        """A revision applied: the services that follow the company re-read it."""
        for follower in (self.services.projection, self.services.seats, self.services.scheduler):
            if follower is None:
                continue
            try:
                await follower.on_company(company)
            except Exception:
                log.exception("service_hook_failed", extra={"service": follower.name, "hook": "on_company"})

    def _start_loops(self) -> None:
        self.keeper.start()
        self._tasks.append(asyncio.create_task(self.revisions.keep_up(self._stopping, self.timings.revision_poll_seconds),
                                               name="revision-poll"))
        if "seats" in self.roles:
            me = NodeProfile(self.node_id, self.roles, tuple(self.cfg.node.labels))
            self.placement = SeatPlacement(self.leases, me, self._agent_seats, self._seat_acquired, self._seat_released)
            self._tasks.append(asyncio.create_task(self._sweep_loop(), name="seat-sweep"))
        self.watchdog = Watchdog(self.ttl, self._on_stall)
        self.watchdog.start()

    def _watch_links(self) -> None:
        """From the boot's end: both connections asked in turn, so /ready names one that stops
        answering (engine.node.links) -- a service stuck on a silent broker included."""
        self.links = LinkWatch(self.state, broker=self.queue.ping, coordination=self.coord.ping)
        self.links.start()

    def _agent_seats(self) -> list:
        company = self.company
        return company.agent_seats() if company else []

    async def _sweep_loop(self) -> None:
        while not self.stopping:
            try:
                await self.placement.sweep_once()
                self.state.seats = tuple(sorted(self.placement.held))
            except Unavailable as exc:  # the store did not answer: the next sweep asks again
                log.warning("seat_sweep_unanswered", extra={"error": str(exc)})
            except Exception:
                log.exception("seat_sweep_failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.timings.sweep_seconds)

    async def _seat_acquired(self, handle: str, lease: Lease) -> None:
        self.keeper.add(lease)
        self.state.seats = tuple(sorted({*self.state.seats, handle}))
        log.info("seat_acquired", extra={"seat": handle, "epoch": lease.epoch})
        if self.services.seats is not None:
            await self.services.seats.on_seat_acquired(handle, lease)
        await self._record(self._seat_event(AgentSpawned, handle, lease.epoch))

    async def _seat_released(self, handle: str, lease: Lease, reason: str) -> None:
        # /health stops listing the seat at once: the node no longer holds it, even while its
        # host winds down. The host lets go before the keeper does (what it holds is deferred
        # back to the mailbox), so nothing acts on the seat once the lease is given back.
        self.state.seats = tuple(h for h in self.state.seats if h != handle)
        if self.services.seats is not None:
            await self.services.seats.on_seat_released(handle, lease, reason)
        self.keeper.discard(lease)
        log.info("seat_released", extra={"seat": handle, "reason": reason})
        await self._record(self._seat_event(AgentTerminated, handle, lease.epoch, reason))

    def _seat_event(self, cls, handle: str, epoch: int, reason: str = "") -> EventData:
        company = self.company
        seat = company.seat_by_handle(handle) if company else None
        agent_id = str(company.agent_id_for(handle)) if company else ""
        return cls(agent_id=agent_id, agent_handle=handle, agent_role=(seat.role if seat else "") or "", epoch=epoch,
                   reason=reason)

    async def _on_lease_lost(self, lease: Lease) -> None:
        if self.presence is not None and lease is self.presence:
            self.state.presence_held = False
            log.error("presence_lease_lost")
            return
        if self.placement is not None:
            await self.placement.lost(lease)

    def _on_stall(self, silent: float) -> None:
        self._print_fatal(f"the event loop stalled for {silent:.0f} s (a lease TTL); exiting so a peer can take its seats")
        os._exit(EXIT_WATCHDOG)

    # -- events ----------------------------------------------------------------------------
    async def _record(self, data: EventData) -> Event | None:
        """Publish an event about the engine on `crewlet.events.{type}`; never fails the caller.
        The event, or None when there is no queue to publish it on."""
        if self._queue is None:
            return None
        event = new(data, trace_of(), source="engine")
        try:
            await self._queue.publish(topics.event_subject(event.type), event)
        except Exception as exc:
            log.warning("event_publish_failed", extra={"type": event.type, "error": str(exc)})
        return event

    # -- draining --------------------------------------------------------------------------
    async def _teardown(self, boot_failed: bool = False) -> None:
        """Give everything back, in order. Each step is bounded: on a cut drain (the broker or
        its connection is gone) a step that would wait on the broker gives up quickly."""
        log.info("node_draining", extra={"reason": self._stop_reason or ("boot failed" if boot_failed else ""), "cut": self._cut})
        bound = CUT_STEP_SECONDS if self._cut else STEP_SECONDS
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.links is not None:
            await self.links.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, bound)
        # Services finish what they run (running turns complete unless the drain is cut: the
        # seed gives the drain no bound of its own), then leases are given back.
        for service in reversed(self.services.started_in_order()):
            if self._cut:
                await _bounded(service.stop(True), bound, f"{service.name}_stop")
            else:
                try:
                    await service.stop(False)
                except Exception:
                    log.exception("service_stop_failed", extra={"service": service.name})
        if self.keeper is not None:
            await _bounded(self.keeper.stop(), bound, "lease_keeper_stop")
        if not self._cut:
            if self.placement is not None:
                await _bounded(self.placement.release_all("node draining"), bound, "seat_release")
            if self.presence is not None and self._leases is not None:
                await _bounded(self._leases.release(self.presence), bound, "presence_release")
            if not boot_failed and self._queue is not None:
                company = self.company
                await _bounded(self._record(OrgStopped(company=company.name if company else "",
                                                       reason=self._stop_reason or "stopped")), bound, "org_stopped")
        for store in {id(s): s for s in (self._lease_store, self._coord) if s is not None}.values():
            await _bounded(store.close(), bound, "coord_close")
        if self.answers is not None:  # off the roster (presence given back), so no longer asked
            await _bounded(self.answers.stop(self._cut), bound, "history_answers_stop")
        if self.custody is not None:  # what the node published last, org_stopped included, goes to a data node
            await _bounded(self.custody.close(bound), None, "custody_flush")
        if self._queue is not None:
            await _bounded(self._queue.close(), bound, "queue_close")
        if self.broker is not None:  # bounded by the broker itself, by what it holds
            await _bounded(self.broker.stop(), None, "broker_stop")
        if self.writer is not None:
            await asyncio.to_thread(self.writer.close, STEP_SECONDS)
        self.store_reads.close()
        self.store_writes.close()
        self.state.broker_link = self.state.coordination_link = "down"
        log.info("node_stopped", extra={"exit_code": self._exit_code})


async def _bounded(awaitable: Awaitable[Any], seconds: float | None, what: str) -> None:
    """Await a teardown step for at most `seconds` (None: the step bounds itself); a step that
    fails or overruns is logged."""
    try:
        await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        log.warning("drain_step_overran", extra={"step": what, "seconds": seconds})
    except Exception as exc:
        log.warning("drain_step_failed", extra={"step": what, "error": str(exc)})


def _open_turns(node_id: str) -> list[Event]:
    from django.db import connection

    try:
        return open_turns(node_id)
    finally:
        connection.close()


def _migrate() -> None:
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", interactive=False, verbosity=0)
    connection.close()
