"""The turn engine: one seat working one trigger (seed 000, "Event Types": agent_turn_started,
agent_phase_completed, agent_turn_completed, agent_turn_stopped, budget_exhausted,
llm_unavailable, provider_fallback; "Distributed Tracing"; seed 002, "Token Budgets";
DESIGN.md, deliberate difference 4: the turn calls a model provider, scripted or openai).

A turn is one phase (`respond`) of one or more rounds. Each round is a call down the fallback
chain; a reply cut at `max_tokens` earns a continuation round, anything else ends the phase.
Before every round the turn asks whether a person stopped it, then whether the budget has room;
after every round it charges the tokens to the budget. What it publishes, in order:

    agent_turn_started      before the prompt is built, so a turn that died building it left a row
    provider_fallback       per failed provider call (from the chain, in that call's llm.round span)
    agent_turn_stopped      when stop_requested() turned true before a round
    budget_exhausted        when the budget refused a round (before it, or by its charge)
    llm_unavailable         when the chain is exhausted (from the chain)
    agent_phase_completed   the phase's record: prompts, response, rounds[], the answering provider
    agent_turn_completed    tokens, duration, outcome; `failed` or `stopped`

The turn's span (`agent.turn`) is a child of the trigger's span, restored from the trigger's
envelope, and every event carries trace_of() of the span that emitted it. A provider failure is
an outcome; an exception raised by the turn's own code propagates (the host records
turn.guard_breach and NAKs), as does `Unavailable` from the budget store (the host defers).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

from engine.config.company import Company, Seat
from events import tracing
from events.envelope import Event, EventData, new
from events.types.system import (
    AgentPhaseCompleted,
    AgentTurnCompleted,
    AgentTurnStarted,
    AgentTurnStopped,
    BudgetExhausted,
)
from seats.budgets import Budgets, Refusal
from seats.providers.chain import ChainEmpty, ChainExhausted, ProviderChain, members_for
from seats.providers.openai import ClientFactory

PHASE = "respond"
MAX_TOKENS = 1024  # per round: a reply longer than this continues in the next round
MAX_ROUNDS = 4     # continuation rounds a phase may take before its reply stands as it is
CONTINUE = "Continue exactly where your reply stopped."
FAILED_OUTCOMES = frozenset({"budget_exhausted", "llm_unavailable", "failed"})
OUTCOMES = ("completed", "stopped", "budget_exhausted", "llm_unavailable", "failed", "fenced")


@dataclass
class TurnRequest:
    """One turn to run. `stop_requested` is checked before each round; it may return any truthy
    value, and one carrying `stopped_by`, `stopped_by_seat` or `reason` (attributes or keys)
    names who stopped the turn on its agent_turn_stopped."""

    seat: Seat
    company: Company
    trigger: Event
    constituents: list[Event]
    turn_id: str
    stop_requested: Callable[[], Any] = lambda: False
    # True once this node may no longer act on the seat (its lease is not exclusive any more:
    # a peer may hold it). Checked at the top of every round and once more before the turn's
    # record is published (seed 002, "What a fleet gets right": "the turn loop re-checks the
    # seat fence at the top of every round"): a fenced turn publishes no outcome and settles
    # nothing, so the seat's new holder works the mail once.
    fenced: Callable[[], bool] = lambda: False


@dataclass
class TurnResult:
    """What became of a turn; `refusal` is the budget's Refusal when outcome is budget_exhausted."""

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

    @property
    def failed(self) -> bool:
        return self.outcome in FAILED_OUTCOMES


def conversation_key_of(trigger: Event) -> str:
    """The conversation a turn's events are tagged with: the trigger's conversation identity,
    else its partition key, else empty."""
    return str(trigger.get("conversation_identity") or trigger.get("partition_key") or "")


def system_text(company: Company, seat: Seat) -> str:
    """The system prompt: who the seat is, in which company, reporting to whom."""
    lines = [f"You are {seat.handle}" + (f", {seat.title}" if seat.title else "") + f", at {company.name}."]
    if seat.role:
        lines.append(f"Your role: {seat.role}.")
    if seat.reports_to:
        lines.append(f"You report to {seat.reports_to}.")
    lines.append("Work the message below and reply with what you did or will do.")
    return "\n".join(lines)


