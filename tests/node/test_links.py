"""/ready follows the node's links (seed 002, "Probes": not ready "while its broker link is
down"; "the coordination KV ... holds a second connection ... and both are watched"): a broker
that stops answering -- here SIGSTOPped, its sockets left open, as a stalled host leaves them --
turns /ready 503 with the reason named, and a broker that answers again turns it back to 200,
with no restart. The default configuration; nothing in the environment shortens a timing."""
from __future__ import annotations

import os
import signal

import pytest

from tests.node.harness import NodeProcess, eventually

pytestmark = pytest.mark.timeout(120)


def _ready(node: NodeProcess) -> tuple[int, dict]:
    got = node.probe("/ready")
    return got if got is not None else (0, {})


def test_ready_names_a_broker_that_stops_answering_and_recovers_when_it_answers(tmp_path):
    node = NodeProcess(home=tmp_path / "node-1")
    node.start()
    try:
        node.wait_ready()
        [broker] = node.broker_pids()
        os.kill(broker, signal.SIGSTOP)
        try:
            eventually(lambda: _ready(node)[0] == 503, 30, "/ready to turn 503 on a silent broker", node)
            status, body = _ready(node)
            assert body["reason"] in ("broker_link_down", "coordination_link_down")
            health = node.probe("/health")
            assert health is not None and health[0] == 200  # liveness holds: the process is fine
        finally:
            os.kill(broker, signal.SIGCONT)
        eventually(lambda: _ready(node)[0] == 200, 30, "/ready to come back once the broker answers", node)
        assert any(line.get("msg") == "broker_link_down" for line in node.log_lines())
        assert any(line.get("msg") == "broker_link_up" for line in node.log_lines())
    finally:
        node.stop()
