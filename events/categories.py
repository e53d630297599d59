"""The category map: what gets stored, and under which category (seed 002, "What gets stored,
and under which category"; seed 000, "Event Types").

`category` is the event store's one column with a closed vocabulary; it is what the
dashboard's filter and `GET /events?category=` group by. The map is also the admission list:
a type that is not in it is not written and does not reach the activity feed, so every
exclusion is deliberate and says why (`EXCLUSIONS`, each with a `cause` a test can check and
a `reason` for a person). A registered type that is neither categorised nor excluded fails a
test rather than vanishing quietly.

Three more facts live beside the map:
- `STORED_NOT_FED`: types written like every other row but kept out of the activity feed.
- `RATE_AUTHORS`: who authors each categorised type's rate -- the engine's own work, or an
  admitted (authenticated) caller. Nothing is anonymous, and nothing may be: a type an
  anonymous caller could pace is excluded with the cause `anonymous_rate`.
- `row_label`: the name a row is filed under -- the type, except inbound_delivery, whose rows
  carry the delivery's own label (`webhook:<event>`, `forge:<event>`, `socket:posted`).

docs/event-categories.md is generated from this module (`render_markdown`) by
`python manage.py crewlet_event_categories > docs/event-categories.md`.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, Mapping

CATEGORIES: tuple[str, ...] = (
    "a2a",
    "auth",
    "decision",
    "learning",
    "lifecycle",
    "notification",
    "system",
    "task",
    "webhook",
)

# Category -> the types filed under it, exactly as seed 002's table.
_TYPES_BY_CATEGORY: dict[str, tuple[str, ...]] = {
    "a2a": ("a2a_channel_closed", "a2a_channel_opened", "a2a_message_sent"),
    "auth": (
        "iam_credential_minted",
        "iam_credential_revoked",
        "iam_grants_changed",
        "iam_invitation_cancelled",
        "iam_login_failures",
        "iam_mfa_reset",
        "iam_password_changed",
        "iam_password_reset",
        "iam_password_reset_issued",
        "iam_recovery_code_used",
        "iam_second_factor_throttled",
        "iam_session_ended",
        "iam_session_generation_bumped",
        "iam_session_started",
        "iam_stepup_completed",
        "statelog_record_tampered",
        "statelog_record_unverifiable",
    ),
    "decision": ("contribution_received", "contribution_requested", "decision_requested", "decision_resolved"),
    "learning": (
        "compaction_completed",
        "compaction_requested",
        "counterparty_profile_updated",
        "episode_written",
        "knowledge_read",
        "persist_decider_completed",
        "prefetch_summary",
        "reflection_completed",
        "skill_archived",
        "skill_promoted",
        "skill_refined",
        "skill_revived",
        "skill_staled",
        "skill_synthesized",
        "skill_used",
        "turn_completed",
    ),
    "lifecycle": (
        "backup_requested",
        "config_revision_activated",
        "config_revision_applied",
        "operator_acted",
        "org_started",
        "org_stopped",
        "seat_paused",
        "seat_resumed",
    ),
    "notification": ("external_notification", "notification_skipped", "notifications_coalesced", "turn_trigger_skipped"),
    "system": (
        "agent_phase_completed",
        "agent_phase_started",
        "agent_turn_completed",
        "agent_turn_started",
        "agent_turn_steered",
        "agent_turn_stopped",
        "auxiliary_spend",
        "budget_exhausted",
        "llm_unavailable",
        "phase.tool_skill_blocked",
        "prompt.size",
        "provider_fallback",
        "skill_telemetry_write_failed",
        "subagent_batched",
        "turn.guard_breach",
    ),
    "task": (
        "sandbox_clarification_requested",
        "sandbox_run_answered",
        "sandbox_run_completed",
        "sandbox_run_failed",
        "sandbox_run_started",
        "scheduled_task_fired",
        "task_assigned",
    ),
    "webhook": ("inbound_delivery",),
}

CATEGORY_MAP: Mapping[str, str] = MappingProxyType(
    {name: category for category, names in _TYPES_BY_CATEGORY.items() for name in names}
)

# The one type whose rows do not carry its name, and the label prefixes its rows carry instead.
INBOUND_DELIVERY = "inbound_delivery"
DELIVERY_LABEL_PREFIXES: tuple[str, ...] = ("webhook:", "forge:", "socket:")
_WEBHOOK_NOTE = (
    "one row per delivery presented to one seat, from a webhook route or a Mattermost socket. "
    "The row is filed under the delivery's own label (`webhook:<event>`, `forge:<event>`, `socket:posted`) "
    "rather than under inbound_delivery, with the provider's exact bytes as its payload"
)


class Cause(str, Enum):
    """Why a type is kept out of the store, as a value a rule can be checked against."""

    INTERMEDIATE_STATE = "intermediate_state"
    PLACEMENT = "placement"
    ALREADY_RECORDED = "already_recorded"
    PERIODIC_SNAPSHOT = "periodic_snapshot"
    ANONYMOUS_RATE = "anonymous_rate"

    @property
    def label(self) -> str:
        return self.value.replace("_", " ").capitalize()


@dataclass(frozen=True)
class Exclusion:
    """A type deliberately not stored: its `cause` (for the rules) and its `reason` (for a person)."""

    type: str
    cause: Cause
    reason: str


def _exclusions(*rows: tuple[str, Cause, str]) -> Mapping[str, Exclusion]:
    return MappingProxyType({name: Exclusion(name, cause, reason) for name, cause, reason in rows})


EXCLUSIONS: Mapping[str, Exclusion] = _exclusions(
    (
        "agent_turn_progress",
        Cause.INTERMEDIATE_STATE,
        "A live-only signal as each LLM round opens, answers and runs its tools; the matching "
        "agent_phase_completed is its durable record, so storing it would fill the log with "
        "intermediate states of rows it also holds finished. It still drives the live projection.",
    ),
    (
        "agent_spawned",
        Cause.PLACEMENT,
        "Placement moves a seat between nodes on every rebalance, so a row per claim would fill the "
        "log with a fact about scheduling rather than about the company. It still drives the live "
        "projection, which asks \"is this seat running, and where\".",
    ),
    (
        "agent_terminated",
        Cause.PLACEMENT,
        "The counterpart of agent_spawned, excluded for the same reason. It takes a released "
        "instance's call off a live screen; whether the seat still runs anywhere is the seat leases' to say.",
    ),
    (
        "raw_webhook",
        Cause.ALREADY_RECORDED,
        "The delivery is already a row (inbound_delivery, in the webhook category). This is the wake "
        "an inbound edge publishes for the transports to route; storing it too would store every "
        "delivery twice.",
    ),
    (
        "a2a_request",
        Cause.ALREADY_RECORDED,
        "The ask is already a row: a2a_channel_opened and a2a_message_sent record the same exchange "
        "under the ids the audit trail is keyed on. This is the wake it puts on the target seat's inbox.",
    ),
    (
        "a2a_message",
        Cause.ALREADY_RECORDED,
        "The answer is already a row (a2a_message_sent). This is the wake it puts on the requester's inbox.",
    ),
    (
        "sandbox_answer_given",
        Cause.ALREADY_RECORDED,
        "The wake an answer by turn puts on the seat's inbox, and never a turn. What the answer became "
        "is already a row (sandbox_run_answered), and that a person gave it is their operator_acted row.",
    ),
    (
        "tool_skill_page_changed",
        Cause.ALREADY_RECORDED,
        "A nudge between nodes that one tool-skill page moved, so every node's registry re-reads it. "
        "The delivery that caused it is already a row (webhook category), and what the change did is a "
        "log line on each node; a row would record one wiki edit once more per member of the fleet.",
    ),
    (
        "reflection_due",
        Cause.ALREADY_RECORDED,
        "The wake that puts a finished turn in front of post-turn reflection. The turn is already a row "
        "(turn_completed), and what reflecting on it did is its own (reflection_completed).",
    ),
    (
        "custody_batch",
        Cause.ALREADY_RECORDED,
        "A carrier, not an event: a node without the data role publishes its events in batches and one "
        "data node writes each event inside as the row it is. A row for the batch would describe the "
        "transport and repeat every event in it.",
    ),
    (
        "budget_meters",
        Cause.PERIODIC_SNAPSHOT,
        "A snapshot of the shared token counters, published by every node on a 15-second tick and when "
        "a window first refuses a charge: about two million rows a year per node to answer what the live "
        "projection and GET /budgets answer for free. The spend itself is recorded per phase "
        "(agent_phase_completed) and per auxiliary purpose (auxiliary_spend). It still drives the live projection.",
    ),
)

# Stored, not fed: written like every other row, kept out of the dashboard's activity feed.
STORED_NOT_FED: frozenset[str] = frozenset({"auxiliary_spend"})
NOT_FED_REASONS: Mapping[str, str] = MappingProxyType(
    {
        "auxiliary_spend": (
            "Accounting, not activity: what the auxiliary model cost for one key, coalesced per flush. "
            "A turn writes several beside its own phases, and a compaction a burst, so in the feed they "
            "would push the turns, failures and deliveries a reader is watching out of the ring."
        ),
    }
)


class Rate(str, Enum):
    """Who authors a type's rate: how fast its rows can be made to appear, and by whom."""

    ENGINE = "engine"  # this company's own work, paced by the engine
    AUTHENTICATED = "authenticated"  # an admitted caller: an operator's token, a person, a signed delivery
    ANONYMOUS = "anonymous"  # anybody who can reach a listener with no credential: never stored