def user_text(trigger: Event) -> str:
    """The user prompt: the trigger's summary, then its sender, subject, task and body (for a
    merged trigger, the digest body) where it carries them."""
    lines = [trigger.summary()]
    for label, name in (("From", "sender"), ("Subject", "subject"), ("Task", "task")):
        value = trigger.get(name)
        if value:
            lines.append(f"{label}: {value}")
    body = trigger.get("body") or trigger.get("salient_body")
    if body:
        lines += ["", str(body)]
    return "\n".join(lines)


@dataclass
class _Phase:
    """The running phase's record, as agent_phase_completed will carry it."""

    rounds: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    stop_reason: str = ""
    model: str = ""
    provider_key: str = ""
    outcome: str = "completed"
    error: str = ""
    error_kind: str = ""
    refusal: Refusal | None = None
    model_refusal: dict[str, Any] | None = None

    def end(self, outcome: str, error: str = "", error_kind: str = "") -> None:
        self.outcome, self.error, self.error_kind = outcome, error, error_kind


class TurnEngine:
    """Runs turns for the seats this node hosts; `publish` puts an event on crewlet.events.{type}."""

    def __init__(self, *, node_id: str, publish: Callable[[Event], Awaitable[None]],
                 budgets: Budgets | None = None, clock: Callable[[], float] = time.time,
                 http_client_factory: ClientFactory | None = None,
                 max_tokens: int = MAX_TOKENS, max_rounds: int = MAX_ROUNDS) -> None:
        self.node_id = node_id
        self.publish = publish
        self.budgets = budgets
        self.clock = clock
        self.http_client_factory = http_client_factory
        self.max_tokens = max_tokens
        self.max_rounds = max_rounds

    async def run(self, request: TurnRequest) -> TurnResult:
        """Run one turn under the trigger's trace; its outcome, never a provider's exception.
        ChainEmpty when the company has no provider (the host holds the inbox instead)."""
        if not request.company.providers.llm:
            raise ChainEmpty()
        parent = tracing.event_trace(request.trigger)
        with tracing.span("agent.turn", parent=parent, turn_id=request.turn_id,
                          agent=request.seat.handle, node=self.node_id):
            return await _Turn(self, request).run()


