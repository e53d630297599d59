"""The seats role on one node: a `SeatHost` per seat this node holds (seed 000, "Busy agents
queue; held agents wait on the broker"; seed 002, "Replica count": max_concurrent is per
process, so N nodes is N x that ceiling).

`SeatRuntime` is a node service (`engine.node.services`). The node tells it about seats it acquired
and released and about every revision it applied; the runtime owns what the hosts share:
the per-node concurrency gate (`asyncio.Semaphore(node.max_concurrent)`, held around a turn,
never around a fetch, so waiting for a slot does not hand the delivery back), the turn engine,
the completion ledger, the token budgets, the fleet's pause records, conversation memory and
the company's tool servers (`seats.tools.servers`: started with each revision before the hosts
read it, so a turn never begins without its tools; stopped after the hosts at the drain).

Admission is gated on exclusivity (seed 002, "What changed": "gated on a renew fresh enough to
prove exclusivity"): a host starts only while its seat lease `is_exclusive(now)`, renewing it
first when the acquisition is already too old. A pause reaches the node holding the seat by
its `seat_paused`/`seat_resumed` event, with a poll of the store every sweep as the backstop.
The drain (`stop`) lets running turns finish unless it is cut, then detaches everything.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from a2a import service as a2a
from a2a.service import AskOutcome
from engine.config import Company
from engine.coord.leases import Lease
from engine.coord.ledger import CompletionLedger
from engine.queue import topics
from events.envelope import Event
from events.tracing import trace_of
from seats.host import SeatHost, TurnRunner
from seats.memory import ConversationMemory
from seats.node import SeatsNode
from seats.pauses import watch_pauses
from seats.tools.builtins import Ask
from seats.tools.servers import ToolServers
from seats.turn import TurnEngine

log = logging.getLogger("seats.runtime")

DEFAULT_POLL_SECONDS = 5.0


class SeatRuntime:
    """The seat hosts of one node and what they share."""

    name = "seats"

    def __init__(self, node: SeatsNode, *, turns: TurnRunner | None = None, ledger: CompletionLedger | None = None,
                 poll_seconds: float | None = None, tool_servers: ToolServers | None = None) -> None:
        self.node = node
        self.clock = node.leases.clock
        self.budgets = node.budgets
        self.pauses = node.pauses
        self.ledger = ledger if ledger is not None else CompletionLedger(node.coord)
        self.memory = ConversationMemory(node.coord)
        # The company's MCP servers: the node hands in the one whose state /health reports.
        self.tool_servers = tool_servers if tool_servers is not None else ToolServers(cwd=Path.cwd())
        self.turns = turns if turns is not None else TurnEngine(node_id=node.node_id, publish=self.publish,
                                                                budgets=self.budgets, tools=self.tool_servers,
                                                                memory=self.memory, asker=self.ask)
        self.gate = asyncio.Semaphore(max(1, int(node.max_concurrent)))
        self.poll_seconds = poll_seconds or node.sweep_seconds or DEFAULT_POLL_SECONDS
        self.hosts: dict[str, SeatHost] = {}
        self.stopping = False
        self._admitting: dict[str, asyncio.Task] = {}
        self._lifecycle: dict[str, asyncio.Lock] = {}
        self._watch: list = []
        self._poll: asyncio.Task | None = None
        self._pause_heard = asyncio.Event()  # a pause event arrived: the backstop's period starts again

    # -- the node's hooks ------------------------------------------------------------------
    async def start(self) -> None:
        """Provision the shared records, listen for pauses, start the pause poll."""
        for what in (self.ledger, self.pauses, self.budgets, self.memory):
            try:
                await what.provision()
            except Exception as exc:  # provisioned again on first use
                log.warning("seats_provision_failed", extra={"what": type(what).__name__, "error": str(exc)})
        try:
            self._watch = await watch_pauses(self.node.queue, self._pause_changed)
        except Exception as exc:
            log.warning("seat_pause_watch_failed", extra={"error": str(exc)})
        self._poll = asyncio.create_task(self._poll_pauses(), name="seat-pause-poll")

    async def stop(self, cut: bool) -> None:
        """The drain: running turns finish (unless `cut`), then every mailbox is detached."""
        self.stopping = True
        for task in [self._poll, *self._admitting.values()]:
            if task is not None:
                task.cancel()
        self._admitting.clear()
        for sub in self._watch:
            with contextlib.suppress(Exception):
                await sub.close()
        hosts, self.hosts = list(self.hosts.values()), {}
        results = await asyncio.gather(*(h.stop(finish=not cut) for h in hosts), return_exceptions=True)
        for host, result in zip(hosts, results, strict=True):
            if isinstance(result, Exception):
                log.warning("seat_host_stop_failed", extra={"seat": host.handle, "error": str(result)})
        await self.tool_servers.stop(cut)
        with contextlib.suppress(Exception):
            await self.turns.close()

    async def on_company(self, company: Company) -> None:
        """A revision applied: its tool servers first (bounded by their startup timeouts), then
        every host re-reads it (holds, budget parks)."""
        await self.tool_servers.on_company(company)
        for host in list(self.hosts.values()):
            try:
                await host.apply_company(company)
            except Exception:
                log.exception("seat_revision_apply_failed", extra={"seat": host.handle})

    async def on_seat_acquired(self, handle: str, lease: Lease | None) -> None:
        """Host the seat once its lease is proven exclusive, and once the seat's previous host on
        this node has finished letting go (a lease lost and taken again at the next sweep)."""
        if self.stopping:
            return
        async with self._turn_of(handle):
            await self._drop(handle)
            if self.stopping:
                return
            if (lease is None or lease.is_exclusive(self.clock())) and await self._start_host(handle, lease):
                return
            if lease is not None:
                self._admitting[handle] = asyncio.create_task(self._admit(handle, lease), name=f"seat-admit:{handle}")

    async def on_seat_released(self, handle: str, lease: Lease | None, reason: str) -> None:
        """Stop hosting at once: what the host holds goes back at the head (a detach)."""
        log.info("seat_host_releasing", extra={"seat": handle, "reason": reason})
        async with self._turn_of(handle):
            await self._drop(handle)

    # -- hosts -----------------------------------------------------------------------------
    def _turn_of(self, handle: str) -> asyncio.Lock:
        """One seat's hosts start and stop one at a time: a host attaches the seat's inbox and
        control mailbox only after the one before it detached them and lifted its holds."""
        lock = self._lifecycle.get(handle)
        if lock is None:
            lock = self._lifecycle[handle] = asyncio.Lock()
        return lock

    async def _admit(self, handle: str, lease: Lease) -> None:
        """Renew until the lease proves exclusive, then host the seat; a host that fails to start
        (the broker did not answer its subscribe) is started again while the lease is held."""
        leases = self.node.leases
        try:
            while not self.stopping and not lease.lost and not lease.released:
                with contextlib.suppress(Exception):
                    await leases.renew(lease)
                if lease.is_exclusive(self.clock()):
                    async with self._turn_of(handle):
                        if self.stopping or lease.lost or lease.released:
                            break
                        if await self._start_host(handle, lease):
                            return
                await asyncio.sleep(max(leases.renew_interval / 4, 0.05))
            log.warning("seat_not_admitted", extra={"seat": handle, "epoch": lease.epoch})
        finally:
            if self._admitting.get(handle) is asyncio.current_task():
                del self._admitting[handle]

    async def _start_host(self, handle: str, lease: Lease | None) -> bool:
        try:
            pause = await self.pauses.get(handle)
        except Exception as exc:  # the poll corrects it once the store answers
            log.warning("seat_pause_unread", extra={"seat": handle, "error": str(exc)})
            pause = None
        host = SeatHost(self.node, handle, turns=self.turns, gate=self.gate, ledger=self.ledger,
                        budgets=self.budgets, lease=lease, clock=self.clock)
        self.hosts[handle] = host
        try:
            await host.start(pause)
        except Exception as exc:
            self.hosts.pop(handle, None)
            log.warning("seat_host_start_failed", extra={"seat": handle, "error": str(exc)})
            with contextlib.suppress(Exception):
                await host.stop(finish=False)
            return False
        return True

    async def _drop(self, handle: str) -> None:
        task = self._admitting.pop(handle, None)
        if task is not None:
            task.cancel()
        host = self.hosts.pop(handle, None)
        if host is not None:
            await host.stop(finish=False)

    def running(self) -> list[str]:
        """The seats with a turn in flight on this node (what a drain waits for)."""
        return sorted(h for h, host in self.hosts.items() if host.running is not None)

    def describe(self, handle: str) -> dict | None:
        """What this node knows of the seat's host, or None when it does not host it."""
        host = self.hosts.get(handle)
        return None if host is None else host.describe()

    # -- pauses ----------------------------------------------------------------------------
    async def _pause_changed(self, handle: str) -> None:
        host = self.hosts.get(handle)
        if host is not None:
            await self._refresh_pause(host, "event")
        self._pause_heard.set()

    async def _refresh_pause(self, host: SeatHost, learned_by: str) -> None:
        pause = await self.pauses.get(host.handle)
        if pause != host.pause:
            log.info("seat_pause_applied", extra={"seat": host.handle, "paused": pause is not None,
                                                  "stop_running": bool(pause and pause.stop_running),
                                                  "learned_by": learned_by})
            await host.apply_pause(pause)

    async def _poll_pauses(self) -> None:
        """The backstop for a pause event this node missed: re-read every hosted seat's pause
        `poll_seconds` after the last poll or the last pause event heard, whichever is later."""
        while not self.stopping:
            try:
                await asyncio.wait_for(self._pause_heard.wait(), self.poll_seconds)
            except TimeoutError:
                pass
            else:
                self._pause_heard.clear()
                continue  # the events are arriving: the backstop waits a whole period again
            for host in list(self.hosts.values()):
                try:
                    await self._refresh_pause(host, "poll")
                except Exception as exc:
                    log.warning("seat_pause_poll_failed", extra={"seat": host.handle, "error": str(exc)})

    # -- asking ----------------------------------------------------------------------------
    async def ask(self, ask: Ask) -> AskOutcome:
        """The `a2a_ask` tool's door (seats.tools.builtins): the A2A service opens the channel and
        wakes the asked seat, under the asking tool call's span, one hop deeper than the trigger."""
        trigger = ask.trigger
        return await a2a.ask(self.node, asker=ask.asker.handle, target=ask.target.handle, brief=ask.question,
                             depth=trigger.delegation_depth, trace=trace_of(), turn_id=ask.turn_id,
                             chain=tuple(trigger.delegation_chain or ()))

    # -- events ----------------------------------------------------------------------------
    async def publish(self, event: Event) -> None:
        """The turn engine's publisher: `crewlet.events.{type}`."""
        await self.node.queue.publish(topics.event_subject(event.type), event)