_AUTHENTICATED: frozenset[str] = frozenset(
    {
        # lifecycle: a person's call through the API or the operator surface
        "backup_requested",
        "config_revision_activated",
        "operator_acted",
        "seat_paused",
        "seat_resumed",
        # task: an operator's assignment, a person's answer
        "task_assigned",
        "sandbox_run_answered",
        # system: a person's note or stop reaching a running turn
        "agent_turn_steered",
        "agent_turn_stopped",
        # decision: the seam an extension writes through, as an admitted caller
        "contribution_received",
        "contribution_requested",
        "decision_requested",
        "decision_resolved",
        # notification and webhook: a delivery whose signature (or socket credential) verified;
        # a delivery that failed it is refused before any of these is published
        "external_notification",
        "notification_skipped",
        "inbound_delivery",
        # auth: every one follows a credential, a signed link or an admin's call. Failed attempts
        # are the engine's per-minute iam_login_failures, never a row per attempt
        "iam_credential_minted",
        "iam_credential_revoked",
        "iam_grants_changed",
        "iam_invitation_cancelled",
        "iam_mfa_reset",
        "iam_password_changed",
        "iam_password_reset",
        "iam_password_reset_issued",
        "iam_recovery_code_used",
        "iam_second_factor_throttled",
        "iam_session_ended",
        "iam_session_generation_bumped",
        "iam_session_started",
        "iam_stepup_completed",
    }
)

