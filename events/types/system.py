"""The `system` category: the engine talking about itself -- turns, phases, providers, budgets
(seed 000, "Event Types"; seed 002, "Budgets and spend").

A turn's events carry `turn_id` and `conversation_key` (the conversation identity, never the
partition). A phase completion's token counts are the figures the event store promotes to
columns for the spend rollup: tokens_in, tokens_out, cache_read_tokens, cache_write_tokens,
reasoning_tokens.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from events.envelope import register
from events.types.shapes import SeatEvent, TurnEvent, because, count, duration, person, possessive, size


class TokenFields(TurnEvent):
    """What a turn or a phase cost, in tokens, and how long it took."""

    tokens_in: int = 0
    tokens_out: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    duration_ms: int = 0

    @property
    def tokens(self) -> int:
        return (self.tokens_in or 0) + (self.tokens_out or 0)


class WorkItemFields(TurnEvent):
    """The work item a turn is charged to (`work_item` {backend, id, key, project}, None when nothing
    named one) and the rule that named it (trigger, asked_by, resume, sole_write)."""

    work_item: dict[str, Any] | None = None
    work_item_basis: str = ""


@register("agent_turn_started")
class AgentTurnStarted(WorkItemFields):
    """A turn, or a resumed segment of one, beginning -- before its context is assembled, so a turn
    that died gathering it still left a row. Its depth is the envelope's delegation_depth."""

    trigger_id: str = ""
    trigger_type: str = ""
    trigger_ids: list[str] = []
    resumed: bool = False

    def summary(self, event) -> str:
        verb = "resumed" if self.resumed else "started"
        woke = f" (woken by {self.trigger_type.replace('_', ' ')})" if self.trigger_type else ""
        on = f" on {self.conversation_key}" if self.conversation_key else ""
        return f"{self.seat} {verb} a turn{on}{woke}"


@register("agent_turn_completed")
class AgentTurnCompleted(TokenFields, WorkItemFields):
    """A full reasoning cycle with tokens and tools. `suspended` marks a segment that parked on a
    coding run; `stopped` (never with `failed`) a turn a person ended."""

    trigger_id: str = ""
    trigger_type: str = ""
    trigger_ids: list[str] = []
    iterations: int = 0
    tools_used: list[str] = []
    response: str = ""
    outcome: str = ""
    failed: bool = False
    error: str = ""
    error_kind: str = ""
    suspended: bool = False
    stopped: bool = False

    def summary(self, event) -> str:
        took = duration(self.duration_ms)
        if self.outcome == "interrupted":
            return f"{possessive(self.seat)} turn was interrupted after {took}{because(self.error or self.error_kind)}"
        if self.failed:
            return f"{possessive(self.seat)} turn failed after {took}{because(self.error or self.error_kind)}"
        if self.stopped:
            return f"{possessive(self.seat)} turn was stopped after {took} ({count(self.tokens, 'token')})"
        if self.suspended:
            return f"{self.seat} parked a turn on a coding run after {took} ({count(self.tokens, 'token')})"
        return f"{self.seat} completed a turn in {took} ({count(self.tokens, 'token')})"


@register("agent_turn_stopped")
class AgentTurnStopped(TurnEvent):
    """A pause with stop_running ended this turn at its next round; its trigger is recorded as worked."""

    stopped_by: str = ""
    stopped_by_seat: str = ""
    reason: str = ""

    def summary(self, event) -> str:
        return f"{person(self.stopped_by_seat, self.stopped_by)} stopped {possessive(self.seat)} turn{because(self.reason)}"

    def actor(self, event) -> str:
        return person(self.stopped_by_seat, self.stopped_by, event.source, default="system")


@register("agent_turn_steered")
class AgentTurnSteered(TurnEvent):
    """What became of a person's note to a running turn: `delivered` (with the phase, iteration and
    round that first read it) or `expired`. The note's only durable record."""

    note: str = ""
    note_id: str = ""
    steered_by: str = ""
    steered_by_seat: str = ""
    sent_at: datetime | None = None
    outcome: str = ""
    phase: str = ""
    iteration: int = 0
    round: int = 0

    def summary(self, event) -> str:
        who = person(self.steered_by_seat, self.steered_by)
        where = f" (phase {self.phase}, round {self.round})" if self.outcome == "delivered" and self.phase else ""
        return f"{possessive(who)} note to {possessive(self.seat)} turn {self.outcome or 'sent'}{where}"

    def actor(self, event) -> str:
        return person(self.steered_by_seat, self.steered_by, event.source, default="system")


class PhaseFields(TurnEvent):
    phase: str = ""
    iteration: int = 0
    model: str = ""
    provider_key: str = ""


@register("agent_phase_started")
class AgentPhaseStarted(PhaseFields):
    def summary(self, event) -> str:
        on = f" on {self.model}" if self.model else ""
        return f"{self.seat} started phase {self.phase or '?'}{on}"


@register("agent_phase_completed")
class AgentPhaseCompleted(TokenFields, PhaseFields):
    """One phase's durable record: prompts, response, tool calls and `rounds[]` (each provider call's
    timing, tokens and stop_reason). A failed phase carries `error_kind`; a declined one
    `refusal` {category, explanation} beside `error_kind: refusal`."""

    system_prompt: str = ""
    user_prompt: str = ""
    response: str = ""
    tool_calls: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    stop_reason: str = ""
    failed: bool = False
    error: str = ""
    error_kind: str = ""
    refusal: dict[str, Any] | None = None

    def summary(self, event) -> str:
        phase = f"phase {self.phase}" if self.phase else "a phase"
        if self.failed or self.error_kind:
            return f"{possessive(self.seat)} {phase} failed after {duration(self.duration_ms)}{because(self.error or self.error_kind)}"
        return f"{self.seat} finished {phase} in {duration(self.duration_ms)} ({count(self.tokens, 'token')})"


