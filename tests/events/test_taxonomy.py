"""The taxonomy: every registered type is placed, the map is seed 002's, the doc is the map's."""
from __future__ import annotations

from pathlib import Path

import pytest

from events import categories
from events.categories import (
    CATEGORIES,
    CATEGORY_MAP,
    EXCLUSIONS,
    RATE_AUTHORS,
    STORED_NOT_FED,
    Cause,
    Rate,
    category_of,
    exclusion_of,
    is_fed,
    is_stored,
    render_markdown,
    row_label,
)
from events.envelope import ENVELOPE_KEYS, Event, registered_types
from events.types.webhook import InboundDelivery

DOC = Path(__file__).resolve().parents[2] / "docs" / "event-categories.md"

# Seed 002, "What gets stored, and under which category": the table, copied as the spec.
SEED_TABLE = {
    "a2a": "a2a_channel_closed, a2a_channel_opened, a2a_message_sent",
    "auth": (
        "iam_credential_minted, iam_credential_revoked, iam_grants_changed, iam_invitation_cancelled, "
        "iam_login_failures, iam_mfa_reset, iam_password_changed, iam_password_reset, "
        "iam_password_reset_issued, iam_recovery_code_used, iam_second_factor_throttled, iam_session_ended, "
        "iam_session_generation_bumped, iam_session_started, iam_stepup_completed, statelog_record_tampered, "
        "statelog_record_unverifiable"
    ),
    "decision": "contribution_received, contribution_requested, decision_requested, decision_resolved",
    "learning": (
        "compaction_completed, compaction_requested, counterparty_profile_updated, episode_written, "
        "knowledge_read, persist_decider_completed, prefetch_summary, reflection_completed, skill_archived, "
        "skill_promoted, skill_refined, skill_revived, skill_staled, skill_synthesized, skill_used, turn_completed"
    ),
    "lifecycle": (
        "backup_requested, config_revision_activated, config_revision_applied, operator_acted, org_started, "
        "org_stopped, seat_paused, seat_resumed"
    ),
    "notification": "external_notification, notification_skipped, notifications_coalesced, turn_trigger_skipped",
    "system": (
        "agent_phase_completed, agent_phase_started, agent_turn_completed, agent_turn_started, "
        "agent_turn_steered, agent_turn_stopped, auxiliary_spend, budget_exhausted, llm_unavailable, "
        "phase.tool_skill_blocked, prompt.size, provider_fallback, skill_telemetry_write_failed, "
        "subagent_batched, turn.guard_breach"
    ),
    "task": (
        "sandbox_clarification_requested, sandbox_run_answered, sandbox_run_completed, sandbox_run_failed, "
        "sandbox_run_started, scheduled_task_fired, task_assigned"
    ),
    "webhook": "inbound_delivery",
}

# Seed 002's exclusions table: type and cause.
SEED_EXCLUSIONS = {
    "agent_turn_progress": "intermediate_state",
    "agent_spawned": "placement",
    "agent_terminated": "placement",
    "raw_webhook": "already_recorded",
    "a2a_request": "already_recorded",
    "a2a_message": "already_recorded",
    "sandbox_answer_given": "already_recorded",
    "tool_skill_page_changed": "already_recorded",
    "reflection_due": "already_recorded",
    "custody_batch": "already_recorded",
    "budget_meters": "periodic_snapshot",
}


def test_every_registered_type_is_either_categorised_or_excluded():
    registered = set(registered_types())
    unplaced = registered - set(CATEGORY_MAP) - set(EXCLUSIONS)
    assert not unplaced, (
        f"registered but neither categorised nor excluded: {sorted(unplaced)}; place each in "
        "events/categories.py (a category, or an exclusion with its cause and reason)"
    )


def test_every_placed_type_is_registered():
    registered = set(registered_types())
    missing = (set(CATEGORY_MAP) | set(EXCLUSIONS)) - registered
    assert not missing, f"placed in events/categories.py but no model is registered: {sorted(missing)}"


def test_no_type_is_both_categorised_and_excluded():
    assert not set(CATEGORY_MAP) & set(EXCLUSIONS)


def test_the_category_table_is_seed_002s():
    ours = {
        category: sorted(name for name, cat in CATEGORY_MAP.items() if cat == category) for category in CATEGORIES
    }
    spec = {category: sorted(n.strip() for n in names.split(",")) for category, names in SEED_TABLE.items()}
    assert ours == spec
    assert CATEGORIES == tuple(sorted(SEED_TABLE))


def test_the_exclusions_table_is_seed_002s():
    assert {name: exc.cause.value for name, exc in EXCLUSIONS.items()} == SEED_EXCLUSIONS
    for name, exclusion in EXCLUSIONS.items():
        assert exclusion.type == name
        assert exclusion.reason.strip(), f"{name} is excluded without a reason"


def test_every_categorised_type_names_who_authors_its_rate():
    assert set(RATE_AUTHORS) == set(CATEGORY_MAP)
    assert all(isinstance(rate, Rate) for rate in RATE_AUTHORS.values())


def test_nothing_an_anonymous_caller_can_pace_is_stored():
    anonymous = sorted(name for name, rate in RATE_AUTHORS.items() if rate is Rate.ANONYMOUS)
    assert not anonymous, (
        f"{anonymous} would be written at an anonymous caller's rate; exclude them with the cause "
        f"{Cause.ANONYMOUS_RATE.value} (and count the attempts on a metric instead)"
    )


