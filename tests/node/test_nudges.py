"""What one node changes, another applies at once: a revision activated on one node is applied by
every node on the fleet's nudge (`config_revision_activated`; engine/node/applier.py
`keep_up`), and a seat paused through one node is held by the node running it on the pause's
event (`seat_paused`; seats/runtime.py). Seed 002, "Running the Engine + API"; seed 000, "Busy
agents queue; held agents wait on the broker".

Two real node processes on a fleet's NATS server with the product's own timings: the revision
poll and the pause poll at their 5 s defaults, the lease TTL at 45 s. Each poll is only the
backstop for a missed event, and its period starts again whenever the node looks (the revision
poll after any look, the pause poll after any pause event). So each case first makes one
change and waits for it to land, which starts the poll's period on the applying node, then
makes the change it measures: it must land within half a period, and the applying node's log
must say the event, not the poll, brought it. A node whose nudge is broken applies the second
change only when its poll comes round, a whole period later, and says so.
"""
from __future__ import annotations

import time

import pytest

from tests.node.external import ExternalNats
from tests.node.harness import ADMIN, READER, NodeProcess, eventually

pytestmark = pytest.mark.timeout(240)

POLL = 5.0  # the default revision poll and pause poll (tests/test_contract_numbers.py pins it)
AT_ONCE = POLL / 2

COMPANY = """
name: nimbus
providers:
  llm:
    - {name: local, kind: scripted, delay_seconds: 0.1, reply: "ok"}
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, placement: {node: node-2}}
    - {handle: bob, kind: agent, role: engineer, placement: {node: node-2}}
    - {handle: carol, kind: agent, role: engineer, placement: {node: node-1}}
    - {handle: dave, kind: agent, role: engineer, placement: {node: node-1}}
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """node-1 (where the changes are made, running carol and dave) and node-2 (running alice and bob: a fair
    share of two each), defaults throughout."""
    home = tmp_path_factory.mktemp("nudges")
    broker = ExternalNats(home / "nats").start()
    first = NodeProcess(home=home / "node-1", node_id="node-1")
    second = NodeProcess(home=home / "node-2", node_id="node-2")
    config = {"stream": broker.stream_block(), "coordination": "embedded-kv"}
    try:
        first.start(company=COMPANY, **config)
        first.wait_ready()
        second.start(company=None, **config)  # the company from the fleet's pointer
        second.wait_ready()
        eventually(lambda: {"alice", "bob"} <= set(second.probe("/health")[1].get("seats", ())), 60,
                   "node-2 to run alice and bob", second)
        yield first, second
    finally:
        second.stop()
        first.stop()
        broker.stop()


def _revision(node: NodeProcess) -> int | None:
    answer = node.probe("/health")
    return answer[1].get("revision") if answer and answer[1] else None


def _logged(node: NodeProcess, msg: str, **fields) -> list[dict]:
    return [line for line in node.log_lines() if line.get("msg") == msg and all(line.get(k) == v for k, v in fields.items())]


def _put_config(node: NodeProcess, text: str) -> int:
    status, body, _ = node.put("/config", text.encode())
    assert status == 200, body
    return body["generation"]


def test_a_revision_put_on_one_node_is_applied_by_the_other_at_once_on_the_nudge(fleet):
    first, second = fleet
    start = _revision(second)
    # The first change starts node-2's poll period when it applies it.
    warm = _put_config(first, COMPANY + "    - {handle: frank, kind: human, role: engineer}\n")
    assert warm == start + 1
    eventually(lambda: _revision(second) == warm, 30, "node-2 to apply the first revision", second)
    measured = _put_config(first, COMPANY + "    - {handle: erin, kind: human, role: engineer}\n")
    put_at = time.monotonic()
    eventually(lambda: _revision(second) == measured, AT_ONCE, f"node-2 to apply revision {measured} within {AT_ONCE} s", second)
    took = time.monotonic() - put_at
    [applied] = eventually(lambda: _logged(second, "config_revision_applied", generation=measured), 10,
                           "node-2's log of the apply", second)
    assert applied["woken_by"] == "nudge", f"node-2 applied it on its {applied['woken_by']} after {took:.2f} s"
    status, body, _ = second.get("/config", READER)
    assert status == 200 and "erin" in body["document"] and body["generation"] == measured


def _holds(node: NodeProcess, handle: str) -> list[str]:
    status, body, _ = node.get(f"/seats/{handle}", READER)
    assert status == 200, body
    return body["holds"]


def _pause(node: NodeProcess, handle: str) -> None:
    status, body, _ = node.post(f"/seats/{handle}/pause", {"reason": "checking the deploy"}, token=ADMIN)
    assert status == 200, body


def test_a_seat_paused_through_one_node_is_held_at_once_by_the_node_running_it(fleet):
    first, second = fleet
    # The first pause starts node-2's pause-poll period when its event arrives.
    _pause(first, "bob")
    eventually(lambda: "paused" in _holds(second, "bob"), 30, "node-2 to hold bob's inbox", second)
    _pause(first, "alice")
    paused_at = time.monotonic()
    eventually(lambda: "paused" in _holds(second, "alice"), AT_ONCE, f"node-2 to hold alice's inbox within {AT_ONCE} s", second)
    took = time.monotonic() - paused_at
    [applied] = eventually(lambda: _logged(second, "seat_pause_applied", seat="alice", paused=True), 10,
                           "node-2's log of the pause", second)
    assert applied["learned_by"] == "event", f"node-2 learned of the pause by its {applied['learned_by']} after {took:.2f} s"
    # A task for the paused seat waits in its mailbox; the resume, made on node-1, releases it on node-2.
    status, body, _ = first.post("/seats/alice/tasks", {"text": "when you are back"}, token=ADMIN)
    assert status == 202, body
    for handle in ("alice", "bob"):
        status, body, _ = first.post(f"/seats/{handle}/resume", {}, token=ADMIN)
        assert status == 200, body
    eventually(lambda: _holds(second, "alice") == [] and _holds(second, "bob") == [], AT_ONCE * 4, "the holds lifted", second)
    eventually(lambda: _logged(second, "seat_turn_started", seat="alice"), 30, "alice's task to run after the resume", second)
