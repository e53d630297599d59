"""The turn engine: one seat working one trigger through a tool loop (seed 000, "Event Types":
agent_turn_started, agent_phase_started, prompt.size, agent_turn_progress,
agent_phase_completed, agent_turn_completed, agent_turn_stopped, turn.guard_breach,
budget_exhausted, llm_unavailable, provider_fallback; "Distributed Tracing"; seed 002, "Token
Budgets" and "the turn loop re-checks the seat fence at the top of every round and again
before each of that round's tool calls"; DESIGN.md, deliberate difference 4).

A turn is one phase (`respond`) of rounds. Each round is a call down the fallback chain with
the seat's tools (`seats.tools`): when the model asks for tools, they run (in parallel when it
asked for several), their results join the conversation and the next round begins; a reply cut
at `max_tokens` earns a continuation round; anything else ends the phase. The conversation
opens with what the seat did earlier on the same conversation (`seats.memory`).

At the top of every round, in order: the seat's lease (the fence: lost, the turn ends
`interrupted` and its mail goes back to the seat's new owner; asked once more after the last
round, so a lease lost while it ran is no completed turn), a person's stop, the guards
(`seats.guards`), the budget. After every round the tokens are charged: before its tools run
and before anything else happens when a window of the seat or the company is capped; a round that
asked for no tool, with nothing capped, is charged while its phase's record goes out (no verdict
can come of it; a store that did not answer still fails the turn before its memory and its
completed record). What it publishes:

    agent_turn_started      before the prompt is built, so a turn that died building it left a row
    agent_phase_started     the phase opening, naming the first provider of the chain
    prompt.size             the opening prompt's bytes: system, user, earlier turns, tool definitions
    agent_turn_progress     live only, per round: `calling`, `answered` (text, tool names), `tools`
    provider_fallback       per failed provider call (from the chain, in that call's llm.round span)
    agent_turn_stopped      when stop_requested() turned true before a round
    turn.guard_breach       when a guard fired (the turn ends failed)
    budget_exhausted        when the budget refused a round (before it, or by its charge)
    llm_unavailable         when the chain is exhausted (from the chain)
    agent_phase_completed   the phase's record: prompts, response, rounds[] (each with its text),
                            tool_calls[] (arguments, result clipped, duration, error)
    agent_turn_completed    tokens, duration, outcome, tools_used; `failed` or `stopped`; also
                            when the host cancels a running turn (`interrupted`, error_kind
                            `released`), so every turn that started has an end

The three opening records are published one after another while the conversation's memory is
read, their acks awaited together before the first round (three broker round trips and a
store read cost about one). The live signals are flushed once sent (the phase's record, sent
after them, reaches the broker after them), the phase's record is acknowledged before the
turn's end is published (so a lost one ends the turn unrecorded), and the conversation's
memory is written while the turn's end goes out; the turn returns once both have landed.

The turn's span (`agent.turn`) is a child of the trigger's span, restored from the trigger's
envelope, and every event carries trace_of() of the span that emitted it. A provider failure, a
tool failure and a guard are outcomes; an exception raised by the turn's own code propagates
(the host abandons the turn), as do `Unavailable` from the budget store (the host defers) and
`queue.Unreachable` from a publish the node's broker did not take (the host NAKs).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable, Protocol

from engine.config.company import Company, Seat
from events import tracing
from events.envelope import Event, EventData, new
from events.types.shapes import clip
from events.types.system import (
    AgentPhaseCompleted,
    AgentPhaseStarted,
    AgentTurnCompleted,
    AgentTurnStarted,
    AgentTurnStopped,
    BudgetExhausted,
    PromptSize,
    TurnGuardBreach,
)
from events.types.wakes import AgentTurnProgress
from seats.budgets import Budgets, Refusal, capped
from seats.guards import Breach, Guards
from seats.memory import ConversationMemory, TurnMemory
from seats.prompts import prompt_size, system_text, user_text
from seats.providers.base import Completion, assistant_message, system_message, tool_message, user_message
from seats.providers.chain import ChainEmpty, ChainExhausted, ProviderChain, members_for
from seats.providers.clients import SDK_MODULES, ClientFactory, Clients, load_sdks
from seats.tools.builtins import Asker, BuiltinContext, builtins_for
from seats.tools.remote import RemoteTool
from seats.tools.toolbox import Toolbox

__all__ = ["CompletedWhileCancelled", "TurnEngine", "TurnRequest", "TurnResult", "system_text", "user_text"]

log = logging.getLogger("seats.turn")

PHASE = "respond"
MAX_TOKENS = 4096  # per round: a reply longer than this continues in the next round
MAX_ROUNDS = 4     # continuation rounds in a row before a cut reply stands as it is
CONTINUE = "Continue exactly where your reply stopped."
# How long a round's `answered` signal waits for the tools it announces: a fast round of tools
# is not slowed by a publish of its own announcement (it follows them at once), and a slow one
# is announced while it runs. 20 ms is below what a person watching the live view can tell.
ANNOUNCE_HOLD_SECONDS = 0.02
FAILED_OUTCOMES = frozenset({"budget_exhausted", "llm_unavailable", "failed", "interrupted"})
# The error_kind of an `interrupted` end: the lease's fence stopped the turn at a round, the host
# let a running turn go (cancelled), or the node's next boot found it never ended.
INTERRUPTED_FENCE, INTERRUPTED_RELEASED, INTERRUPTED_NODE_STOPPED = "fence", "released", "node_stopped"
# How long a cancelled turn waits to publish its end: short, because a cut drain bounds each of
# its steps at a second (engine.node.process) and a broker that is gone never answers.
INTERRUPTED_PUBLISH_SECONDS = 0.5
OUTCOMES = ("completed", "stopped", "budget_exhausted", "llm_unavailable", "failed", "interrupted")


class ToolSource(Protocol):
    """Where a turn's server tools come from (the node's `seats.tools.servers.ToolServers`)."""

    def tools_for(self, company: Company, seat: Seat) -> list[RemoteTool]: ...


@dataclass
class TurnRequest:
    """One turn to run. `stop_requested` is checked before each round; it may return any truthy
    value, and one carrying `stopped_by`, `stopped_by_seat` or `reason` (attributes or keys)
    names who stopped the turn on its agent_turn_stopped. `fence` says whether this node still
    holds the seat's lease, proven exclusive: it is asked at the top of every round, before each
    tool call, and once more after the last round, before the turn's record is published. `answer`
    (a turn woken by an ask) sends the final response back: the engine starts it as soon as the
    last round completed with the lease held, beside the phase's and the turn's records rather
    than after them, and hands its task back as the result's `answering` (seed 000, "Ephemeral A2A
    channels": the answering turn's final response is the reply). `ending` is told the result as
    the turn's end record goes out, when it completed or was stopped: the host records the
    trigger worked beside that record rather than after its ack."""

    seat: Seat
    company: Company
    trigger: Event
    constituents: list[Event]
    turn_id: str
    stop_requested: Callable[[], Any] = lambda: False
    fence: Callable[[], bool] = lambda: True
    answer: Callable[[str], Awaitable[Any]] | None = None
    ending: Callable[["TurnResult"], None] | None = None


@dataclass(frozen=True)
class RoundTiming:
    """Where one round's time went, in seconds: the model, the tools, and the rest (the engine)."""

    round_s: float
    provider_s: float
    tools_s: float

    @property
    def engine_s(self) -> float:
        return max(0.0, self.round_s - self.provider_s - self.tools_s)