def test_failed_logins_are_a_row_per_minute_paced_by_the_engine():
    assert RATE_AUTHORS["iam_login_failures"] is Rate.ENGINE


def test_auxiliary_spend_is_stored_but_never_fed():
    assert STORED_NOT_FED == frozenset({"auxiliary_spend"})
    assert is_stored("auxiliary_spend") and not is_fed("auxiliary_spend")
    assert is_fed("agent_turn_completed")


def test_excluded_and_unknown_types_are_neither_stored_nor_fed():
    for name in ("agent_turn_progress", "budget_meters", "a_type_from_a_newer_build"):
        assert category_of(name) is None
        assert not is_stored(name)
        assert not is_fed(name)
    assert exclusion_of("budget_meters").cause is Cause.PERIODIC_SNAPSHOT
    assert exclusion_of("agent_turn_completed") is None


def test_an_inbound_delivery_row_is_filed_under_its_own_label():
    labelled = Event(type="inbound_delivery", data=InboundDelivery(label="webhook:issue_comment", raw_body="{}"))
    assert row_label(labelled) == "webhook:issue_comment"
    built = Event(type="inbound_delivery", data=InboundDelivery(transport="socket", event_kind="posted"))
    assert row_label(built) == "socket:posted"
    assert row_label(Event(type="agent_turn_completed")) == "agent_turn_completed"
    # A row read back under its label is still in the webhook category.
    assert category_of("forge:push") == "webhook"
    assert is_fed("webhook:issue_comment")


def test_no_typed_field_reuses_an_envelope_key():
    for name, model in registered_types().items():
        assert not set(model.model_fields) & set(ENVELOPE_KEYS), name


def test_the_store_promoted_fields_exist_where_the_seeds_put_them():
    types = registered_types()
    seat_types = [
        "seat_paused", "seat_resumed", "task_assigned", "agent_turn_completed", "agent_phase_completed",
        "budget_exhausted", "external_notification", "notifications_coalesced", "inbound_delivery",
        "a2a_channel_opened", "skill_used", "agent_spawned",
    ]
    for name in seat_types:
        assert {"agent_id", "agent_handle", "agent_role"} <= set(types[name].model_fields), name
    for name in ("agent_turn_started", "agent_turn_completed", "agent_phase_completed", "turn_trigger_skipped"):
        assert {"turn_id", "conversation_key"} <= set(types[name].model_fields), name
    carriers = [name for name, model in types.items() if "partition_key" in model.model_fields]
    assert carriers == ["notifications_coalesced"]
    assert "conversation_key" not in types["notifications_coalesced"].model_fields
    assert "failed" not in types["auxiliary_spend"].model_fields
    for name in ("a2a_channel_opened", "a2a_message_sent", "a2a_channel_closed"):
        assert "channel_id" in types[name].model_fields
    for name in ("task_assigned", "sandbox_run_started", "scheduled_task_fired"):
        assert "task_id" in types[name].model_fields
    assert {"label", "raw_body"} <= set(types["inbound_delivery"].model_fields)


@pytest.mark.parametrize("type_name", sorted(registered_types()))
def test_every_type_says_who_did_what_on_a_default_instance(type_name):
    model = registered_types()[type_name]
    event = Event(type=type_name, data=model())
    assert isinstance(event.summary(), str) and event.summary().strip()
    assert isinstance(event.actor(), str) and event.actor().strip()
    # and survives the wire
    assert Event.from_json(event.to_json()).fields == event.fields


def test_summaries_read_as_a_person_would_say_them():
    types = registered_types()
    turn = types["agent_turn_completed"](agent_handle="alice", duration_ms=4200, tokens_in=1000, tokens_out=234)
    assert Event(type="agent_turn_completed", data=turn).summary() == "alice completed a turn in 4.2 s (1,234 tokens)"
    pause = types["seat_paused"](agent_handle="bob", paused_by_seat="maya", reason="runaway loop")
    event = Event(type="seat_paused", data=pause, source="operator")
    assert event.summary() == "maya paused bob: runaway loop"
    assert event.actor() == "maya"
    skipped = types["notification_skipped"](
        event_kind="comment", subject="nimbus/api#12", reason="no seat matches the recipient"
    )
    assert (
        Event(type="notification_skipped", data=skipped, source="github").summary()
        == "github comment on nimbus/api#12 skipped: no seat matches the recipient"
    )
    swept = types["a2a_channel_closed"](requester="alice", responder="bob", message_count=1)
    assert Event(type="a2a_channel_closed", data=swept).actor() == "system"
    assert Event(type="a2a_channel_closed", data=swept).summary().startswith("system closed A2A channel")


def test_the_categories_doc_is_generated_from_the_map():
    assert DOC.exists(), "docs/event-categories.md is missing"
    assert DOC.read_text() == render_markdown(), (
        "docs/event-categories.md has drifted from events/categories.py; regenerate it with "
        "`python manage.py crewlet_event_categories > docs/event-categories.md`"
    )


def test_the_doc_command_prints_the_map(capsys):
    from django.core.management import call_command

    call_command("crewlet_event_categories")
    assert capsys.readouterr().out == categories.render_markdown()
