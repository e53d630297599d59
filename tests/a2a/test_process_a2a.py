"""An ask across two nodes, and exactly one answer when the answering node is SIGKILLed mid-turn
(seed 000, "Ephemeral A2A channels": "Works across nodes"; "the node that authorizes the
answer is the one that owns the answering seat"; both hops are inbox deliveries covered by the
completion ledger).

Real node processes on a fleet's NATS server; alice is placed on node-1 and bob on node-2. The
ask is made the way an operator makes one (`manage.py crewlet_a2a ask`, the same
`a2a.service.ask` the a2a_ask tool calls); bob's ordinary scripted turn answers it, and the answer
wakes alice on the other node. Every timing is the product's: the ack window that returns a
killed node's in-flight mail (a minute), the lease TTL and the placement sweep (a restarted node
takes its own seats back at once). Answer wakes are counted off the broker by a tap on alice's
inbox; alice's turns from her store.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.node.external import ExternalNats
from tests.node.harness import ADMIN, READER, ROOT, NodeProcess, clean_env, eventually
from tests.node.tap import Tap

pytestmark = pytest.mark.timeout(240)


def company(delay: float) -> str:
    return f"""
name: nimbus
providers:
  llm:
    - {{name: local, kind: scripted, delay_seconds: {delay}, reply: "{{seat}} on {{trigger_summary}}"}}
org:
  seats:
    - {{handle: maya, kind: human, role: founder}}
    - {{handle: alice, kind: agent, role: engineer, placement: {{node: node-1}}}}
    - {{handle: bob, kind: agent, role: engineer, placement: {{node: node-2}}}}
"""


def ask(node: NodeProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "crewlet_a2a", *args, "--config", str(node.home / "crewlet.yaml")],
                          cwd=ROOT, env={**clean_env(), "CREWLET_API_TOKEN": ADMIN}, capture_output=True, text=True, timeout=60)


def _events(node: NodeProcess, event_type: str) -> list[dict]:
    status, body, _ = node.get(f"/events?type={event_type}&limit=500", READER)
    assert status == 200, body
    return body["items"]


def _answer_turns(node: NodeProcess) -> list[dict]:
    """alice's completed turns woken by an answer."""
    return [e for e in _events(node, "agent_turn_completed")
            if e.get("agent_handle") == "alice" and e.get("trigger_type") == "a2a_message" and e.get("outcome") == "completed"]


def _holds(node: NodeProcess, handle: str) -> bool:
    answer = node.probe("/health")
    return answer is not None and handle in (answer[1] or {}).get("seats", ())


def _start_pair(tmp_path, fleet, delay: float):
    config = {"stream": fleet.stream_block(), "coordination": "embedded-kv"}
    first = NodeProcess(home=tmp_path / "node-1", node_id="node-1")
    second = NodeProcess(home=tmp_path / "node-2", node_id="node-2")
    first.start(company=company(delay), **config)
    first.wait_ready()
    second.start(company=None, **config)
    second.wait_ready()
    eventually(lambda: _holds(first, "alice"), 30, "node-1 to hold alice", first)
    eventually(lambda: _holds(second, "bob"), 30, "node-2 to hold bob", second)
    return first, second, config


def test_an_ask_on_one_node_is_answered_by_a_seat_on_another_and_wakes_the_asker(tmp_path):
    fleet = ExternalNats(tmp_path / "nats").start()
    tap = Tap(fleet.url, fleet.token, ["crewlet.agent.alice.inbox"]).start()
    first = second = None
    try:
        first, second, _ = _start_pair(tmp_path, fleet, delay=0)
        done = ask(first, "ask", "--asker", "alice", "--target", "bob", "Which port does staging use?")
        assert done.returncode == 0, done.stderr
        channel_id = json.loads(done.stdout)["channel_id"]
        [turn] = eventually(lambda: _answer_turns(first), 60, "alice to be woken by bob's answer", first)
        status, channel, _ = first.get(f"/a2a/channels/{channel_id}", READER)  # any node reads the fleet's record
        assert status == 200 and (channel["state"], channel["closed_by"], channel["message_count"]) == ("closed", "bob", 2)
        [closed] = eventually(lambda: _events(second, "a2a_channel_closed"), 30, "the close in node-2's store", second)
        assert closed["closed_by"] == "bob" and closed["turn_id"] == channel["turn_id"] and closed["duration_ms"] == channel["duration_ms"]
        assert closed["node"] == "node-2"  # authorised and sent by the node holding the answering seat
        [sent] = _events(second, "a2a_message_sent")
        assert sent["body"].startswith("bob on alice asks bob") and sent["trace_id"] == closed["trace_id"]
        [opened] = _events(first, "a2a_channel_opened")
        assert opened["trace_id"] == sent["trace_id"] == turn["trace_id"]  # ask, answer and wake: one trace
        assert [m["id"] for m in tap.of("a2a_message")] == [turn["trigger_id"]]
        # bad asks from the command line: refused by name
        for target, brief, names in (("zed", "hi", "'zed' is no seat"), ("maya", "hi", "'maya' is a human seat"),
                                     ("alice", "hi", "'alice' is you")):
            refused = ask(first, "ask", "--asker", "alice", "--target", target, brief)
            assert refused.returncode != 0 and names in refused.stderr and "Traceback" not in refused.stderr
        listed = ask(first, "channels", "--seat", "bob", "--state", "closed")
        assert listed.returncode == 0 and [c["channel_id"] for c in json.loads(listed.stdout)["items"]] == [channel_id]
    finally:
        tap.stop()
        for node in (second, first):
            if node is not None:
                node.stop()
        fleet.stop()


