"""Two nodes against one NATS server (seed 002, "Replica count"; issue: the second node claims
the first's seats within the lease TTL plus one sweep when the first is killed).

Run twice: with the lease TTL and the placement sweep shortened (3 s, 0.3 s) in `make test`,
and at the product's defaults (45 s, 5 s) as a long run (`make test-long`)."""
from __future__ import annotations

import signal

import pytest

from tests.node.external import ExternalNats
from tests.node.harness import eventually

pytestmark = pytest.mark.timeout(300)

SEATS = {"alice", "bob", "carol"}
DEFAULT_TTL, DEFAULT_SWEEP = 45, 5.0  # coordination.lease_ttl_seconds, node.sweep_seconds
TIMINGS = [pytest.param(3, 0.3, id="short-lease"),
           pytest.param(None, None, id="defaults", marks=pytest.mark.long)]


def _seats(node) -> set[str]:
    answer = node.probe("/health")
    return set(answer[1].get("seats", ())) if answer and answer[1] else set()


@pytest.mark.parametrize(("ttl", "sweep"), TIMINGS)
def test_a_second_node_takes_the_seats_of_a_killed_one_and_never_shares_one(nodes, tmp_path, ttl, sweep):
    lapse = (ttl or DEFAULT_TTL) + 2 * (sweep or DEFAULT_SWEEP)  # the leases run out, then a sweep finds them
    fleet = ExternalNats(tmp_path / "nats").start()
    first, second = nodes("node-1"), nodes("node-2")
    try:
        first.start(stream=fleet.stream_block(), coordination="embedded-kv", ttl=ttl, sweep=sweep)
        first.wait_ready()
        eventually(lambda: _seats(first) == SEATS, 30, "node-1 to claim every seat", first)

        second.start(company=None, stream=fleet.stream_block(), coordination="embedded-kv", ttl=ttl, sweep=sweep)
        assert second.wait_ready()["revision"] is not None  # it learned the company from the fleet's pointer

        def shared_fairly() -> bool:
            a, b = _seats(first), _seats(second)
            assert not a & b, f"a seat on two nodes at once: {a & b}"
            return a | b == SEATS and len(a) == 2 and len(b) == 1

        eventually(shared_fairly, 30 + lapse, "the seats to split by fair share", second)

        first.signal(signal.SIGKILL)
        first.wait_exit()

        def took_over() -> bool:
            return _seats(second) == SEATS

        eventually(took_over, 30 + lapse, "node-2 to claim node-1's seats after their leases lapse", second)
        messages = [line["msg"] for line in second.log_lines()]
        assert messages.count("seat_acquired") >= 3
    finally:
        for node in (second, first):  # before their broker, so each drains rather than waits on it
            node.stop()
        fleet.stop()