class _Turn:
    """One run of the engine: the request, its event tags, its clock."""

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

    async def emit(self, data: EventData) -> None:
        """Publish `data` stamped with the turn's tags, under the span that is current now."""
        stamped = data.model_copy(update=self.tags)
        trigger = self.request.trigger
        await self.engine.publish(new(stamped, tracing.trace_of(), source="engine",
                                      delegation_depth=trigger.delegation_depth,
                                      delegation_chain=trigger.delegation_chain,
                                      parent_turn_id=trigger.parent_turn_id))

    def _ms_since(self, start: float) -> int:
        return max(0, int(round((self.engine.clock() - start) * 1000)))

    async def run(self) -> TurnResult:
        started = self.engine.clock()
        await self.emit(AgentTurnStarted(**self.trigger_fields))
        req = self.request
        system, user = system_text(req.company, req.seat), user_text(req.trigger)
        phase_started = self.engine.clock()
        phase = await self._rounds([{"role": "system", "content": system}, {"role": "user", "content": user}])
        if phase.outcome == "fenced" or req.fenced():
            return TurnResult(outcome="fenced", turn_id=req.turn_id, rounds=len(phase.rounds), tokens_in=phase.tokens_in,
                              tokens_out=phase.tokens_out, duration_ms=self._ms_since(started), response="",
                              error="this node lost the seat's lease during the turn", error_kind="fenced")
        response = "".join(phase.texts)
        failed = phase.outcome in FAILED_OUTCOMES
        await self.emit(AgentPhaseCompleted(
            phase=PHASE, iteration=1, model=phase.model, provider_key=phase.provider_key,
            system_prompt=system, user_prompt=user, response=response, rounds=phase.rounds,
            stop_reason=phase.stop_reason, tokens_in=phase.tokens_in, tokens_out=phase.tokens_out,
            duration_ms=self._ms_since(phase_started), failed=failed, error=phase.error,
            error_kind=phase.error_kind, refusal=phase.model_refusal))
        duration_ms = self._ms_since(started)
        await self.emit(AgentTurnCompleted(
            **self.trigger_fields, iterations=len(phase.rounds), response=response, outcome=phase.outcome,
            failed=failed, stopped=phase.outcome == "stopped", error=phase.error, error_kind=phase.error_kind,
            tokens_in=phase.tokens_in, tokens_out=phase.tokens_out, duration_ms=duration_ms))
        return TurnResult(outcome=phase.outcome, turn_id=req.turn_id, rounds=len(phase.rounds),
                          tokens_in=phase.tokens_in, tokens_out=phase.tokens_out, duration_ms=duration_ms,
                          response=response, error=phase.error, refusal=phase.refusal,
                          error_kind=phase.error_kind, provider_key=phase.provider_key)

    async def _rounds(self, messages: list[dict[str, str]]) -> _Phase:
        """The phase's rounds until one ends it; the phase record."""
        req, engine, phase = self.request, self.engine, _Phase()
        seat, company = req.seat, req.company
        variables = {"trigger_summary": req.trigger.summary(), "seat": seat.handle,
                     "role": seat.role or "", "turn": req.turn_id}
        chain = ProviderChain(members_for(company, variables=variables,
                                          http_client_factory=engine.http_client_factory),
                              emit=self.emit, phase=PHASE, iteration=1)
        for number in range(1, engine.max_rounds + 1):
            if req.fenced():
                phase.end("fenced", "this node lost the seat's lease", "fenced")
                return phase
            stop = req.stop_requested()
            if stop:
                await self.emit(AgentTurnStopped(**_stop_fields(stop)))
                phase.stop_reason = "paused"
                phase.end("stopped")
                return phase
            if engine.budgets is not None and await self._refused(phase, await engine.budgets.check(company, seat)):
                return phase
            round_started = engine.clock()
            try:
                answer = await chain.complete(messages, max_tokens=engine.max_tokens, round=number)
            except ChainExhausted as exc:
                phase.end("llm_unavailable", exc.last.detail, exc.last.kind)
                return phase
            done = answer.completion
            phase.rounds.append(_round(number, answer.provider_key, done, round_started, self._ms_since(round_started)))
            phase.texts.append(done.text)
            phase.tokens_in += done.tokens_in
            phase.tokens_out += done.tokens_out
            phase.stop_reason, phase.model, phase.provider_key = done.stop_reason, done.model, answer.provider_key
            tokens = done.tokens_in + done.tokens_out
            if engine.budgets is not None and await self._refused(phase, await engine.budgets.charge(company, seat, tokens)):
                return phase
            if done.stop_reason in ("refusal", "context_exceeded"):
                if done.stop_reason == "refusal":
                    phase.model_refusal = {"category": "", "explanation": done.text}
                phase.end("failed", f"the model stopped: {done.stop_reason}", done.stop_reason)
                return phase
            if done.stop_reason != "max_tokens":
                return phase
            messages = messages + [{"role": "assistant", "content": done.text}, {"role": "user", "content": CONTINUE}]
        return phase

    async def _refused(self, phase: _Phase, refusal: Refusal | None) -> bool:
        """Publish budget_exhausted and end the phase when the budget refused; whether it did."""
        if refusal is None:
            return False
        await self.emit(BudgetExhausted(**refusal.as_fields()))
        whose = f"seat {refusal.handle}" if refusal.scope == "seat" else refusal.scope
        phase.refusal = refusal
        phase.end("budget_exhausted",
                  f"{whose} {refusal.period} budget exhausted ({refusal.spend:,} of {refusal.ceiling:,} tokens "
                  f"in {refusal.window}; resets {refusal.resets_at.isoformat()})", "budget_exhausted")
        return True


def _round(number: int, provider_key: str, done, started: float, duration_ms: int) -> dict[str, Any]:
    """One entry of rounds[]: the provider call's timing, tokens and stop_reason."""
    entry: dict[str, Any] = {
        "round": number, "provider_key": provider_key, "model": done.model,
        "started_at": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "duration_ms": duration_ms, "tokens_in": done.tokens_in, "tokens_out": done.tokens_out,
    }
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
