"""The scheduler fires exactly once per due time across a SIGKILL of the duty's holder and across
a node restart (seed 000, "Routing", producer 2; seed 002, the `workers` role's singleton
scheduler tick on a lease with a fencing epoch).

Real node processes on a fleet's NATS server, a seconds-granular schedule, and the product's
scheduler tick; the lease TTL is the Tier A setting `coordination.lease_ttl_seconds`, short so a
peer takes the duty in seconds. What was fired is read off the broker by a tap on
`crewlet.events.scheduled_task_fired`, not from a killed node's store. "Exactly once" is
checked as: no due time fired twice, and between two consecutive fires every due time in
between is counted in the later fire's `missed` -- none vanished, none doubled.
"""
from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from engine.config.cron import due_between
from tests.node.external import ExternalNats
from tests.node.harness import ADMIN, READER, ROOT, NodeProcess, clean_env, eventually
from tests.node.tap import Tap

pytestmark = pytest.mark.timeout(240)


def company(cron: str) -> str:
    return f"""
name: nimbus
providers:
  llm:
    - {{name: local, kind: scripted, delay_seconds: 0, reply: "done"}}
org:
  seats:
    - {{handle: maya, kind: human, role: founder}}
    - {{handle: carol, kind: agent, role: pm}}
schedules:
  - {{name: tick, seat: carol, cron: "{cron}", task: "Say the time"}}
"""


def schedule_command(node: NodeProcess, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "crewlet_schedule", *args, "--config", str(node.home / "crewlet.yaml")],
                          cwd=ROOT, env={**clean_env(), "CREWLET_API_TOKEN": ADMIN}, capture_output=True, text=True, timeout=60)


def _due(fire: dict) -> datetime:
    return datetime.fromisoformat(fire["scheduled_for"].replace("Z", "+00:00"))


def _fires(tap: Tap) -> list[dict]:
    return sorted((f for f in tap.of("scheduled_task_fired") if not f.get("manual")), key=_due)


def assert_each_due_time_fired_once(fires: list[dict], cron: str) -> None:
    dues = [_due(f) for f in fires]
    assert len(dues) == len(set(dues)), f"a due time fired twice: {dues}"
    for before, after in itertools.pairwise(fires):
        _, between = due_between(cron, timezone.utc, _due(before), _due(after) - timedelta(microseconds=1), cap=10_000)
        assert after["missed"] == between, f"{_due(after)} says {after['missed']} missed, {between} passed since {_due(before)}"


def _holder(node: NodeProcess) -> str | None:
    answer = node.probe("/health")
    if answer is None:
        return None
    status, body, _ = node.get("/schedules", READER)
    holder = (body or {}).get("items", [{}])[0].get("holder") if status == 200 else None
    return holder["node"] if holder else None


def test_a_sigkill_of_the_duty_holder_hands_the_schedule_over_and_no_due_time_fires_twice(tmp_path):
    cron = "*/2 * * * * *"
    fleet = ExternalNats(tmp_path / "nats").start()
    tap = Tap(fleet.url, fleet.token, ["crewlet.events.scheduled_task_fired"]).start()
    nodes = [NodeProcess(home=tmp_path / f"node-{i}", node_id=f"node-{i}") for i in (1, 2)]
    config = {"stream": fleet.stream_block(), "coordination": "embedded-kv", "ttl": 3, "sweep": 0.3}
    try:
        nodes[0].start(company=company(cron), **config)
        nodes[0].wait_ready()
        nodes[1].start(company=None, **config)
        nodes[1].wait_ready()
        eventually(lambda: len(_fires(tap)) >= 3, 60, "three fires", nodes[0])
        holder_id = eventually(lambda: _holder(nodes[0]), 30, "the scheduler duty's holder", nodes[0])
        holder = next(n for n in nodes if n.node_id == holder_id)
        survivor = next(n for n in nodes if n is not holder)
        holder.signal(signal.SIGKILL)
        holder.wait_exit()
        killed_at = len(_fires(tap))
        eventually(lambda: [f for f in _fires(tap)[killed_at:] if f["node"] == survivor.node_id][2:], 60,
                   "the survivor to fire three times", survivor)
        assert eventually(lambda: _holder(survivor), 30, "the survivor to hold the duty", survivor) == survivor.node_id
        fires = _fires(tap)
        assert_each_due_time_fired_once(fires, cron)
        assert {f["node"] for f in fires[:killed_at]} == {holder.node_id}  # one holder fleet-wide until the kill
    finally:
        tap.stop()
        for node in nodes:
            node.stop()
        fleet.stop()


def test_a_node_restarted_after_a_sigkill_fires_once_for_its_downtime_and_never_twice(tmp_path):
    cron = "* * * * * *"
    fleet = ExternalNats(tmp_path / "nats").start()
    tap = Tap(fleet.url, fleet.token, ["crewlet.events.scheduled_task_fired"]).start()
    node = NodeProcess(home=tmp_path / "node-1", node_id="node-1")
    config = {"stream": fleet.stream_block(), "coordination": "embedded-kv", "ttl": 3, "sweep": 0.3}
    try:
        node.start(company=company(cron), **config)
        node.wait_ready()
        eventually(lambda: len(_fires(tap)) >= 3, 60, "three fires", node)
        node.signal(signal.SIGKILL)
        node.wait_exit()
        before = len(_fires(tap))
        # Down across three due times whatever the machine's pace: a fast boot must not hide them.
        killed_at = datetime.now(timezone.utc)
        eventually(lambda: datetime.now(timezone.utc) >= killed_at + timedelta(seconds=3), 10, "three due times to pass")
        node.start(company=None, **config)  # the fleet's active revision; the fire record is on the broker's KV
        node.wait_ready()
        eventually(lambda: len(_fires(tap)) >= before + 3, 60, "three fires after the restart", node)
        fires = _fires(tap)
        assert_each_due_time_fired_once(fires, cron)
        # The boot's seconds: one fire counting what it missed. (The tap may still have been
        # receiving the killed holder's last fires when `before` was read, and the restart's first
        # fire may be the dead holder's claim published again: so, one among those after the kill.)
        assert sum(1 for f in fires[before:] if f["missed"] >= 1) == 1, [(f.get("scheduled_for"), f["missed"]) for f in fires]
        status, body, _ = node.get("/schedules", READER)
        assert status == 200 and body["items"][0]["last_fire"]["state"] == "published"
        assert body["items"][0]["holder"]["node"] == "node-1" and len(body["items"][0]["next_fires"]) == 3
        # an operator fires it now, through the same path; a name the company lacks is refused by name
        fired = schedule_command(node, "fire", "tick")
        assert fired.returncode == 0, fired.stderr
        event_id = json.loads(fired.stdout)["event_id"]
        manual = eventually(lambda: [f for f in tap.of("scheduled_task_fired") if f.get("manual")], 30, "the manual fire", node)
        assert manual[0]["fired_by"] == "founder" and manual[0]["schedule"] == "tick"
        assert event_id not in {f["id"] for f in _fires(tap)}
        refused = schedule_command(node, "fire", "tock")
        assert refused.returncode != 0 and "'tock' is no schedule" in refused.stderr and "Traceback" not in refused.stderr
        listed = schedule_command(node, "list")
        assert listed.returncode == 0 and json.loads(listed.stdout)["items"][0]["name"] == "tick"
    finally:
        tap.stop()
        node.stop()
        fleet.stop()