RATE_AUTHORS: Mapping[str, Rate] = MappingProxyType(
    {name: (Rate.AUTHENTICATED if name in _AUTHENTICATED else Rate.ENGINE) for name in CATEGORY_MAP}
)


# -- questions --------------------------------------------------------------------------------
def category_of(type_name: str) -> str | None:
    """The category a type (or an inbound delivery's row label) is filed under; None when not stored."""
    category = CATEGORY_MAP.get(type_name)
    if category is None and type_name.startswith(DELIVERY_LABEL_PREFIXES):
        return CATEGORY_MAP[INBOUND_DELIVERY]
    return category


def is_stored(type_name: str) -> bool:
    """Whether a type is written to the event store: the map is the admission list."""
    return category_of(type_name) is not None


def is_fed(type_name: str) -> bool:
    """Whether a type's rows reach the activity feed: stored, and not in `STORED_NOT_FED`."""
    return is_stored(type_name) and type_name not in STORED_NOT_FED


def exclusion_of(type_name: str) -> Exclusion | None:
    """Why a type is not stored, or None for a categorised (or unknown) type."""
    return EXCLUSIONS.get(type_name)


def rate_of(type_name: str) -> Rate | None:
    """Who authors a categorised type's rate; None for a type that is not stored."""
    return RATE_AUTHORS.get(type_name)


