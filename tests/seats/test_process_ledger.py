"""A node killed after its turn completed and before the ack landed: the redelivery is skipped by
the completion ledger, out loud and exactly once (seed 000, "Routing": "a turn that finished but
whose delivery was never acked is not re-run, because the completion ledger records what
shipped"; seats/host.py: the ledger record is written before the ack).

A real node process on a fleet's NATS server, reached through a proxy that reads the wire
(tests/node/natsproxy.py): it keeps back the node's acknowledgement of alice's trigger and cuts
that connection off at that byte, and the test SIGKILLs the node then. So at the kill the
broker holds the ledger record (written, and answered, before the ack was sent) and an
unacknowledged delivery. The restarted node takes alice back at once; the trigger comes back
when the product's ack window (a minute) runs out, and is skipped. What was published is read
off the broker by a tap, not from a killed node's store.
"""
from __future__ import annotations

import signal

import pytest

from engine.queue import topics
from tests.node.external import ExternalNats
from tests.node.harness import ADMIN, READER, NodeProcess, eventually
from tests.node.natsproxy import NatsProxy
from tests.node.tap import Tap

pytestmark = pytest.mark.timeout(300)

COMPANY = """
name: nimbus
providers:
  llm:
    - {name: local, kind: scripted, delay_seconds: 0.1, reply: "done"}
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, reports_to: maya}
"""
ACK_WINDOW = 60  # contract.py, pinned by tests/test_contract_numbers.py: the redelivery comes back within it
TYPES = ("agent_turn_started", "agent_turn_completed", "turn_trigger_skipped")


def _for(tap: Tap, event_type: str, trigger: str) -> list[dict]:
    return [m for m in tap.of(event_type) if trigger in (m.get("trigger_ids") or [m.get("trigger_id")])]


def _mailbox_settled(node: NodeProcess) -> bool:
    status, body, _ = node.get("/seats/alice", READER)
    return status == 200 and body["mailbox"] is not None and body["mailbox"]["total"] == 0


def test_a_node_killed_between_the_ledger_record_and_the_ack_skips_the_redelivery_exactly_once(tmp_path):
    fleet = ExternalNats(tmp_path / "nats").start()
    proxy = NatsProxy(fleet.port).start()
    tap = Tap(fleet.url, fleet.token, [topics.event_subject(t) for t in TYPES]).start()
    node = NodeProcess(home=tmp_path / "node-1", node_id="node-1")
    config = {"stream": f'{{type: nats, url: "{proxy.url()}", token: "{fleet.token}"}}', "coordination": "embedded-kv"}
    try:
        node.start(company=COMPANY, **config)
        node.wait_ready()
        eventually(lambda: "alice" in node.probe("/health")[1].get("seats", ()), 30, "node-1 to hold alice", node)
        proxy.hold_ack(topics.durable_name(topics.agent_inbox("alice"), topics.inbox_group("alice")))
        status, body, _ = node.post("/seats/alice/tasks", {"text": "ship the release notes"}, token=ADMIN)
        assert status == 202, body
        trigger = body["event_id"]
        [held] = eventually(proxy.acks_held, 60, "the node to acknowledge alice's trigger", node)
        node.signal(signal.SIGKILL)
        node.wait_exit()
        assert held.split(".")[4] == "1"  # the first delivery's ack: the turn ran once before the kill
        [completed] = eventually(lambda: _for(tap, "agent_turn_completed", trigger), 30, "the completed turn on the broker")
        assert completed["outcome"] == "completed"

        node.start(company=None, **config)
        node.wait_ready()
        [skipped] = eventually(lambda: _for(tap, "turn_trigger_skipped", trigger), ACK_WINDOW + 60,
                               "the redelivered trigger to be skipped", node)
        assert (skipped["reason"], skipped["worked_by_turn_id"]) == ("already worked", completed["turn_id"])
        assert skipped["node"] == "node-1" and skipped["trigger_type"] == "task_assigned"
        # The skip acked it: the mailbox is empty, so nothing can come back again.
        eventually(lambda: _mailbox_settled(node), 30, "alice's mailbox to be settled", node)
        assert len(_for(tap, "turn_trigger_skipped", trigger)) == 1
        assert len(_for(tap, "agent_turn_started", trigger)) == 1  # the turn ran once, before the kill
        assert len(_for(tap, "agent_turn_completed", trigger)) == 1
        assert [line.get("trigger_id") for line in node.log_lines()
                if line.get("msg") == "turn_trigger_skipped"] == [trigger]
    finally:
        tap.stop()
        node.stop()
        proxy.stop()
        fleet.stop()
