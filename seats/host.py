"""The seat host: one agent seat's inbox, drained in batches, one conversation at a time (seed 000,
"Inbox Batching & Coalescing", "Busy agents queue; held agents wait on the broker", "A failed
turn does not hold its conversation back", "The ack budget"; seed 002, "Token Budgets").

`subscribe_batch` is the buffer: nothing is held in memory past an ack. Its options are read
from the node's CURRENT company on every drain, so a revision's knobs apply without
re-subscribing. Per partition the handler:
  1. drops same-id duplicates, then skips (acks) what the completion ledger already holds,
     publishing `turn_trigger_skipped` so a redelivery is never invisible;
  2. merges what is left into one trigger (`notify.coalesce`, the digest trigger); a partition
     that cannot be merged degrades to per-event dispatch: the tail is requeued as independent inbox messages FIRST,
     then the first event runs in the current ack scope;
  3. runs the turn inside the node's concurrency gate -- waiting for a slot keeps the delivery,
     and a hold that landed meanwhile (a pause) defers it there, before any turn starts;
  4. settles (`_settle`):
       completed/stopped     -> (a completed turn that answered an ask sends its answer first:
                                `_answer_ask`) every constituent recorded as worked, and the waiting messages
                                of its thread the turn was shown and answered (seed 000, "the
                                failed one is not answered twice"); ACK
       llm_unavailable, every member of the chain failing for a passing reason (429, 5xx,
       timeout, unreachable) -> NAK: the backoff outlasts a benched provider, and newer mail of
                                the conversation runs first meanwhile
       budget_exhausted      -> park, DEFER
       interrupted           -> DEFER: the lease went to another node, which runs it (or a
                                renewal landed late, and this host runs it once it may)
       a turn that raised `queue.Unreachable` (the node's broker did not take one of its own
       events) -> NAK, nothing recorded: the node's infrastructure failed, not the mail
       anything else -- a guard breach, a model that declined, a provider that refused the
       call, a turn that raised (`turn.guard_breach` first) -> ABANDONED (seed 000,
       turn_trigger_skipped: "a trigger whose turn was ABANDONED rather than redelivered ...
       with the reason"): recorded in the completion ledger, `turn_trigger_skipped` with the
       reason, ACK. Running it again would pay the model again for the same end.

A DEFER quiesces the inbox. A hold's lift undoes that; a DEFER no hold accounts for (a lease
not proven exclusive, a turn fenced, a store that did not answer) is undone by the host itself
once the seat is servable again (`_fetch_when_servable`), or the seat is let go.

Holds keep mail on the broker instead of in the handler: `no_provider` while the company has
no model provider, `paused` while a person paused the seat, `budget` while a capped window
refuses it. A delivery that reaches a held seat anyway (it raced the hold) takes the hold again
and is deferred, keeping its place at the head. Control mail is consumed apart from the inbox,
so no inbox hold blocks it.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol

from a2a import service as a2a
from engine.coord.contract import CoordError, Unavailable
from engine.coord.leases import Lease
from engine.coord.ledger import CompletionLedger
from engine.queue import topics
from engine.queue.contract import Batch, BatchOptions, Delivery, EventQueue, Outcome, QueueError, Unreachable
from events.envelope import Event, EventData, new
from events.tracing import TraceContext, event_trace, new_span_id, trace_of
from events.types.notification import TurnTriggerSkipped
from events.types.system import TurnGuardBreach
from notify.coalesce import CoalesceError, coalesce, coalesced_event
from seats.budgets import Budgets
from seats.holds import HOLD_BUDGET, HOLD_DRAINING, HOLD_NO_PROVIDER, HOLD_PAUSED, BudgetPark, InboxHolds
from seats.node import SeatsNode
from seats.turn import CompletedWhileCancelled, TurnRequest, TurnResult

log = logging.getLogger("seats.host")

STORE_RETRY_SECONDS = 1.0  # a store that did not answer is asked again after the NAK base spacing,
STORE_RETRY_MAX_SECONDS = 15.0  # doubling on each failure in a row up to this: a DEFER costs a delivery
EXCLUSIVE_RECHECK_SECONDS = 0.25  # a host deferred for want of an exclusive lease looks again this often
# A ledger record is asked again this long: a client fails over to another server of its URL
# list within a reconnect or two (a second apart, each attempt 2 s). A worked turn's mail is
# acked meanwhile; an abandoned one's waits, well inside its one-minute ack window.
LEDGER_RETRY_SECONDS = 15.0
# turn_trigger_skipped's reason phrases, matched exactly by readers
SKIP_WORKED = "already worked"
SKIP_ANSWERED = "answered in its thread by a later turn"
SKIP_ABANDONED_BEFORE = "already abandoned"
ABANDONED = {  # why a turn was abandoned, by what ended it
    "raised": "abandoned: the turn raised",
    "guard": "abandoned: a guard ended the turn",
    "refusal": "abandoned: the model declined",
    "provider": "abandoned: the model provider refused the call",
    "failed": "abandoned: the turn failed",
}
A2A_REQUEST = "a2a_request"  # an ask's wake: the turn it starts answers it


class TurnRunner(Protocol):
    """What runs a seat's turn: `seats.turn.TurnEngine`, or a test's scripted engine."""

    async def run(self, request: TurnRequest) -> TurnResult:
        """Run one turn to its outcome; raises only on a bug or an unanswering budget store."""


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


class SeatHost:
    """One seat's consumer on this node. `turns` runs a turn (`seats.turn.TurnEngine`), `gate`
    is the node's concurrency semaphore, `ledger` the fleet's completion ledger, `budgets` the
    token budgets (None: uncapped), `lease` the seat lease this node holds (None in tests)."""

    def __init__(self, node: SeatsNode, handle: str, *, turns: TurnRunner, gate: asyncio.Semaphore,
                 ledger: CompletionLedger, budgets: Budgets | None = None, lease: Lease | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.handle = handle
        self.turns = turns
        self.gate = gate
        self.ledger = ledger
        self.budgets = budgets
        self.lease = lease
        self.clock = clock
        self.inbox, self.group = topics.agent_inbox(handle), topics.inbox_group(handle)
        self.control, self.control_group = topics.agent_control(handle), topics.control_group(handle)
        self.pause: Any = None           # seats.pauses.Pause while paused
        self.inbox_holds = InboxHolds(node.queue, self.inbox, self.group, self._may_fetch,
                                      later=lambda: self._fetch_when_servable(0.0))
        self.park = BudgetPark(handle, self.inbox_holds, budgets, lambda: self.node.company)
        self.running: dict | None = None
        self.last_turn: dict | None = None
        self.last_error: dict | None = None
        self.provider_down = False
        self.stopping = False
        self.turns_run = 0
        self._busy = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._retry_task: asyncio.Task | None = None
        self._store_failures = 0  # store reads unanswered in a row (the re-fetch spacing doubles)
        self._telemetry: set[asyncio.Future] = set()
        # turn id -> the ledger write begun beside that turn's end record, and what it records
        self._recording: dict[str, tuple[asyncio.Future, list[tuple[str, str]]]] = {}

    @property
    def queue(self) -> EventQueue:
        return self.node.queue

    # -- life ------------------------------------------------------------------------------
    async def start(self, pause: Any = None) -> None:
        """Take the holds the seat starts under (before attaching, so they apply on attach), then
        attach the inbox and the control mailbox."""
        self.pause = pause
        if pause is not None:
            await self.inbox_holds.take(HOLD_PAUSED)
        if not _has_provider(self.node.company):
            await self.inbox_holds.take(HOLD_NO_PROVIDER)
        await self.queue.subscribe_batch(self.inbox, self.group, self.options, self._on_batch)
        await self.queue.subscribe(self.control, self.control_group, self._on_control)
        log.info("seat_host_started", extra={"seat": self.handle, "holds": ",".join(sorted(self.holds))})

    async def stop(self, *, finish: bool) -> None:
        """Let go of the seat. `finish`: the running turn completes first (the drain); otherwise
        it is cancelled and what the host held goes back at the head with its count (a detach).
        The holds this process took are lifted: a later host of the seat takes its own."""
        self.stopping = True
        self.park.stop()
        if self._retry_task is not None:
            self._retry_task.cancel()
        if finish:
            await self.inbox_holds.take(HOLD_DRAINING)  # between partitions, the rest of a drain goes back
            await self._idle.wait()
        await self.queue.detach(self.inbox, self.group)
        await self.queue.detach(self.control, self.control_group)
        if self._telemetry:
            await asyncio.wait(set(self._telemetry), timeout=None if finish else 1.0)
        with contextlib.suppress(Exception):
            await self.inbox_holds.lift_all()
        log.info("seat_host_stopped", extra={"seat": self.handle, "finished": finish})

    def options(self) -> BatchOptions:
        """Read on every drain from the node's current company (hot-reloadable knobs)."""
        company = self.node.company
        if company is None:
            return BatchOptions()
        return BatchOptions(linger_seconds=company.notification_coalesce_window_seconds,
                            max_batch=company.notification_coalesce_max_batch)

    # -- what the node tells the host ------------------------------------------------------
    async def apply_company(self, company: Any) -> None:
        """A new revision: the `no_provider` hold follows providers.llm; a budget park is judged
        again against the revision's ceilings."""
        if not _has_provider(company):
            await self.inbox_holds.take(HOLD_NO_PROVIDER)
        elif HOLD_NO_PROVIDER in self.holds:
            await self.inbox_holds.lift(HOLD_NO_PROVIDER)
            log.info("seat_provider_hold_released", extra={"seat": self.handle})
        await self.park.reconsider(company)

    async def apply_pause(self, pause: Any) -> None:
        """The fleet's pause record for this seat (None: not paused). Paused, the inbox is held;
        `stop_running` also ends the running turn at its next round (`_stop_requested`)."""
        self.pause = pause
        if pause is not None:
            await self.inbox_holds.take(HOLD_PAUSED)
        else:
            await self.inbox_holds.lift(HOLD_PAUSED)

    # -- the batch handler -----------------------------------------------------------------
    async def _on_batch(self, batch: Batch) -> Outcome:
        self._busy += 1
        self._idle.clear()
        try:
            outcome = await self._dispatch(batch)
            if outcome is Outcome.DEFER and not self.holds:
                # Deferred for no hold (a lease not proven exclusive, a turn interrupted, an answer
                # this node may not send, a store that did not answer): no lift will undo the
                # quiesce the DEFER leaves, so this host does once the seat is servable again.
                self._fetch_when_servable(0.0)
            return outcome
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()

    async def _dispatch(self, batch: Batch) -> Outcome:
        company = self.node.company
        seat = company.seat_by_handle(self.handle) if company is not None else None
        refused = await self._refuse(company, seat)
        if refused is not None:
            return refused
        try:
            fresh = await self._unworked(_unique(batch.deliveries))
            self._store_failures = 0
            if not fresh:
                return Outcome.ACK
            refusal = await self.budgets.check(company, seat) if self.budgets is not None else None
        except CoordError as exc:
            return self._store_down(exc)
        if refusal is not None:  # a full window: no call would be admitted, so none is made
            await self.park.park(refusal)
            return Outcome.DEFER
        turn_id = str(uuid.uuid4())
        trigger, constituents = await self._trigger(fresh, batch.key, turn_id, company)
        request = TurnRequest(seat=seat, company=company, trigger=trigger, constituents=constituents,
                              turn_id=turn_id, stop_requested=self._stop_requested, fence=self._fence)
        if trigger.type == A2A_REQUEST:  # an ask (never merged with other mail): its answer goes from the turn
            request.answer = functools.partial(self._answer, request)  # and the ledger follows the answer
        else:
            request.ending = functools.partial(self._record_beside, request)
        async with self.gate:  # waiting here keeps the delivery: nothing is handed back
            # A hold that landed while this delivery was read, merged or waiting for a slot (a
            # pause, a lost lease): deferred now, it keeps its place at the head and no turn runs.
            # Nothing is awaited between this check and the turn's start.
            now_serving = self.node.company
            refused = await self._refuse(now_serving, now_serving.seat_by_handle(self.handle) if now_serving is not None else None)
            if refused is not None:
                return refused
            self.running = {"turn_id": turn_id, "trigger_id": str(trigger.id), "started_at": _now_iso(),
                            "trigger_ids": [str(e.id) for e in constituents]}
            log.info("seat_turn_started", extra={"seat": self.handle, "turn_id": turn_id,
                                                 "trigger_ids": ",".join(self.running["trigger_ids"])})
            try:
                try:
                    result = await self.turns.run(request)
                except CompletedWhileCancelled:
                    raise
                except BaseException:  # the turn's end did not land: nor does the record written beside it
                    await asyncio.shield(asyncio.ensure_future(self._withdraw(request)))
                    raise
            except CompletedWhileCancelled as cut:  # detached as the turn completed: record it, then stop
                with contextlib.suppress(Exception):
                    await asyncio.shield(asyncio.ensure_future(self._settle(request, cut.result)))
                raise
            except CoordError as exc:  # the budget store did not answer: the node's fault, not the mail's
                return self._store_down(exc)
            except Unreachable as exc:  # the node's broker did not take the turn's own record: nor the mail's
                return self._broker_down(request, exc)
            except Exception as exc:
                return await self._failed(request, exc)
            finally:
                self.running = None
        # From here the turn has happened: finish recording it even if the host is detached now,
        # so a peer that takes the seat finds it in the ledger instead of running it again.
        settling = asyncio.ensure_future(self._settle(request, result))
        try:
            outcome = await asyncio.shield(settling)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await settling
            raise
        return outcome

    async def _refuse(self, company: Any, seat: Any) -> Outcome | None:
        """DEFER a delivery this host may not work now, taking the hold that should have kept it."""
        if self.stopping:
            return Outcome.DEFER
        if self.lease is not None and not self.lease.is_exclusive(self.clock()):
            # A renewal overdue (the store slow to answer): back at the head; the inbox fetches
            # again once a renewal lands (`_on_batch`), or the seat is let go when the lease is lost.
            log.warning("seat_not_exclusive", extra={"seat": self.handle, "epoch": self.lease.epoch})
            return Outcome.DEFER
        if seat is None or not seat.is_agent:
            log.warning("seat_not_in_company", extra={"seat": self.handle})
            return Outcome.DEFER  # placement lets the seat go on its next sweep, unless it is back
        held = (HOLD_NO_PROVIDER if not _has_provider(company) else HOLD_PAUSED if self.pause is not None
                else HOLD_BUDGET if self.park.refusal is not None else None)
        if held is not None:  # it raced the hold: take it again; the mail keeps its place at the head
            await self.inbox_holds.take(held)
            return Outcome.DEFER
        return None

    async def _unworked(self, events: list[Event]) -> list[Event]:
        """The events the ledger has no record of; each one it has is skipped, out loud."""
        records = await asyncio.gather(*(self.ledger.worked(self.handle, str(e.id)) for e in events))
        fresh = []
        for event, record in zip(events, records, strict=True):
            if record is None:
                fresh.append(event)
                continue
            reason = {"answered_in_thread": SKIP_ANSWERED, "abandoned": SKIP_ABANDONED_BEFORE}.get(record.reason, SKIP_WORKED)
            log.info("turn_trigger_skipped", extra={"seat": self.handle, "trigger_id": str(event.id),
                                                    "worked_by": record.turn_id, "reason": reason})
            self._record_later(self._event(TurnTriggerSkipped(
                **self._seat_fields(), conversation_key=_identity(event), trigger_id=str(event.id),
                trigger_type=event.type, reason=reason, worked_by_turn_id=record.turn_id,
                detail=f"the completion ledger records it {record.reason or 'worked'} by turn {record.turn_id}"), event))
        return fresh

    async def _trigger(self, fresh: list[Event], key: str, turn_id: str, company: Any) -> tuple[Event, list[Event]]:
        """One trigger and the constituents it stands for (seed 000, "The digest trigger")."""
        if len(fresh) == 1:
            return fresh[0], fresh
        try:
            merged = coalesce(fresh)
        except CoalesceError as exc:
            log.warning("partition_merge_failed", extra={"seat": self.handle, "partition_key": key, "error": str(exc)})
            # The tail FIRST: a requeue that fails raises (NAK) before any turn ran, so a
            # completed turn is never replayed by a later event's failure.
            for event in fresh[1:]:
                await self.queue.publish(self.inbox, event)
            return fresh[0], fresh[:1]
        self._record_later(coalesced_event(merged, fresh, turn_id))
        return merged, fresh

    async def _settle(self, request: TurnRequest, result: Any) -> Outcome:
        """The outcome a turn's result earns, recorded first where it was worked or abandoned."""
        outcome = getattr(result, "outcome", "failed")
        self.turns_run += 1
        log.info("seat_turn_ended", extra={"seat": self.handle, "turn_id": request.turn_id, "outcome": outcome,
                                            "duration_ms": getattr(result, "duration_ms", 0),
                                            "tools_used": ",".join(getattr(result, "tools_used", None) or [])})
        self.last_turn = {"turn_id": request.turn_id, "outcome": outcome, "finished_at": _now_iso(),
                          "trigger_id": str(request.trigger.id),
                          "trigger_ids": [str(e.id) for e in request.constituents],
                          "duration_ms": getattr(result, "duration_ms", 0)}
        if outcome in ("completed", "stopped"):
            self.provider_down = False
            if outcome == "completed":
                answered = await self._answer_ask(request, result)
                if answered is not None:
                    return answered
            # The ack does not wait for the ledger record: the record covers an ack that never
            # lands, and a store slow to answer (a member electing a leader) would hold the ack
            # for the whole retry while a node that died meanwhile hands the mail to a second turn.
            recording = self._recording.pop(request.turn_id, None)
            self._beside(recording[0] if recording is not None
                         else self._record_worked(request, getattr(result, "shown_waiting", ())))
            return Outcome.ACK
        error = getattr(result, "error", "") or outcome
        self.last_error = {"turn_id": request.turn_id, "at": _now_iso(), "outcome": outcome, "error": error}
        if outcome == "budget_exhausted":  # parked: it runs again when the window has room
            refusal = getattr(result, "refusal", None)
            if refusal is None and self.budgets is not None:
                with contextlib.suppress(CoordError):
                    refusal = await self.budgets.check(request.company, request.seat)
            if refusal is not None:
                await self.park.park(refusal)
            return Outcome.DEFER
        if outcome == "interrupted":  # the seat is another node's now: the mail goes back to it
            log.warning("seat_turn_interrupted", extra={"seat": self.handle, "turn_id": request.turn_id})
            return Outcome.DEFER
        if outcome == "llm_unavailable":
            self.provider_down = True
        if getattr(result, "redelivered", False):
            log.warning("seat_turn_not_completed", extra={"seat": self.handle, "turn_id": request.turn_id,
                                                           "outcome": outcome, "error": error})
            return Outcome.NAK
        why = ("guard" if getattr(result, "guard", "") else "refusal" if getattr(result, "model_refused", False)
               else "provider" if outcome == "llm_unavailable" else "failed")
        return await self._abandon(request, ABANDONED[why], error)

    async def _answer_ask(self, request: TurnRequest, result: Any) -> Outcome | None:
        """A completed turn woken by an ask (`a2a_request`, never merged with other mail) answers it
        with its final response (seed 000, "Ephemeral A2A channels"), before the trigger is
        recorded worked, so a redelivery finds either no record (and answers) or the answer sent.
        The turn engine began the answer as soon as the final response was known (the result's
        `answering`); a turn runner that did not is answered here.
        The answer's history records (a2a_message_sent, a2a_channel_closed) finish beside the
        ledger write rather than before it: a crash between the close and their ack loses them
        either way (a redelivery after the close sends the wake again, never the records).
        None to go on recording; DEFER, unrecorded, when this node no longer holds the seat (the
        holder answers the redelivery) or the broker or store failed."""
        if request.trigger.type != A2A_REQUEST:
            return None
        answering = getattr(result, "answering", None)
        try:
            done = await (answering if answering is not None else self._answer(request, getattr(result, "response", "") or ""))
        except (QueueError, CoordError) as exc:
            return self._store_down(exc)
        if done == a2a.NOT_AUTHORISED:
            log.warning("a2a_answer_not_authorised", extra={"seat": self.handle, "turn_id": request.turn_id})
            return Outcome.DEFER
        return None

    async def _answer(self, request: TurnRequest, response: str) -> str:
        """Answer the ask `request` was woken by with `response`, as this seat, on its lease."""
        return await a2a.answer(self.node, request=request.trigger, response=response, answered_by=self.handle,
                                turn_id=request.turn_id, authorised=self._holds_seat, beside=self._beside)

    def _holds_seat(self) -> bool:
        return self.lease is None or self.lease.is_exclusive(self.clock())

    async def _record_worked(self, request: TurnRequest, answered: Any = ()) -> None:
        """Every constituent worked by this turn, and each waiting message of its thread it was
        shown and answered. The ACK is what settles the mail, the ledger covers an ACK that never
        lands (`_ledger_write` asks again while the client fails over)."""
        await self._ledger_write(request, _worked_entries(request, answered))

    def _record_beside(self, request: TurnRequest, result: TurnResult) -> None:
        """The turn's end record is on its way (it completed or was stopped): its triggers are
        recorded worked beside it, not after its ack, so a node that dies in between -- the
        record landed, the ledger not, and the mail comes round again to be worked a second
        time -- has no gap of a store round trip to die in. `_settle` waits for it; `_withdraw`
        takes it back when the end record does not land and the mail runs again."""
        entries = _worked_entries(request, result.shown_waiting)
        self._recording[request.turn_id] = (asyncio.ensure_future(self._ledger_write(request, entries)), entries)

    async def _withdraw(self, request: TurnRequest) -> None:
        """The turn raised or was cancelled after its ledger record was begun beside its end
        record: delete what it wrote, so the mail's next delivery runs the turn rather than
        finding it worked. One the store does not delete is logged: that trigger stands worked."""
        recording = self._recording.pop(request.turn_id, None)
        if recording is None:
            return
        writing, entries = recording
        await writing
        for trigger_id, _ in entries:
            try:
                await self.ledger.withdraw(self.handle, trigger_id, request.turn_id)
            except CoordError as exc:
                log.error("ledger_record_not_withdrawn", extra={"seat": self.handle, "trigger_id": trigger_id,
                                                                 "turn_id": request.turn_id, "error": str(exc)})

    async def _abandon(self, request: TurnRequest, reason: str, detail: str) -> Outcome:
        """Record the turn's triggers as abandoned (ledger, turn_trigger_skipped) and ACK them."""
        log.warning("turn_trigger_abandoned", extra={"seat": self.handle, "turn_id": request.turn_id,
                                                      "reason": reason, "error": detail})
        await self._ledger_write(request, [(str(e.id), "abandoned") for e in request.constituents])
        for event in request.constituents:
            self._record_later(self._event(TurnTriggerSkipped(
                **self._seat_fields(), turn_id=request.turn_id, conversation_key=_identity(event),
                trigger_id=str(event.id), trigger_type=event.type, reason=reason, detail=detail[:500],
                abandoned=True, worked_by_turn_id=request.turn_id), event))
        return Outcome.ACK

    async def _ledger_write(self, request: TurnRequest, entries: list[tuple[str, str]]) -> None:
        """The ledger is what keeps a redelivery from being a second turn when the ACK never
        lands -- and the ACK is lost in the same outage that silences the ledger (a broker member
        gone under the connection) -- so a write the store did not answer is asked again while
        the client fails over, for up to LEDGER_RETRY_SECONDS. One that still fails is logged,
        not fatal: the ACK may yet land."""
        results = await asyncio.gather(*(self._ledger_record(request, trigger_id, why) for trigger_id, why in entries),
                                       return_exceptions=True)
        for (trigger_id, _), result in zip(entries, results, strict=True):
            if isinstance(result, Exception):
                log.error("ledger_record_failed", extra={"seat": self.handle, "trigger_id": trigger_id,
                                                          "turn_id": request.turn_id, "error": str(result)})

    async def _ledger_record(self, request: TurnRequest, trigger_id: str, why: str) -> None:
        deadline = time.monotonic() + LEDGER_RETRY_SECONDS
        while True:
            try:
                await self.ledger.mark_worked(self.handle, trigger_id, request.turn_id, reason=why)
                return
            except Unavailable:
                if time.monotonic() + STORE_RETRY_SECONDS > deadline:
                    raise
                await asyncio.sleep(STORE_RETRY_SECONDS)

    async def _failed(self, request: TurnRequest, exc: Exception) -> Outcome:
        """A turn that raised: `turn.guard_breach` (it died in its own frames), the seat's last
        error, and the trigger abandoned -- run again, it would raise again at the model's cost."""
        detail = f"{type(exc).__name__}: {exc}"[:500]
        log.exception("seat_turn_raised", extra={"seat": self.handle, "turn_id": request.turn_id})
        self.last_error = {"turn_id": request.turn_id, "at": _now_iso(), "outcome": "failed", "error": detail}
        self.last_turn = {"turn_id": request.turn_id, "outcome": "failed", "finished_at": _now_iso(),
                          "trigger_id": str(request.trigger.id),
                          "trigger_ids": [str(e.id) for e in request.constituents], "duration_ms": 0}
        await self._publish(self._event(TurnGuardBreach(
            **self._seat_fields(), turn_id=request.turn_id, conversation_key=_identity(request.trigger),
            guard="turn_error", detail=detail), request.trigger))
        return await self._abandon(request, ABANDONED["raised"], detail)

    def _broker_down(self, request: TurnRequest, exc: Exception) -> Outcome:
        """A turn that raised because the node's own broker did not take one of its events (a
        member gone under the connection, a publish unacknowledged while the client fails over):
        nothing is recorded and the mail is NAKed, so it runs again once the broker answers, with
        the NAK's spacing -- the failure is the node's infrastructure, not the message's, and
        abandoning it would drop acknowledged mail. A turn's own error is still abandoned."""
        detail = f"{type(exc).__name__}: {exc}"[:500]
        log.warning("seat_turn_broker_unavailable", extra={"seat": self.handle, "turn_id": request.turn_id,
                                                           "trigger_ids": ",".join(str(e.id) for e in request.constituents),
                                                           "error": detail})
        self.last_error = {"turn_id": request.turn_id, "at": _now_iso(), "outcome": "failed", "error": detail}
        return Outcome.NAK

    def _fence(self) -> bool:
        """Whether this node may still act for the seat: its lease held and proven exclusive."""
        return self.lease is None or self.lease.is_exclusive(self.clock())

    def _stop_requested(self) -> dict | None:
        """Who stopped the running turn (a pause with stop_running), or None to carry on."""
        pause = self.pause
        if pause is None or not pause.stop_running:
            return None
        return {"stopped_by": pause.paused_by, "stopped_by_seat": pause.paused_by_seat, "reason": pause.reason}

    def _store_down(self, exc: Exception) -> Outcome:
        """The coordination store did not answer: DEFER (the mail keeps its place at the head;
        what failed is the node's store, not the message) and fetch again a moment later -- a
        moment that doubles with each failure in a row, since every DEFER costs the mail one of
        its 25 deliveries: an outage of minutes, not seconds, is what dead-letters it."""
        self._store_failures += 1
        delay = min(STORE_RETRY_SECONDS * 2 ** (self._store_failures - 1), STORE_RETRY_MAX_SECONDS)
        log.warning("seat_store_unavailable", extra={"seat": self.handle, "error": str(exc), "retry_seconds": delay})
        self._fetch_when_servable(delay)
        return Outcome.DEFER

    def _fetch_when_servable(self, after: float) -> None:
        """Undo the quiesce a DEFER of this host's own left behind (seed 000, DEFER: "the
        subscription quiesces itself"), `after` seconds from now and once the seat is servable
        again: hosted, its lease exclusive, the seat in the company. Nothing else lifts that
        quiesce (a hold's lift does, while the lease is exclusive, and asks for this otherwise),
        so without it a renewal that lands late would leave the seat held and its mail unread
        for good."""
        if self._retry_task is None or self._retry_task.done():
            self._retry_task = asyncio.create_task(self._fetch_again(after), name=f"refetch:{self.handle}")

    async def _fetch_again(self, after: float) -> None:
        await asyncio.sleep(after)
        while not self.stopping and not self._servable():
            await asyncio.sleep(EXCLUSIVE_RECHECK_SECONDS)
        if not self.stopping and not self.holds and self.queue.is_attached(self.inbox, self.group):
            await self.queue.unquiesce(self.inbox, self.group)

    def _servable(self) -> bool:
        company = self.node.company
        seat = company.seat_by_handle(self.handle) if company is not None else None
        return self._may_fetch() and seat is not None and seat.is_agent

    # -- holds -----------------------------------------------------------------------------
    @property
    def holds(self) -> frozenset[str]:
        return self.inbox_holds.names

    def _may_fetch(self) -> bool:
        return not self.stopping and (self.lease is None or self.lease.is_exclusive(self.clock()))

    # -- control ---------------------------------------------------------------------------
    async def _on_control(self, delivery: Delivery) -> Outcome:
        log.info("seat_control_received", extra={"seat": self.handle, "type": delivery.event.type,
                                                 "event_id": str(delivery.event.id)})
        return Outcome.ACK

    # -- what the API reads ----------------------------------------------------------------
    @property
    def state(self) -> str:
        """idle, working, paused, parked, held or stopped (the provider is unreachable)."""
        holds = self.holds
        if self.running is not None:
            return "working"
        if self.pause is not None or HOLD_PAUSED in holds:
            return "paused"
        if self.park.refusal is not None or HOLD_BUDGET in holds:
            return "parked"
        if holds:
            return "held"
        if self.provider_down:
            return "stopped"
        return "idle"

    def describe(self) -> dict:
        """What GET /seats shows of this seat from the node holding it."""
        return {
            "state": self.state,
            "holds": sorted(self.holds),
            "running": self.running,
            "last_turn": self.last_turn,
            "last_error": self.last_error,
            "turns_run": self.turns_run,
            "parked": self.park.describe(),
        }

    # -- events ----------------------------------------------------------------------------
    def _seat_fields(self) -> dict:
        company = self.node.company
        seat = company.seat_by_handle(self.handle) if company is not None else None
        return {"agent_id": str(company.agent_id_for(self.handle)) if company is not None else "",
                "agent_handle": self.handle, "agent_role": (getattr(seat, "role", "") or "")}

    def _event(self, data: EventData, under: Event) -> Event:
        """An event about this seat, traced as a child of the event it is about."""
        parent = event_trace(under)
        trace = TraceContext(parent.trace_id, new_span_id(), parent.span_id) if parent else trace_of()
        return new(data, trace, source="engine")

    def _record_later(self, event: Event) -> None:
        """Publish telemetry beside the dispatch rather than before it: the turn does not wait on
        the broker's ack of its own record (the drain waits for what is still in flight)."""
        self._beside(self._publish(event))

    def _beside(self, work: Awaitable[Any]) -> None:
        """Let `work` (records that never raise) finish beside the dispatch; the drain waits for it."""
        task = asyncio.ensure_future(work)
        self._telemetry.add(task)
        task.add_done_callback(self._telemetry.discard)

    async def _publish(self, event: Event) -> None:
        """Record an event on `crewlet.events.{type}`; a failure is logged, never raised."""
        try:
            await self.queue.publish(topics.event_subject(event.type), event)
        except Exception as exc:
            log.warning("event_publish_failed", extra={"type": event.type, "seat": self.handle, "error": str(exc)})


def _worked_entries(request: TurnRequest, answered: Any) -> list[tuple[str, str]]:
    """The ledger entries of a worked turn: each constituent, and each waiting message of its
    thread it was shown and answered."""
    return [(str(e.id), "") for e in request.constituents] + [(str(i), "answered_in_thread") for i in answered or ()]


def _unique(deliveries: tuple[Delivery, ...]) -> list[Event]:
    """The partition's events in timestamp order, same-id duplicates dropped (seed 000: an
    at-least-once edge the requeue machinery itself can produce)."""
    seen: set[str] = set()
    out = []
    for delivery in deliveries:
        key = str(delivery.event.id)
        if key not in seen:
            seen.add(key)
            out.append(delivery.event)
    return out


def _identity(event: Event) -> str:
    return str(event.get("conversation_identity") or "")


def _has_provider(company: Any) -> bool:
    return company is not None and bool(company.providers.llm)