@dataclass
class TurnResult:
    """What became of a turn. `refusal` is the budget's Refusal when outcome is budget_exhausted;
    `transient` says an llm_unavailable chain failed only for passing reasons (worth a retry);
    `shown_waiting` are the waiting messages of the conversation the turn was shown and, having
    completed, answered; `guard` names the guard that ended it."""

    outcome: str
    turn_id: str
    rounds: int
    tokens_in: int
    tokens_out: int
    duration_ms: int
    response: str = ""
    error: str = ""
    refusal: Any = None
    error_kind: str = ""
    provider_key: str = ""
    tools_used: list[str] = field(default_factory=list)
    shown_waiting: list[str] = field(default_factory=list)
    transient: bool = False
    guard: str = ""
    model_refused: bool = False
    timings: list[RoundTiming] = field(default_factory=list)
    answering: asyncio.Future | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in FAILED_OUTCOMES

    @property
    def redelivered(self) -> bool:
        """Whether the trigger is worth running again later (the only NAK a turn earns)."""
        return self.outcome == "llm_unavailable" and self.transient


class TurnEngine:
    """Runs turns for the seats this node hosts; `publish` puts an event on crewlet.events.{type}.
    `tools` gives a seat's server tools, `memory` its conversations, `asker` the A2A door that
    `a2a_ask` sends through (none: the built-in is not offered)."""

    def __init__(self, *, node_id: str, publish: Callable[[Event], Awaitable[None]],
                 budgets: Budgets | None = None, clock: Callable[[], float] = time.time,
                 http_client_factory: ClientFactory | None = None, tools: ToolSource | None = None,
                 memory: ConversationMemory | None = None, asker: Asker | None = None,
                 max_tokens: int = MAX_TOKENS, max_rounds: int = MAX_ROUNDS) -> None:
        self.node_id = node_id
        self.publish = publish
        self.budgets = budgets
        self.clock = clock
        self.clients = Clients(http_client_factory)
        self.tools = tools
        self.memory = memory
        self.asker = asker
        self.max_tokens = max_tokens
        self.max_rounds = max_rounds

    async def run(self, request: TurnRequest) -> TurnResult:
        """Run one turn under the trigger's trace; its outcome, never a provider's or a tool's
        exception. ChainEmpty when the company has no provider (the host holds the inbox)."""
        if not request.company.providers.llm:
            raise ChainEmpty()
        # what this company's turns import, off the loop the first time (seats/tools/remote.py)
        await load_sdks([SDK_MODULES[p.kind] for p in request.company.providers.llm if p.kind in SDK_MODULES]
                        + ["jsonschema"])
        parent = tracing.event_trace(request.trigger)
        with tracing.span(tracing.AGENT_TURN, parent=parent, turn_id=request.turn_id,
                          agent=request.seat.handle, node=self.node_id):
            return await _Turn(self, request).run()

    async def close(self) -> None:
        """Close the SDK clients the turns shared."""
        await self.clients.aclose()


