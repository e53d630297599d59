"""Two nodes against one NATS server (seed 002, "Replica count"; issue: the second node claims
the first's seats within the lease TTL plus one sweep when the first is killed)."""
from __future__ import annotations

import signal

import pytest

from tests.node.external import ExternalNats
from tests.node.harness import eventually

pytestmark = pytest.mark.timeout(180)

TTL = 3
SEATS = {"alice", "bob", "carol"}


def _seats(node) -> set[str]:
    answer = node.probe("/health")
    return set(answer[1].get("seats", ())) if answer and answer[1] else set()


def test_a_second_node_takes_the_seats_of_a_killed_one_and_never_shares_one(nodes, tmp_path):
    fleet = ExternalNats(tmp_path / "nats").start()
    try:
        first, second = nodes("node-1"), nodes("node-2")
        first.start(stream=fleet.stream_block(), coordination="embedded-kv", ttl=TTL, sweep=0.3)
        first.wait_ready()
        eventually(lambda: _seats(first) == SEATS, 30, "node-1 to claim every seat", first)

        second.start(company=None, stream=fleet.stream_block(), coordination="embedded-kv", ttl=TTL, sweep=0.3)
        assert second.wait_ready()["revision"] is not None  # it learned the company from the fleet's pointer

        def shared_fairly() -> bool:
            a, b = _seats(first), _seats(second)
            assert not a & b, f"a seat on two nodes at once: {a & b}"
            return a | b == SEATS and len(a) == 2 and len(b) == 1

        eventually(shared_fairly, 30, "the seats to split by fair share", second)

        first.signal(signal.SIGKILL)
        first.wait_exit()

        def took_over() -> bool:
            return _seats(second) == SEATS

        eventually(took_over, 30, "node-2 to claim node-1's seats after their leases lapse", second)
        messages = [line["msg"] for line in second.log_lines()]
        assert messages.count("seat_acquired") >= 3
    finally:
        fleet.stop()
