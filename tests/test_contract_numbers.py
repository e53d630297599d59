"""The contract's numbers, pinned as numbers: each test compares the product's value with the
figure written out here, never with the constant it checks, so changing a number the seed
(or this build, where the seed states none) promises fails a test that names the section.

Behaviour at these numbers is certified elsewhere -- the conformance suite runs the default
spacing, budget and ack window on both queue backends (tests/queue/test_conformance_timing.py)
-- this module says which numbers those are.
"""
from __future__ import annotations

import pytest
import yaml

from engine.config import ConfigError, parse_company, parse_node_config
from engine.coord.ledger import LEDGER_HORIZON_SECONDS
from engine.node import NodeTimings
from engine.queue import contract, limits, topics
from engine.queue.contract import BatchOptions, Tuning
from engine.queue.jetstream_provision import mailbox_config, stream_config
from engine.queue.memory import DEDUPE_WINDOW_SECONDS
from notify.edge import DEDUPE_TTL_SECONDS
from notify.sources.slack import TIMESTAMP_WINDOW_SECONDS
from seats import duties, meters, runtime

MINUTE, HOUR, DAY = 60, 3600, 24 * 3600
NANOS = 10**9
INBOX, GROUP = topics.agent_inbox("ada"), topics.inbox_group("ada")
KEY = "dGVzdC1rZXktbWF0ZXJpYWwtMDEyMzQ1Njc4OWFiY2RlZg"
TIER_A = {"node": {"id": "n1"}, "stream": {"type": "embedded", "store_dir": "var/stream"},
          "secrets": {"active_key_id": "k1", "keys": [{"id": "k1", "material": KEY}]}, "api": {"port": 0}}
COMPANY = {"name": "acme", "org": {"seats": [{"handle": "maya", "kind": "human"},
                                             {"handle": "alice", "kind": "agent", "reports_to": "maya"}]}}


# -- seed 000, "Delivery Semantics" ------------------------------------------------------------
def test_delivery_semantics_25_deliveries_then_the_dead_letter():
    assert contract.MAX_DELIVERIES == 25
    assert Tuning().max_deliveries == 25
    # The broker's own MaxDeliver, the backstop, is the same number.
    assert mailbox_config(INBOX, GROUP, ack_wait_seconds=60, max_deliveries=Tuning().max_deliveries)["max_deliver"] == 25


def test_delivery_semantics_nak_spacing_is_1_2_4_8_16_then_30_seconds():
    spacing = [Tuning().nak_delay(deliveries) for deliveries in range(1, 25)]
    assert spacing == [1, 2, 4, 8, 16] + [30] * 19
    # "The doubling spreads the delivery budget over about ten minutes."
    assert 9 * MINUTE < sum(spacing) < 11 * MINUTE


def test_delivery_semantics_the_ack_window_is_a_minute_kept_alive_every_20_seconds():
    # Seed 000 sizes a 30-minute window for a wait behind a running turn plus one worst-case
    # turn, with nothing keeping the message alive; this build heartbeats what it holds and
    # keeps one minute (contract.py), so a crashed turn's mail is back within two minutes.
    assert Tuning().ack_wait_seconds == 60
    assert Tuning().heartbeat_seconds == 20
    assert mailbox_config(INBOX, GROUP, ack_wait_seconds=Tuning().ack_wait_seconds, max_deliveries=25)["ack_wait"] == 60 * NANOS


# -- seed 000, "Inbox Batching & Coalescing" and "The ack budget" ------------------------------
def test_the_ack_budget_caps_the_linger_at_60_seconds_on_every_read_and_at_load():
    assert limits.MAX_LINGER_SECONDS == 60
    assert BatchOptions(linger_seconds=3600).effective_linger == 60
    assert parse_company(yaml.safe_dump({**COMPANY, "notification_coalesce_window_seconds": 60}), env={}) is not None
    with pytest.raises(ConfigError) as refused:
        parse_company(yaml.safe_dump({**COMPANY, "notification_coalesce_window_seconds": 61}), env={})
    assert any(p.startswith("notification_coalesce_window_seconds: ") and "0 to 60" in p for p in refused.value.problems)


def test_inbox_batching_defaults_no_linger_20_a_drain_at_most_100():
    company = parse_company(yaml.safe_dump(COMPANY), env={})
    assert (company.notification_coalesce_window_seconds, company.notification_coalesce_max_batch) == (0, 20)
    assert (BatchOptions().linger_seconds, BatchOptions().max_batch) == (0, 20)
    assert limits.MAX_BATCH_CEILING == 100
    assert BatchOptions(max_batch=5000).effective_max_batch == 100


# -- seed 000, "Broadcast Streams" ---------------------------------------------------------------
def test_broadcast_streams_a_tap_is_reaped_a_minute_after_its_caller_goes():
    assert Tuning().stream_inactive_seconds == 60


# -- dedupe and ledger ages (seed 002, "What changed": each lives in a bucket whose own age is
# its retention; the seed states no figure, so these are this build's, pinned) ---------------
def test_the_brokers_duplicate_window_is_2_minutes_on_both_backends():
    assert DEDUPE_WINDOW_SECONDS == 2 * MINUTE
    spec = topics.stream_for(INBOX)
    assert stream_config(spec)["duplicate_window"] == 2 * MINUTE * NANOS


def test_a_webhook_delivery_is_deduplicated_for_a_day():
    assert DEDUPE_TTL_SECONDS == DAY


def test_the_completion_ledger_keeps_a_week():
    assert LEDGER_HORIZON_SECONDS == 7 * DAY


def test_slacks_replay_window_is_five_minutes():
    assert TIMESTAMP_WINDOW_SECONDS == 5 * MINUTE


# -- sweeps and polls (seed 002, "Roles": the duties and the placement sweep; the seed states
# no figure for the sweep and the poll, so these are this build's defaults, pinned) -----------
def test_the_node_sweeps_placement_and_polls_the_activation_pointer_every_5_seconds():
    cfg = parse_node_config(yaml.safe_dump(TIER_A), env={})
    assert (cfg.node.sweep_seconds, cfg.node.revision_poll_seconds) == (5, 5)
    timings = NodeTimings()
    assert (timings.sweep_seconds, timings.revision_poll_seconds, timings.lease_ttl_seconds) == (5, 5, None)
    assert runtime.DEFAULT_POLL_SECONDS == 5


def test_leases_live_45_seconds_by_default():
    # The seed's example Tier A file: `coordination: lease_ttl_seconds: 45`.
    assert parse_node_config(yaml.safe_dump(TIER_A), env={}).coordination.lease_ttl_seconds == 45


def test_budget_meters_tick_every_15_seconds():
    # Seed 002, "Token budgets": "published by every node on a 15-second tick".
    assert meters.TICK_SECONDS == 15
    assert NodeTimings().budget_meters_seconds == 15


def test_the_maintenance_duty_sweeps_a_minute_and_retires_a_mailbox_a_day_after_its_seat_went():
    assert duties.SWEEP_SECONDS == MINUTE
    assert duties.RETIRE_AFTER_SECONDS == DAY