@register("auxiliary_spend")
class AuxiliarySpend(SeatEvent):
    """What the auxiliary model cost for one key, coalesced over one flush of the node's ledger.
    No prompt, no response, and deliberately no `failed` key. Stored, not fed."""

    stage: str = ""
    purpose: str = ""
    person: str = ""
    turn_id: str = ""
    model: str = ""
    provider_key: str = ""
    company_day: str = ""
    calls: int = 0
    failed_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    first_call_at: datetime | None = None
    last_call_at: datetime | None = None

    def summary(self, event) -> str:
        whose = self.agent_handle or self.agent_id or self.person or "the company"
        on = f" on {self.purpose}" if self.purpose else ""
        return (
            f"{possessive(whose)} auxiliary model spent {count(self.tokens_in + self.tokens_out, 'token')}{on} "
            f"({count(self.calls, 'call')})"
        )


@register("budget_exhausted")
class BudgetExhausted(TurnEvent):
    """A charge the token budget refused ended a turn: the refusing `scope` (company or seat) and
    window (`period`, `window` label, `resets_at`) with its `spend` and `ceiling`."""

    scope: str = ""
    period: str = ""
    window: str = ""
    resets_at: datetime | None = None
    spend: int = 0
    ceiling: int = 0

    def summary(self, event) -> str:
        budget = " ".join(p for p in (self.scope, self.period) if p) or "token"
        resets = f"; resets {self.resets_at:%Y-%m-%d %H:%M} UTC" if self.resets_at else ""
        return (
            f"{possessive(self.seat)} turn stopped: {budget} budget exhausted "
            f"({self.spend:,} of {self.ceiling:,} tokens{resets})"
        )


@register("turn.guard_breach")
class TurnGuardBreach(TurnEvent):
    """A runtime invariant fired (stall, max_iter, depth_cap, scheduled_timeout): a failed turn."""

    guard: str = ""
    limit: int = 0
    iteration: int = 0
    detail: str = ""

    def summary(self, event) -> str:
        return f"{possessive(self.seat)} turn hit the {self.guard or 'runtime'} guard{because(self.detail)}"


@register("llm_unavailable")
class LLMUnavailable(TurnEvent):
    """The fallback chain is exhausted; the seat reads stopped/provider until it works again."""

    phase: str = ""
    providers: list[str] = []
    error: str = ""
    error_kind: str = ""

    def summary(self, event) -> str:
        return f"no model provider answered for {self.seat}{because(self.error or self.error_kind)}"


@register("provider_fallback")
class ProviderFallback(TurnEvent):
    """The chain moved to its next provider: one per provider call, addressed to the turn, phase and
    iteration. `to_provider_key` is empty on the last member, where llm_unavailable follows."""

    phase: str = ""
    iteration: int = 0
    round: int = 0
    from_provider_key: str = ""
    to_provider_key: str = ""
    error: str = ""
    error_kind: str = ""

    def summary(self, event) -> str:
        to = f" to {self.to_provider_key}" if self.to_provider_key else " with no provider left"
        return f"{self.seat} fell back from {self.from_provider_key or 'a provider'}{to}{because(self.error_kind or self.error)}"


@register("subagent_batched")
class SubagentBatched(TurnEvent):
    """A phase fanned work out to a batch of sub-agents."""

    phase: str = ""
    batch_size: int = 0
    tasks: list[str] = []
    duration_ms: int = 0

    def summary(self, event) -> str:
        return f"{self.seat} ran {count(self.batch_size, 'sub-agent')} in {duration(self.duration_ms)}"


@register("phase.tool_skill_blocked")
class PhaseToolSkillBlocked(TurnEvent):
    """A phase's tool-skill catalogue refused a skill."""

    phase: str = ""
    skill_name: str = ""
    tool: str = ""
    reason: str = ""

    def summary(self, event) -> str:
        what = self.skill_name or self.tool or "a tool skill"
        return f"{possessive(self.seat)} phase {self.phase or '?'} blocked {what}{because(self.reason)}"


@register("skill_telemetry_write_failed")
class SkillTelemetryWriteFailed(SeatEvent):
    """A skill's usage telemetry could not be written."""

    skill_id: str = ""
    skill_name: str = ""
    error: str = ""

    def summary(self, event) -> str:
        return f"skill telemetry for {self.skill_name or 'a skill'} of {self.seat} not written{because(self.error)}"


@register("prompt.size")
class PromptSize(TurnEvent):
    """One phase's OPENING prompt measured in bytes, plus a token approximation."""

    phase: str = ""
    iteration: int = 0
    system_bytes: int = 0
    user_bytes: int = 0
    message_bytes: int = 0
    tool_bytes: int = 0
    tool_count: int = 0
    approx_tokens: int = 0

    def summary(self, event) -> str:
        total = self.system_bytes + self.user_bytes + self.message_bytes + self.tool_bytes
        return (
            f"{possessive(self.seat)} {self.phase or 'phase'} prompt: {size(total)} "
            f"(~{count(self.approx_tokens, 'token')}, {count(self.tool_count, 'tool')})"
        )