@dataclass
class _Phase:
    """The running phase's record, as agent_phase_completed will carry it."""

    rounds: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read: int = 0
    cache_write: int = 0
    stop_reason: str = ""
    model: str = ""
    provider_key: str = ""
    outcome: str = "completed"
    error: str = ""
    error_kind: str = ""
    transient: bool = False
    guard: str = ""
    refusal: Refusal | None = None
    model_refusal: dict[str, Any] | None = None
    timings: list[RoundTiming] = field(default_factory=list)
    tools_used: list[str] = field(default_factory=list)

    def end(self, outcome: str, error: str = "", error_kind: str = "") -> None:
        self.outcome, self.error, self.error_kind = outcome, error, error_kind

    def add(self, done: Completion, provider_key: str) -> None:
        self.tokens_in += done.tokens_in
        self.tokens_out += done.tokens_out
        self.cache_read += done.cache_read_tokens
        self.cache_write += done.cache_write_tokens
        self.stop_reason, self.model, self.provider_key = done.stop_reason, done.model, provider_key


class CompletedWhileCancelled(asyncio.CancelledError):
    """The turn was cancelled after its completed record went out: it is a completed turn, whose
    result the host settles (ledger, ack) before the cancel goes on."""

    def __init__(self, result: TurnResult) -> None:
        super().__init__("cancelled after the turn completed")
        self.result = result


class _OutOfTime(Exception):
    """The scheduled timeout ran out during a model call or a round of tools."""


