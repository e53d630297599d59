"""Webhooks to turns on a real node process with its embedded broker (seed 000, "Inbox Batching &
Coalescing": "With the window at 0, an idle-agent burst worst-cases at two turns ... never N";
"two unrelated asks in a shared channel never merge"; "Distributed Tracing": a delivery is the
root of the trace everything it causes hangs under). The company's secrets reach the node
through its environment, as ${VAR} references in company.yaml."""
from __future__ import annotations

import uuid

import pytest

from tests.node.harness import NodeProcess
from tests.notify import deliveries as d
from tests.notify.http import post, rows, trace_rows, wait_rows

pytestmark = pytest.mark.timeout(180)

TURN_SECONDS = 2  # the scripted model's delay: long enough for a burst to land mid-turn


@pytest.fixture(scope="module")
def company_node(tmp_path_factory):
    node = NodeProcess(home=tmp_path_factory.mktemp("e2e") / "node-1")
    provider = f"{{name: local, kind: scripted, delay_seconds: {TURN_SECONDS}, reply: ok}}"
    node.start(company=d.company_yaml(provider=provider), env=d.ENV)
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


def github(node, text: str, number: int, **headers) -> dict:
    body = d.dumps(d.github_comment(text, number=number, author="octo-maya", pr_author="nobody-external"))
    status, answer, _ = post(node, "/webhooks/github", body, {**d.github_headers(body), **headers})
    assert status == 202, answer
    return answer


def slack(node, payload: dict) -> dict:
    body = d.dumps(payload)
    status, answer, _ = post(node, "/webhooks/slack", body, d.slack_headers(body))
    assert status == 202, answer
    return answer


def turns(node, conversation: str, handle: str = "alice", type_name: str = "agent_turn_completed") -> list[dict]:
    return [r for r in rows(node, type=type_name) if r["agent_handle"] == handle and r["conversation_key"] == conversation]


def wakes_for(node, delivery_ids: set[str]) -> list[dict]:
    return [r for r in rows(node, type="external_notification") if r["delivery_id"] in delivery_ids]


def wait_started(node, conversation: str) -> dict:
    return wait_rows(node, f"a turn to start on {conversation}",
                     lambda r: any(x["agent_handle"] == "alice" and x["conversation_key"] == conversation for x in r),
                     type="agent_turn_started")[0]


def test_a_burst_of_ten_comments_mid_turn_is_one_follow_up_turn_whose_digest_holds_all_ten(company_node):
    node, conversation = company_node, "github:nimbus/api#12"
    github(node, "@octo-alice first look please", 12)
    wait_started(node, conversation)
    burst = [github(node, f"@octo-alice burst comment {i}", 12)["delivery_id"] for i in range(10)]
    wait_rows(node, "two turns on the pull request", lambda r: len([x for x in r if x["conversation_key"] == conversation]) >= 2,
              timeout=60, type="agent_turn_completed")
    first, follow_up = sorted(turns(node, conversation), key=lambda r: r["timestamp"])
    wakes = wakes_for(node, set(burst))
    assert len(wakes) == 10
    assert all(w["timestamp"] < first["timestamp"] for w in wakes), "the burst did not land while the first turn ran"
    assert sorted(follow_up["trigger_ids"]) == sorted(w["id"] for w in wakes)
    [phase] = [p for p in rows(node, type="agent_phase_completed") if p["turn_id"] == follow_up["turn_id"]]
    assert all(f"burst comment {i}" in phase["user_prompt"] for i in range(10))
    [merged] = [c for c in rows(node, type="notifications_coalesced") if c["turn_id"] == follow_up["turn_id"]]
    assert merged["partition_key"] == conversation and merged["constituents"] == 10


def test_four_top_level_slack_dms_are_one_conversation_in_at_most_two_turns(company_node):
    node, channel = company_node, f"D{uuid.uuid4().hex[:8].upper()}"
    sent = [slack(node, d.slack_message(f"dm {i}", channel=channel, channel_type="im", user="U0MAYA", app_user="U0ALICE"))
            for i in range(4)]
    ids = {a["delivery_id"] for a in sent}
    conversation = f"slack:{channel}"
    wait_rows(node, "the four DMs worked", lambda r: {i for x in r if x["conversation_key"] == conversation
                                                      for i in x["trigger_ids"]} >= {w["id"] for w in wakes_for(node, ids)}
              and len(wakes_for(node, ids)) == 4, timeout=60, type="agent_turn_completed")
    wakes = wakes_for(node, ids)
    assert {w["payload"]["partition_key"] for w in wakes} == {conversation}
    assert {w["conversation_identity"] for w in wakes} == {conversation}
    worked = turns(node, conversation)
    assert 1 <= len(worked) <= 2  # the first wakes the seat at once; the rest coalesce: never four


def test_two_unrelated_asks_in_one_channel_never_merge(company_node):
    node = company_node
    github(node, "@octo-alice keep busy", 30)
    wait_started(node, "github:nimbus/api#30")
    asks = [d.slack_message(f"<@U0ALICE> unrelated ask {i}", channel="C9") for i in range(2)]
    for ask in asks:
        slack(node, ask)
    keys = [f"slack:C9:{a['event']['ts']}" for a in asks]
    wait_rows(node, "both asks worked", lambda r: all(any(x["conversation_key"] == k for x in r) for k in keys),
              timeout=60, type="agent_turn_completed")
    for key in keys:
        [turn] = turns(node, key)
        assert len(turn["trigger_ids"]) == 1
    assert not [c for c in rows(node, type="notifications_coalesced") if c["partition_key"] in keys]


def test_one_delivery_is_one_trace_from_the_webhook_to_the_completed_turn(company_node):
    node = company_node
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    answer = github(node, "@octo-alice one trace", 41, traceparent=f"00-{trace_id}-{parent}-01")
    assert answer["trace_id"] == trace_id
    wait_rows(node, "the turn under the delivery's trace", lambda r: any(x["trace_id"] == trace_id for x in r),
              timeout=60, type="agent_turn_completed")
    events = trace_rows(node, trace_id)
    kinds = {e.get("label") or e["type"] for e in events}  # a delivery's row is filed under its label
    assert {"webhook:issue_comment", "external_notification", "agent_turn_started", "agent_turn_completed"} <= kinds
    assert {e["trace_id"] for e in events} == {trace_id}
    [record] = [e for e in events if e.get("label") == "webhook:issue_comment"]
    [started] = [e for e in events if e["type"] == "agent_turn_started"]
    [woke] = [e for e in events if e["type"] == "external_notification" and e["span_id"] == started["parent_span_id"]]
    assert record["parent_span_id"] == parent  # webhook.receive under the caller's span
    assert woke["parent_span_id"] == record["span_id"]  # notify.route under webhook.receive
    assert started["parent_span_id"] == woke["span_id"]  # the turn under notify.route
