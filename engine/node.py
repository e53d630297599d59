"""The node: one process running the consume loops, the seat hosts and the singleton duties
(seed 002, "The single host", "Running the Engine + API", "Probes"; DESIGN.md, "Shape").

Boot order (the listener is bound by the caller before `run()` starts):
  recovering -- the store's migrations, the event-store writer, the broker and the queue,
                the coordination store and its buckets;   /health 503
  preparing  -- the company: import `--company` as a new revision when it differs from the
                active one, apply the active revision, ensure EVERY agent seat's mailbox,
                take the presence lease;                    /health 200 "starting"
  serving    -- claim seats (seats role), poll the activation pointer, run the duties;
  draining   -- SIGTERM/SIGINT: /ready 503 at once, new work refused, leases given back,
                the queue drained, the broker stopped, the writer flushed; exit 0.

Exit codes (seed 002): 0 a clean drain, 1 a connection closed for good (or a boot that
failed), 2 a configuration refusal, 69 an embedded broker that died, 75 the watchdog.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from engine import runtime
from engine.company import CompanyApplier
from engine.errors import EXIT_BROKER_DIED, EXIT_CONFIG, EXIT_FATAL, EXIT_OK, BootError  # noqa: F401 (re-exported)
from engine.services import build_services, call_hook
from engine.config import Company, NodeConfig
from engine.coord.keeper import LeaseKeeper
from engine.coord.leases import Lease, LeaseManager
from engine.keyring import Keyring
from engine.probes import DRAINING, PREPARING, SERVING, STOPPED, NodeState
from engine.queue import topics
from engine.watchdog import EXIT_WATCHDOG, Watchdog
from events.envelope import Event, new
from events.tracing import trace_of
from events.types.lifecycle import OrgStarted, OrgStopped
from events.types.placement import AgentSpawned, AgentTerminated
from seats.placement import NodeProfile, SeatPlacement

log = logging.getLogger("engine.node")

ROLES = ("data", "seats", "ingress", "workers")
STEP_SECONDS = 10.0     # a drain step's bound on a healthy broker
CUT_STEP_SECONDS = 1.0  # on a cut drain nothing can be acknowledged: give up on a step quickly
MAILBOX_CREATES_IN_FLIGHT = 8  # overlapping creates hides round trips; the broker's fsync bounds the rest


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


class Node(CompanyApplier):
    def __init__(self, cfg: NodeConfig, *, roles: tuple[str, ...], company_path: str | None = None,
                 env: dict | None = None, timings: NodeTimings = NodeTimings(), imported_by: str = "node") -> None:
        self.cfg = cfg
        self.roles = roles
        self.company_path = company_path
        self.env = env
        self.timings = timings
        self.imported_by = imported_by
        self.node_id = cfg.node.id
        self.state = NodeState(node_id=self.node_id, roles=roles)
        self.keyring = Keyring.from_config(cfg.secrets)
        self.ttl = timings.lease_ttl_seconds or cfg.coordination.lease_ttl_seconds
        self.company: Company | None = None
        self.generation: int | None = None
        self.queue: Any = None
        self.broker: Any = None
        self.coord: Any = None
        self.writer: Any = None
        self.leases: LeaseManager | None = None
        self.keeper: LeaseKeeper | None = None
        self.placement: SeatPlacement | None = None
        self.presence: Lease | None = None
        self.watchdog: Watchdog | None = None
        self._stopping = asyncio.Event()
        self._nudge = asyncio.Event()
        self._exit_code = EXIT_OK
        self._stop_reason = ""
        self._cut = False
        self._tasks: list[asyncio.Task] = []
        self._nudge_sub: Any = None
        self.services: list = []

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

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    # -- the whole life --------------------------------------------------------------------
    async def run(self) -> int:
        runtime.set_node(self)
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
            self.state.phase = SERVING
            log.info("node_serving", extra={"node": self.node_id, "seats_role": "seats" in self.roles})
            await self._record(OrgStarted(company=self.company.name if self.company else "", revision=str(self.generation or ""),
                                          seat_count=len(self.company.agent_seats()) if self.company else 0))
            if await self._unless_stopped(self._start_services()):
                self._start_loops()
                freeze_heap()
                await self._stopping.wait()
            self.state.phase = DRAINING
            await self._teardown()
            return self._exit_code
        finally:
            self.state.phase = STOPPED
            runtime.clear_node(self)

    async def _boot(self) -> None:
        """Recover what the node holds, then prepare the company; BootError names what failed."""
        try:
            await self._recover()
            self.state.phase = PREPARING
            log.info("engine_recovered", extra={"node": self.node_id, "roles": ",".join(self.roles)})
            await self._prepare()
        except BootError:
            raise
        except Exception as exc:  # a broker or store refusal: named, never a traceback
            log.debug("node_boot_error", exc_info=True)
            raise BootError(f"boot failed while {self.state.phase}: {exc}") from None

    async def _unless_stopped(self, step) -> bool:
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
        import sys

        print(f"crewlet: {message}", file=sys.stderr)

    # -- recovering ------------------------------------------------------------------------
    def _check_store_path(self) -> None:
        """The store file's directory must exist (or be creatable) and be writable: named if not."""
        import os
        from pathlib import Path

        from django.conf import settings

        path = Path(settings.DATABASES["default"]["NAME"])
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BootError(f"store.path: {path}: cannot create its directory ({exc.strerror})") from None
        if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise BootError(f"store.path: {path}: not writable by this process")

    async def _recover(self) -> None:
        if "data" in self.roles:
            self._check_store_path()
            await sync_to_async(_migrate, thread_sensitive=True)()
            from events.store import EventStoreWriter

            self.writer = EventStoreWriter()
        from engine.queue.factory import open_queue
        from engine.queue.contract import QueueError

        try:
            self.queue, self.broker = await open_queue(self.cfg, node_id=self.node_id, on_fatal=self._on_queue_fatal)
        except QueueError as exc:
            raise BootError(str(exc)) from None
        if self.writer is not None:
            self.queue.add_publish_listener(self.writer)
        self.state.broker_link = "up"
        from engine.coord.factory import open_coord

        if self.broker is not None:
            url, token = self.broker.client_url, self.broker.token
        else:
            url, token = self.cfg.stream.url, self.cfg.stream.token
        try:
            self.coord = await open_coord(self.cfg, url=url, token=token)
        except Exception as exc:
            raise BootError(f"coordination: {exc}") from None
        self.leases = LeaseManager(self.coord, self.node_id, self.ttl)
        await self.leases.provision()

    def _on_queue_fatal(self, exit_code: int, reason: str) -> None:
        """The broker died (69) or the connection closed for good (1): stop, cutting the drain."""
        log.error("engine_fatal", extra={"exit_code": exit_code, "reason": reason})
        self._print_fatal(reason)
        self.state.broker_link = "down"
        self.request_stop(reason, exit_code=exit_code, cut=True)

    # -- preparing -------------------------------------------------------------------------
    async def _prepare(self) -> None:
        if self.company_path:
            await self._import_file(self.company_path)
        else:
            await self._reactivate_from_store()
        await self.apply_pointer()
        self.presence = await self.leases.acquire_presence(list(self.roles), list(getattr(self.cfg.node, "labels", []) or []))
        self.state.presence_held = self.presence is not None
        self.keeper = LeaseKeeper(self.leases, on_lost=self._on_lease_lost)
        if self.presence is not None:
            self.keeper.add(self.presence)

    # -- serving ---------------------------------------------------------------------------
    async def _start_services(self) -> None:
        self.services = build_services(self)
        for service in self.services:
            if self.company is not None:
                await call_hook(service, "on_company", self.company)
            await service.start()
            log.info("service_started", extra={"service": service.name})

    def _start_loops(self) -> None:
        self.keeper.start()
        self._tasks.append(asyncio.create_task(self._revision_loop(), name="revision-poll"))
        if "seats" in self.roles:
            me = NodeProfile(self.node_id, self.roles, tuple(getattr(self.cfg.node, "labels", []) or ()))
            self.placement = SeatPlacement(self.leases, me, self._agent_seats, self._seat_acquired, self._seat_released)
            self._tasks.append(asyncio.create_task(self._sweep_loop(), name="seat-sweep"))
        self.watchdog = Watchdog(self.ttl, self._on_stall)
        self.watchdog.start()

    def _agent_seats(self) -> list:
        return self.company.agent_seats() if self.company else []

    async def _sweep_loop(self) -> None:
        while not self.stopping:
            try:
                await self.placement.sweep_once()
                self.state.seats = tuple(sorted(self.placement.held))
            except Exception:
                log.exception("seat_sweep_failed")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.timings.sweep_seconds)

    async def _seat_acquired(self, handle: str, lease: Lease) -> None:
        self.keeper.add(lease)
        self.state.seats = tuple(sorted({*self.state.seats, handle}))
        log.info("seat_acquired", extra={"seat": handle, "epoch": lease.epoch})
        for service in self.services:
            await call_hook(service, "on_seat_acquired", handle, lease)
        await self._record(self._seat_event(AgentSpawned, handle, lease.epoch))

    async def _seat_released(self, handle: str, lease: Lease, reason: str) -> None:
        # The seat's host lets go first (what it holds is deferred back to the mailbox), so
        # nothing acts on the seat once the lease is given back.
        for service in self.services:
            await call_hook(service, "on_seat_released", handle, lease, reason)
        self.keeper.discard(lease)
        self.state.seats = tuple(h for h in self.state.seats if h != handle)
        log.info("seat_released", extra={"seat": handle, "reason": reason})
        await self._record(self._seat_event(AgentTerminated, handle, lease.epoch, reason))

    def _seat_event(self, cls, handle: str, epoch: int, reason: str = ""):
        seat = self.company.seat_by_handle(handle) if self.company else None
        agent_id = str(self.company.agent_id_for(handle)) if self.company else ""
        return cls(agent_id=agent_id, agent_handle=handle, agent_role=getattr(seat, "role", "") or "", epoch=epoch, reason=reason)

    async def _on_lease_lost(self, lease: Lease) -> None:
        if self.presence is not None and lease is self.presence:
            self.state.presence_held = False
            log.error("presence_lease_lost")
            return
        if self.placement is not None:
            await self.placement.lost(lease)

    def _on_stall(self, silent: float) -> None:
        import os

        self._print_fatal(f"the event loop stalled for {silent:.0f} s (a lease TTL); exiting so a peer can take its seats")
        os._exit(EXIT_WATCHDOG)

    # -- events ----------------------------------------------------------------------------
    def _event(self, data) -> Event:
        return new(data, trace_of(), source="engine")

    async def _record(self, data) -> None:
        """Publish an event about the engine on `crewlet.events.{type}`; never fails the caller."""
        await self._publish_event(self._event(data))

    async def _publish_event(self, event: Event) -> None:
        if self.queue is None:
            return
        try:
            await self.queue.publish(topics.event_subject(event.type), event)
        except Exception as exc:
            log.warning("event_publish_failed", extra={"type": event.type, "error": str(exc)})

    # -- draining --------------------------------------------------------------------------
    async def _teardown(self, boot_failed: bool = False) -> None:
        """Give everything back, in order. Each step is bounded: on a cut drain (the broker or
        its connection is gone) a step that would wait on the broker gives up quickly."""
        log.info("node_draining", extra={"reason": self._stop_reason or ("boot failed" if boot_failed else ""), "cut": self._cut})
        bound = CUT_STEP_SECONDS if self._cut else STEP_SECONDS
        if self.watchdog is not None:
            self.watchdog.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, bound)
        if self._nudge_sub is not None:
            await _bounded(self._nudge_sub.close(), bound, "config_nudge_close")
        # Services finish what they run (running turns complete unless the drain is cut: the
        # seed gives the drain no bound of its own), then leases are given back.
        for service in reversed(self.services):
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
            if self.presence is not None and self.leases is not None:
                await _bounded(self.leases.release(self.presence), bound, "presence_release")
            if not boot_failed and self.queue is not None:
                await _bounded(self._record(OrgStopped(company=self.company.name if self.company else "",
                                                       reason=self._stop_reason or "stopped")), bound, "org_stopped")
        if self.coord is not None:
            await _bounded(self.coord.close(), bound, "coord_close")
        if self.queue is not None:
            await _bounded(self.queue.close(), bound, "queue_close")
        if self.broker is not None:
            await _bounded(self.broker.stop(), getattr(self.broker, "stop_timeout_seconds", 60) + 5, "broker_stop")
        if self.writer is not None:
            await asyncio.to_thread(self.writer.close, STEP_SECONDS)
        self.state.broker_link = "down"
        log.info("node_stopped", extra={"exit_code": self._exit_code})


async def _bounded(awaitable, seconds: float, what: str) -> None:
    """Await a teardown step for at most `seconds`; a step that fails or overruns is logged."""
    try:
        await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError:
        log.warning("drain_step_overran", extra={"step": what, "seconds": seconds})
    except Exception as exc:
        log.warning("drain_step_failed", extra={"step": what, "error": str(exc)})


def _migrate() -> None:
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", interactive=False, verbosity=0)
    connection.close()
