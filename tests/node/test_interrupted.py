"""A turn cut short by a SIGKILL is closed in the record when its node starts again, so no screen
shows the seat working on it, and its trigger still runs again, once (seed 000, "Event Types":
agent_turn_completed's outcome; "The ack clock is real"; seats.interrupted).

A real node process with the configuration a user gets by default (no coordination block, the
product's one-minute ack window); its model is the scripted provider, slow enough that the kill
lands mid-turn. The record is read where an operator reads it: GET /seats, the dashboard's
/ws/stream snapshot and its trace waterfall, GET /events.
"""
from __future__ import annotations

import os
import signal
import time

import pytest
from tests.node.harness import READER, NodeProcess, eventually
from tests.node.stream import seat_row, snapshot

pytestmark = pytest.mark.timeout(300)

COMPANY = """
name: nimbus
providers:
  llm:
    - {name: local, kind: scripted, delay_seconds: 20, reply: "done"}
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, reports_to: maya}
"""
RERUN_WITHIN = 120  # seconds from the restart to the killed turn's trigger completing (issue 12, item 3)


def _events(node: NodeProcess, event_type: str) -> list[dict]:
    status, body, _ = node.get(f"/events?type={event_type}&limit=500", READER)
    assert status == 200, body
    return body["items"]


def _seat(node: NodeProcess) -> dict:
    status, body, _ = node.get("/seats/alice", READER)
    assert status == 200, body
    return body


def _dashboard(node: NodeProcess, trace_id: str) -> tuple[dict, dict]:
    """Alice's row of the dashboard's first frame, and the waterfall of `trace_id`, over /ws/stream."""
    frame, tree = snapshot(node, "waterfall", {"trace_id": trace_id})
    return seat_row(frame, "alice"), tree


def _mid_turn(node: NodeProcess) -> tuple[str, dict]:
    """Give alice a task and wait until her turn runs, its start already in the store (written in
    publish order); the task's id and the turn's start."""
    eventually(lambda: _seat(node)["state"] == "idle", 30, "alice to be hosted", node)
    status, body, _ = node.post("/seats/alice/tasks", {"text": "write the release notes"})
    assert status == 202, body
    started = eventually(lambda: _seat(node)["state"] == "working" and _events(node, "agent_turn_started"), 30,
                         "alice's turn to start", node)[0]
    assert body["event_id"] in started["trigger_ids"]
    return body["event_id"], started


def test_a_turn_killed_mid_way_is_closed_as_interrupted_at_the_restart_and_its_trigger_runs_again(nodes):
    node = nodes("node-1").start(company=COMPANY)
    node.wait_ready()
    task, started = _mid_turn(node)
    node.signal(signal.SIGKILL)
    node.wait_exit()

    node.start(company=COMPANY)
    restarted = time.monotonic()
    node.wait_ready()
    eventually(lambda: _seat(node)["state"] != "unplaced", 30, "alice to be hosted again", node)
    seat = _seat(node)
    assert seat["state"] == "idle" and seat["running"] is None, seat  # the redelivery waits out the ack window

    [end] = [e for e in _events(node, "agent_turn_completed") if e["turn_id"] == started["turn_id"]]
    assert (end["outcome"], end["failed"], end["error_kind"], end["trace_id"]) == \
        ("interrupted", True, "node_stopped", started["trace_id"])
    row, tree = _dashboard(node, started["trace_id"])
    assert row["state"] == "idle" and row["working"] is None, row
    assert (row["last_turn"]["turn_id"], row["last_turn"]["failed"]) == (started["turn_id"], True)
    [turn] = [r for r in tree["rows"] if r["kind"] == "turn"] or [c for r in tree["rows"] for c in r["children"]
                                                                   if c["kind"] == "turn"]
    assert (turn["status"], turn["detail"]["outcome"]) == ("failed", "interrupted"), turn

    # The ack window still brings the trigger back, and it runs once, under a new turn.
    def completed() -> list[dict]:
        return [e for e in _events(node, "agent_turn_completed") if task in e["trigger_ids"] and e["outcome"] == "completed"]

    done = eventually(completed, RERUN_WITHIN - (time.monotonic() - restarted), "the task to run again", node)
    assert len(done) == 1 and done[0]["turn_id"] != started["turn_id"]
    assert len([e for e in _events(node, "agent_turn_started") if task in e["trigger_ids"]]) == 2


def test_a_turn_cut_short_by_its_broker_dying_is_closed_as_interrupted(nodes):
    node = nodes("node-1").start(company=COMPANY)
    node.wait_ready()
    _, started = _mid_turn(node)
    for pid in node.broker_pids():
        os.kill(pid, signal.SIGKILL)
    assert node.wait_exit(60) == 69  # the cut drain: nothing it publishes now reaches a broker

    node.start(company=COMPANY)
    node.wait_ready()
    [end] = [e for e in _events(node, "agent_turn_completed") if e["turn_id"] == started["turn_id"]]
    assert (end["outcome"], end["failed"], end["trace_id"]) == ("interrupted", True, started["trace_id"])
    row, _ = _dashboard(node, started["trace_id"])
    assert row["working"] is None and row["last_turn"]["turn_id"] == started["turn_id"], row