def row_label(event: Any) -> str:
    """The name an event's row is filed under: its type, or for inbound_delivery the delivery's
    own label (`webhook:<event>`, `forge:<event>`, `socket:posted`)."""
    if event.type != INBOUND_DELIVERY:
        return event.type
    data = getattr(event, "data", None)
    if data is not None and hasattr(data, "row_label"):
        return data.row_label()
    label = event.get("label") if hasattr(event, "get") else None
    return label or event.type


# -- the generated page -----------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown() -> str:
    """docs/event-categories.md, generated from the map (a test fails when the two drift)."""
    out: list[str] = [
        "# Event categories",
        "",
        "<!-- Generated from events/categories.py by "
        "`python manage.py crewlet_event_categories > docs/event-categories.md`. Do not edit by hand. -->",
        "",
        "What gets stored, and under which category (seed 002). `category` is the event store's one "
        "column with a closed vocabulary; the dashboard's filter and `GET /events?category=` group by it. "
        "The map is also the admission list: a type that is not in it is not written and does not reach "
        "the activity feed.",
        "",
        "## Categories",
        "",
        "| Category | Event types |",
        "|---|---|",
    ]
    for category in CATEGORIES:
        names = sorted(name for name, cat in CATEGORY_MAP.items() if cat == category)
        listed = ", ".join(f"`{name}`" for name in names)
        if category == "webhook":
            listed = f"{listed} — {_WEBHOOK_NOTE}"
        out.append(f"| {category} | {_cell(listed)} |")
    out += [
        "",
        "## Excluded from the store",
        "",
        "Each exclusion carries a cause as well as a reason: the reason is for a person looking for a "
        "type and not finding it; the cause is the same decision as a value, so the rules can be checked.",
        "",
        "| Excluded type | Cause | Why |",
        "|---|---|---|",
    ]
    for exclusion in EXCLUSIONS.values():
        out.append(f"| `{exclusion.type}` | {exclusion.cause.label} | {_cell(exclusion.reason)} |")
    out += [
        "",
        "## Stored, not in the activity feed",
        "",
        "Written like every other row, and in `GET /events`, a turn's history and a trace; kept out of "
        "the dashboard's activity feed (a ring of the whole company's last few hundred events).",
        "",
        "| Type | Why |",
        "|---|---|",
    ]
    for name in sorted(STORED_NOT_FED):
        out.append(f"| `{name}` | {_cell(NOT_FED_REASONS[name])} |")
    out += [
        "",
        "## Who authors the rate",
        "",
        "Every categorised type records who authors its rate: this company's own work (`engine`), or an "
        "admitted caller such as an operator's token, a person, a seat or a signed webhook delivery "
        "(`authenticated`). Nothing is `anonymous` — authored by anybody who can reach a listener with no "
        "credential — and the rule is that nothing may be: a type an anonymous caller could pace is "
        "excluded with the cause `anonymous_rate`. A failed login is the case to hold in mind: the "
        "per-attempt fact is a metrics counter, and what becomes a row is `iam_login_failures`, one per "
        "node per minute, paced by the engine. A test over the taxonomy enforces the rule.",
        "",
        "| Rate | Event types |",
        "|---|---|",
    ]
    for rate in Rate:
        names = sorted(name for name, author in RATE_AUTHORS.items() if author is rate)
        out.append(f"| {rate.value} | {', '.join(f'`{n}`' for n in names) or '(none)'} |")
    return "\n".join(out) + "\n"
