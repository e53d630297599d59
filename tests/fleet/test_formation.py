"""A fresh three-member cluster forms every time (seed 002, "Every node embeds a member of one
cluster", the boot's three waits, "A clustered node is given longer to create them", "A
dropped stream or consumer lookup is asked again"): three nodes started together, staggered,
or with one late all reach /ready, each embedding a member of one cluster on 127.0.0.1.

`make test` forms each shape once; `make chaos` (CREWLET_CHAOS=long) forms fresh clusters
started together twenty times over and prints how many converged."""
from __future__ import annotations

import os
import time

import pytest

from tests.fleet.fleet import EmbeddedFleet
from tests.node.harness import COMPANY, eventually

LONG = os.environ.get("CREWLET_CHAOS") == "long"
ATTEMPTS = 20 if LONG else 1

pytestmark = pytest.mark.timeout(3600 if LONG else 300)


def _all_serve(fleet: EmbeddedFleet) -> None:
    health = fleet.wait_ready(240)
    assert {h["revision"] for h in health} == {health[0]["revision"]} and health[0]["revision"] is not None
    eventually(lambda: set().union(*(fleet.seats(n) for n in fleet.nodes)) == {"alice", "bob", "carol"}, 60,
               "the fleet to place every seat", fleet.nodes[0])


def test_members_started_together_converge(tmp_path):
    converged, took = 0, []
    for attempt in range(ATTEMPTS):
        fleet = EmbeddedFleet(tmp_path / f"attempt-{attempt}")
        began = time.monotonic()
        try:
            fleet.start(COMPANY)
            _all_serve(fleet)
            converged += 1
            took.append(time.monotonic() - began)
        finally:
            fleet.stop()
    print(f"\nformation: {converged} of {ATTEMPTS} fresh three-member clusters started together converged; "
          f"seconds to all ready: {', '.join(f'{t:.1f}' for t in took)}")
    assert converged == ATTEMPTS


def test_members_started_one_after_another_converge(tmp_path):
    fleet = EmbeddedFleet(tmp_path / "staggered")
    try:
        for i, node in enumerate(fleet.nodes):  # the next starts once the one before answers its probes
            fleet.start_node(i, company=COMPANY if i == 0 else None)
            eventually(lambda node=node: node.probe("/health") is not None, 60, f"{node.node_id} to listen", node)
        _all_serve(fleet)
    finally:
        fleet.stop()


def test_two_members_wait_for_a_late_third_and_then_all_serve(tmp_path):
    fleet = EmbeddedFleet(tmp_path / "late")
    try:
        fleet.start_node(0, company=COMPANY)
        fleet.start_node(1)

        def waiting(node) -> bool:  # three replicas asked of two members: placement waits, the boot does not fail
            return any(line.get("msg") in ("jetstream_placement_waiting", "coord_kv_bucket_placement_waiting")
                       for line in node.log_lines())

        for node in fleet.nodes[:2]:
            eventually(lambda node=node: waiting(node), 120, f"{node.node_id} to wait for a third member", node)
            assert node.probe("/ready")[0] == 503
        fleet.start_node(2)
        _all_serve(fleet)
    finally:
        fleet.stop()