class _Turn:
    """One run of the engine: the request, its event tags, its clock, its pending live signals."""

    def __init__(self, engine: TurnEngine, request: TurnRequest) -> None:
        self.engine = engine
        self.request = request
        seat, company, trigger = request.seat, request.company, request.trigger
        self.tags = {
            "agent_id": str(company.agent_id_for(seat.handle)),
            "agent_handle": seat.handle,
            "agent_role": seat.role or "",
            "turn_id": request.turn_id,
            "conversation_key": conversation_key_of(trigger),
        }
        self.trigger_fields = {
            "trigger_id": str(trigger.id),
            "trigger_type": trigger.type,
            "trigger_ids": [str(e.id) for e in (request.constituents or [trigger])],
        }
        self._live: dict[asyncio.Task, asyncio.Event] = {}  # live signals in flight: each set once it is sent
        self._unacked: list[asyncio.Future] = []  # records published by `_send`, their acks not yet awaited
        self._charging: asyncio.Future | None = None  # a round's charge that cannot refuse, still landing
        self.answering: asyncio.Future | None = None  # the request's `answer`, once begun
        self.ending: asyncio.Future | None = None  # the publish of agent_turn_completed, once begun
        self.remembering: asyncio.Future | None = None  # the conversation memory's write, begun beside it
        self.ended: TurnResult | None = None

    # -- events ------------------------------------------------------------------------------
    async def emit(self, data: EventData) -> None:
        """Publish `data` stamped with the turn's tags, under the span that is current now."""
        await self.engine.publish(self._event(data))

    def _send(self, data: EventData) -> None:
        """Publish `data` as `emit` does, without waiting for the broker's ack here: records sent
        one after another reach the broker in that order (each publish is started in turn and
        hands its message to the connection before it waits), and `_acked` waits for them."""
        task = asyncio.ensure_future(self.engine.publish(self._event(data)))
        task.add_done_callback(_retrieved)
        self._unacked.append(task)

    async def _charged(self) -> None:
        """Wait for a round's charge left to land beside the phase's end; a store that did not
        answer raises here (the host defers the mail), as an awaited charge would."""
        charging, self._charging = self._charging, None
        if charging is not None:
            await charging

    async def _acked(self) -> None:
        """Wait for the broker's ack of every record `_send` published; the first that failed
        raises once all are settled."""
        sent, self._unacked = self._unacked, []
        for outcome in await asyncio.gather(*sent, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    def _event(self, data: EventData) -> Event:
        stamped = data.model_copy(update=self.tags)
        trigger = self.request.trigger
        return new(stamped, tracing.trace_of(), source="engine", delegation_depth=trigger.delegation_depth,
                   delegation_chain=trigger.delegation_chain, parent_turn_id=trigger.parent_turn_id)

    def progress(self, number: int, stage: str, *, hold: asyncio.Event | None = None, **fields: Any) -> None:
        """agent_turn_progress, published beside the round rather than before it: a live-only
        signal is not worth a broker round trip in every round (flushed before the phase ends).
        With `hold`, it waits for that (or ANNOUNCE_HOLD_SECONDS) before it is sent."""
        event = self._event(AgentTurnProgress(phase=PHASE, iteration=1, round=number, stage=stage, **fields))
        handed = asyncio.Event()

        async def send() -> None:
            try:
                if hold is not None:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(hold.wait(), ANNOUNCE_HOLD_SECONDS)
            finally:
                handed.set()  # the publish below hands the signal to the connection before it waits
            try:
                await self.engine.publish(event)
            except Exception as exc:
                log.warning("turn_progress_publish_failed", extra={"turn_id": self.request.turn_id, "error": str(exc)})

        task = asyncio.ensure_future(send())
        self._live[task] = handed
        task.add_done_callback(lambda done: self._live.pop(done, None))

    async def _flush(self) -> None:
        """Wait until every live signal is on its way: sent before the phase's record, it reaches
        the broker first (one connection, in order), so its ack is not waited for here."""
        for handed in list(self._live.values()):
            await handed.wait()

    def _ms_since(self, start: float) -> int:
        return max(0, int(round((self.engine.clock() - start) * 1000)))

    # -- the turn ----------------------------------------------------------------------------
    async def run(self) -> TurnResult:
        started = self.engine.clock()
        try:
            return await self._run(started)
        except asyncio.CancelledError:
            if self.ended is not None:
                # cancelled while its completed record was being published: that record stands
                # (the broker has it, or is taking it), so the turn is over and completed; the
                # cancel goes on, carrying the result for the host to settle -- never recorded
                # interrupted beside it, never run again
                assert self.ending is not None and self.remembering is not None
                await asyncio.wait({self.ending, self.remembering}, timeout=INTERRUPTED_PUBLISH_SECONDS)
                if self.ending.done() and not self.ending.cancelled() and self.ending.exception() is None:
                    raise CompletedWhileCancelled(self.ended) from None
            await self._close_cancelled(started)
            raise

    async def _close_cancelled(self, started: float) -> None:
        """The host let the turn go mid-way (its seat released, a cut drain): record its end as
        `interrupted`, so no screen shows the seat working on it. Bounded, and best effort: on a
        broker that is gone the publish fails, and the node's next boot closes the turn from its
        store instead (seats.interrupted)."""
        event = self._event(AgentTurnCompleted(
            **self.trigger_fields, outcome="interrupted", failed=True, error_kind=INTERRUPTED_RELEASED,
            error="this node let the seat go while the turn ran (a lost lease or a cut drain); "
                  "its trigger runs again where the seat is held",
            duration_ms=self._ms_since(started)))
        try:
            await asyncio.wait_for(self.engine.publish(event), INTERRUPTED_PUBLISH_SECONDS)
        except (Exception, asyncio.CancelledError) as exc:
            log.warning("turn_interrupted_unrecorded", extra={"turn_id": self.request.turn_id, "error": str(exc)})

    async def _run(self, started: float) -> TurnResult:
        req = self.request
        # The opening records go out while the memory is read, and are acknowledged together
        # before the first round: a broker that did not take one fails the turn before the model
        # is paid, as a record awaited on its own would.
        self._send(AgentTurnStarted(**self.trigger_fields))
        guards = Guards(req.company, req.seat, req.trigger)
        memory = TurnMemory(self.engine.memory, req.seat.handle, req.trigger, req.company.turns.memory_tokens,
                            constituents=req.constituents)
        recollection = await memory.recall()
        system, asked = system_text(req.company, req.seat), user_text(req.trigger)
        user = "\n\n".join(p for p in (asked, recollection.waiting_block()) if p)
        history = recollection.messages()
        toolbox = self._toolbox()
        chain = ProviderChain(members_for(req.company, variables=self._variables(), clients=self.engine.clients),
                              emit=self.emit, phase=PHASE, iteration=1)
        first = chain.members[0]
        phase_started = self.engine.clock()
        # agent.turn.<phase>: the phase's rounds and its record hang under it (seed 002, "How Traces Flow").
        with tracing.span(tracing.turn_phase(PHASE), phase=PHASE, agent=req.seat.handle):
            self._send(AgentPhaseStarted(phase=PHASE, iteration=1, model=first.model, provider_key=first.key))
            self._send(PromptSize(phase=PHASE, iteration=1, **prompt_size(system, user, history, toolbox.specs)))
            await self._acked()
            phase = _Phase()
            breach = guards.at_start()
            if breach is not None:
                await self._breach(phase, breach)
            else:
                messages = [system_message(system), *history, user_message(user)]
                await self._rounds(phase, chain, messages, toolbox, guards)
            if phase.outcome == "completed" and not req.fence():
                # the lease went while the last round ran: a completed record now would be a second
                # turn beside the new holder's, so it stands interrupted and the mail goes back
                phase.end("interrupted", "this node lost the seat's lease while the turn's last round ran; the seat's "
                                         "new owner runs the trigger", "fence")
            response = "".join(phase.texts)
            if phase.outcome == "completed" and req.answer is not None:
                # The answer is the final response, known now: it goes out while the turn's own
                # records do. The host awaits it before the trigger is recorded worked; a turn that
                # then fails to record its end is run again, and its answer goes again under the
                # same ids, which the broker and the asker's ledger collapse (a2a.service.answer).
                self.answering = asyncio.ensure_future(req.answer(response))
                self.answering.add_done_callback(_retrieved)
            await self._flush()
            failed = phase.outcome in FAILED_OUTCOMES
            self._send(AgentPhaseCompleted(
                phase=PHASE, iteration=1, model=phase.model, provider_key=phase.provider_key,
                system_prompt=system, user_prompt=user, response=response, rounds=phase.rounds,
                tool_calls=phase.tool_calls, stop_reason=phase.stop_reason, tokens_in=phase.tokens_in,
                tokens_out=phase.tokens_out, cache_read_tokens=phase.cache_read, cache_write_tokens=phase.cache_write,
                duration_ms=self._ms_since(phase_started), failed=failed, error=phase.error,
                error_kind=phase.error_kind, refusal=phase.model_refusal))
            await self._charged()
            await self._acked()
        result = TurnResult(
            outcome=phase.outcome, turn_id=req.turn_id, rounds=len(phase.rounds), tokens_in=phase.tokens_in,
            tokens_out=phase.tokens_out, duration_ms=0, response=response, error=phase.error,
            refusal=phase.refusal, error_kind=phase.error_kind, provider_key=phase.provider_key,
            tools_used=phase.tools_used, transient=phase.transient, guard=phase.guard,
            model_refused=phase.model_refusal is not None, timings=phase.timings,
            shown_waiting=[w.id for w in recollection.waiting] if phase.outcome == "completed" else [],
            answering=self.answering)
        # The memory is written while the turn's end goes out, and both have landed before the
        # turn returns (its mail is acked after, and the conversation's next turn reads it then).
        self.remembering = asyncio.ensure_future(memory.record(
            turn_id=req.turn_id, outcome=result.outcome, redelivered=result.redelivered, asked=asked,
            answer=response or (f"(the turn ended {result.outcome}: {result.error})" if result.error else ""),
            tool_calls=phase.tool_calls, answered=result.shown_waiting))
        self.remembering.add_done_callback(_retrieved)
        result.duration_ms = self._ms_since(started)
        # The turn's end, once on its way, is the turn's: a cancel that lands while the broker
        # takes it cannot make it an interrupted turn too (`run` returns it for the host to settle).
        self.ending = asyncio.ensure_future(self.emit(AgentTurnCompleted(
            **self.trigger_fields, iterations=len(phase.rounds), tools_used=phase.tools_used, response=response,
            outcome=phase.outcome, failed=failed, stopped=phase.outcome == "stopped", error=phase.error,
            error_kind=phase.error_kind, tokens_in=phase.tokens_in, tokens_out=phase.tokens_out,
            cache_read_tokens=phase.cache_read, cache_write_tokens=phase.cache_write,
            duration_ms=result.duration_ms)))
        if req.ending is not None and result.outcome in ("completed", "stopped"):
            req.ending(result)
        self.ended = result
        await asyncio.shield(self.ending)
        try:
            await asyncio.shield(self.remembering)
        except Exception:  # the turn has ended: a memory that could not be written costs the memory, not the turn
            log.exception("conversation_memory_unwritten", extra={"seat": req.seat.handle, "turn_id": req.turn_id})
        return result

    async def _rounds(self, phase: _Phase, chain: ProviderChain, messages: list, toolbox: Toolbox,
                      guards: Guards) -> None:
        """The phase's rounds until one ends it."""
        req, engine = self.request, self.engine
        continuations = 0
        number = 0
        while True:
            number += 1
            await self._charged()  # the last round's tokens counted before this one is judged
            began = time.perf_counter()
            if not req.fence():
                phase.end("interrupted", "this node no longer holds the seat's lease; the seat's new owner "
                                         "runs the trigger", INTERRUPTED_FENCE)
                return
            stop = req.stop_requested()
            if stop:
                await self.emit(AgentTurnStopped(**_stop_fields(stop)))
                phase.stop_reason = "paused"
                phase.end("stopped")
                return
            breach = guards.before_round(number)
            if breach is not None:
                await self._breach(phase, breach)
                return
            if engine.budgets is not None and await self._refused(phase, await engine.budgets.check(req.company, req.seat)):
                return
            self.progress(number, "calling")
            round_started = engine.clock()
            called = time.perf_counter()
            try:
                answer = await _within(guards.remaining(), chain.complete(
                    messages, max_tokens=engine.max_tokens, round=number, tools=toolbox.specs))
            except ChainExhausted as exc:
                phase.end("llm_unavailable", exc.last.detail, exc.last.kind)
                phase.transient = exc.transient
                return
            except _OutOfTime:
                await self._breach(phase, guards.out_of_time(number) or _late(guards, number))
                return
            provider_s = time.perf_counter() - called
            done = answer.completion
            entry = _round(number, answer.provider_key, done, round_started, provider_s)
            phase.rounds.append(entry)
            phase.add(done, answer.provider_key)
            tokens = done.tokens_in + done.tokens_out
            if engine.budgets is not None:
                charge = engine.budgets.charge(req.company, req.seat, tokens)
                if done.tool_calls or capped(req.company, req.seat):
                    if await self._refused(phase, await charge):
                        return
                else:  # nothing capped can refuse it and no tool waits for it: it lands beside what follows
                    self._charging = asyncio.ensure_future(charge)
                    self._charging.add_done_callback(_retrieved)
            tools_ran = asyncio.Event()
            self.progress(number, "answered", hold=tools_ran if done.tool_calls else None, tokens_in=done.tokens_in,
                          tokens_out=done.tokens_out, tool=", ".join(c.name for c in done.tool_calls),
                          detail=clip(done.text, 200))
            if done.stop_reason in ("refusal", "context_exceeded"):
                tools_ran.set()
                if done.stop_reason == "refusal":
                    phase.model_refusal = {"category": "", "explanation": done.text}
                phase.end("failed", f"the model stopped: {done.stop_reason}", done.stop_reason)
                return
            if done.tool_calls:
                try:
                    ended = await self._tools(phase, entry, number, done, messages, toolbox, guards)
                finally:
                    tools_ran.set()
                phase.timings.append(RoundTiming(time.perf_counter() - began, provider_s, entry.pop("_tools_s", 0.0)))
                if ended:
                    return
                continuations = 0
                continue
            phase.texts.append(done.text)
            phase.timings.append(RoundTiming(time.perf_counter() - began, provider_s, 0.0))
            if done.stop_reason != "max_tokens":
                return
            continuations += 1
            if continuations >= engine.max_rounds:
                return  # the reply stands as it is
            messages.extend([assistant_message(done.text), user_message(CONTINUE)])

    async def _tools(self, phase: _Phase, entry: dict, number: int, done: Completion, messages: list,
                     toolbox: Toolbox, guards: Guards) -> bool:
        """Run the round's tool calls and feed their results back; whether the turn ends here."""
        breach = guards.on_calls(number, done.tool_calls)
        if breach is not None:
            await self._breach(phase, breach)
            return True
        ran = time.perf_counter()
        try:
            runs = await _within(guards.remaining(), toolbox.run_all(done.tool_calls))
        except _OutOfTime:
            await self._breach(phase, guards.out_of_time(number) or _late(guards, number))
            return True
        entry["_tools_s"] = time.perf_counter() - ran
        entry["tools_ms"] = round(entry["_tools_s"] * 1000, 3)
        entry["tool_calls"] = [run.call.id for run in runs]
        phase.tool_calls.extend(run.record(number) for run in runs)
        for run in runs:
            if run.call.name not in phase.tools_used:
                phase.tools_used.append(run.call.name)
        errors = sum(1 for run in runs if run.is_error)
        self.progress(number, "tools", tool=", ".join(r.call.name for r in runs),
                      detail=f"{len(runs)} call{'s' if len(runs) != 1 else ''}"
                             + (f", {errors} failed" if errors else ""))
        messages.append(assistant_message(done.text, done.tool_calls))
        messages.extend(tool_message(run.call, run.content, is_error=run.is_error) for run in runs)
        if any(run.fenced for run in runs):
            phase.end("interrupted", "this node lost the seat's lease before a tool call; the seat's new owner "
                                     "runs the trigger", INTERRUPTED_FENCE)
            return True
        if any(run.ends_turn for run in runs):
            phase.texts.append(done.text)  # asked, then the turn ends: its answer comes as new mail
            return True
        return False

    async def _breach(self, phase: _Phase, breach: Breach) -> None:
        """Publish turn.guard_breach and end the phase failed, naming the guard."""
        await self.emit(TurnGuardBreach(guard=breach.guard, limit=breach.limit, iteration=breach.iteration,
                                        detail=breach.detail))
        log.warning("turn_guard_breach", extra={"seat": self.request.seat.handle, "turn_id": self.request.turn_id,
                                                "guard": breach.guard, "detail": breach.detail})
        phase.guard = breach.guard
        phase.end("failed", f"{breach.guard}: {breach.detail}", breach.guard)

    async def _refused(self, phase: _Phase, refusal: Refusal | None) -> bool:
        """Publish budget_exhausted and end the phase when the budget refused; whether it did."""
        if refusal is None:
            return False
        await self.emit(BudgetExhausted(**refusal.as_fields()))
        whose = f"seat {refusal.handle}" if refusal.scope == "seat" else refusal.scope
        phase.refusal = refusal
        phase.end("budget_exhausted",
                  f"{whose} {refusal.period} budget exhausted ({refusal.spend:,} of {refusal.ceiling:,} tokens "
                  f"in {refusal.window}; resets {refusal.resets_at:%Y-%m-%d %H:%M} UTC)", "budget_exhausted")
        return True

    # -- tools and memory --------------------------------------------------------------------
    def _toolbox(self) -> Toolbox:
        req, engine = self.request, self.engine
        remote = engine.tools.tools_for(req.company, req.seat) if engine.tools is not None else []
        context = BuiltinContext(company=req.company, seat=req.seat, trigger=req.trigger,
                                 turn_id=req.turn_id, asker=engine.asker)
        return Toolbox(remote, builtins_for(engine.asker), context, fence=req.fence)

    def _variables(self) -> dict[str, str]:
        req = self.request
        return {"trigger_summary": req.trigger.summary(), "seat": req.seat.handle,
                "role": req.seat.role or "", "turn": req.turn_id}


def _retrieved(task: asyncio.Future) -> None:
    """A record's publish that failed while the turn was ending another way is not "never
    retrieved": whoever awaits it (`_acked`) raises it, and otherwise the turn's own end stands."""
    if not task.cancelled():
        task.exception()


async def _within(seconds: float | None, awaitable: Awaitable) -> Any:
    """`awaitable`'s answer, or _OutOfTime when `seconds` (None: no bound) run out first."""
    if seconds is None:
        return await awaitable
    try:
        async with asyncio.timeout(max(seconds, 0.0)):
            return await awaitable
    except TimeoutError:
        raise _OutOfTime() from None


def _late(guards: Guards, number: int) -> Breach:
    return Breach("scheduled_timeout", guards.timeout or 0, number,
                  f"a scheduled task's turn ran past {guards.timeout} s")


def conversation_key_of(trigger: Event) -> str:
    """The conversation a turn's events are tagged with: the trigger's conversation identity,
    else its partition key, else empty."""
    return str(trigger.get("conversation_identity") or trigger.get("partition_key") or "")


def _round(number: int, provider_key: str, done: Completion, started: float, seconds: float) -> dict[str, Any]:
    """One entry of rounds[]: the provider call's timing, tokens, stop_reason and text."""
    entry: dict[str, Any] = {
        "round": number, "provider_key": provider_key, "model": done.model,
        "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "duration_ms": int(round(seconds * 1000)), "tokens_in": done.tokens_in, "tokens_out": done.tokens_out,
        "text": done.text,
    }
    if done.cache_read_tokens or done.cache_write_tokens:
        entry["cache_read_tokens"], entry["cache_write_tokens"] = done.cache_read_tokens, done.cache_write_tokens
    if done.stop_reason:  # absent where the backend reported none (seed 000)
        entry["stop_reason"] = done.stop_reason
    return entry


def _stop_fields(stop: Any) -> dict[str, str]:
    """Who stopped the turn, from whatever stop_requested() returned (a bool names nobody)."""
    out: dict[str, str] = {}
    for name in ("stopped_by", "stopped_by_seat", "reason"):
        value = stop.get(name) if isinstance(stop, dict) else getattr(stop, name, None)
        if value:
            out[name] = str(value)
    return out