def test_the_answering_node_killed_mid_turn_still_answers_exactly_once(tmp_path):
    fleet = ExternalNats(tmp_path / "nats").start()
    tap = Tap(fleet.url, fleet.token, ["crewlet.agent.alice.inbox"]).start()
    first = second = None
    try:
        first, second, config = _start_pair(tmp_path, fleet, delay=3)
        done = ask(first, "ask", "--asker", "alice", "--target", "bob", "Is the release branch cut?")
        assert done.returncode == 0, done.stderr
        channel_id = json.loads(done.stdout)["channel_id"]

        def bob_mid_turn() -> bool:
            return any(line.get("msg") == "seat_turn_started" and line.get("seat") == "bob" for line in second.log_lines())

        eventually(bob_mid_turn, 60, "bob's answering turn to start", second)
        second.signal(signal.SIGKILL)
        second.wait_exit()
        status, channel, _ = first.get(f"/a2a/channels/{channel_id}", READER)
        assert status == 200 and channel["state"] == "open"  # killed before its answer
        second.start(company=None, **config)
        second.wait_ready()
        eventually(lambda: _answer_turns(first), 90, "the redelivered ask to be answered", first)
        status, channel, _ = first.get(f"/a2a/channels/{channel_id}", READER)
        assert channel["state"] == "closed" and channel["closed_by"] == "bob"
        # one answer wake on alice's inbox (a wake sent again carries the first one's id), one turn of alice
        eventually(lambda: len(_events(first, "agent_turn_completed")) >= 1, 30, "alice's turn recorded", first)
        assert len(tap.of("a2a_message")) == 1
        assert len(_answer_turns(first)) == 1
    finally:
        tap.stop()
        for node in (second, first):
            if node is not None:
                node.stop()
        fleet.stop()


def _post(node: NodeProcess, path: str, body: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(node.base + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_node_sweeps_an_unanswered_channel_closed_then_deletes_it_on_its_settings(tmp_path):
    # The seed's hour and week, shortened for a node process as settings (the defaults are
    # exercised on a stepped clock in test_ask.py).
    env = {"CREWLET_MAINTENANCE_SWEEP_SECONDS": "0.3", "CREWLET_A2A_IDLE_CLOSE_SECONDS": "1",
           "CREWLET_A2A_RETAIN_CLOSED_SECONDS": "2"}
    node = NodeProcess(home=tmp_path / "node-1", node_id="node-1")
    try:
        node.start(company=company(0).replace("placement: {node: node-2}", "placement: {node: node-1}"), env=env)
        node.wait_ready()
        assert _post(node, "/seats/bob/pause", {"reason": "on leave"})[0] == 200  # bob will not answer
        # A store that did not answer in time is a 503 saying to try again; a client does.
        status, body = eventually(lambda: (lambda answer: answer if answer[0] != 503 else None)(
            _post(node, "/a2a/ask", {"asker": "alice", "target": "bob", "brief": "anyone there?"})), 30, "the ask taken", node)
        assert status == 202, body
        channel_id = body["channel_id"]

        def record():
            status, answer, _ = node.get(f"/a2a/channels/{channel_id}", READER)
            return status, answer

        closed = eventually(lambda: record()[1] if record()[1].get("state") == "closed" else None, 30, "the sweep's close", node)
        assert (closed["closed_by"], closed["turn_id"], closed["reason"], closed["message_count"]) == ("", "", "idle", 1)
        [event] = eventually(lambda: _events(node, "a2a_channel_closed"), 30, "the close recorded", node)
        assert event["summary"].startswith("system closed A2A channel between alice and bob")
        eventually(lambda: record()[0] == 404, 30, "the record deleted after its retention", node)
        assert "kept seven days" in record()[1]["detail"]
        # A 1 MB brief over the API meets the gate's body cap first (the brief's own 64 KiB rule
        # is the service's, tested in test_ask.py); either way nothing is asked.
        status, body = _post(node, "/a2a/ask", {"asker": "alice", "target": "bob", "brief": "x" * (1024 * 1024)})
        assert status == 413 and "body" in body["detail"]
    finally:
        node.stop()
