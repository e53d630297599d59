"""The node watches both of its broker connections (engine.node.links; seed 002, "Probes":
/ready is 503 while the broker link is down). A broker that stops answering -- here a real
nats-server frozen with SIGSTOP, its sockets still open, so the clients see no disconnect --
turns /ready 503 naming the link within one bounded question, and an answer turns it back."""
from __future__ import annotations

import os
import signal

import pytest

from engine.coord.natskv import NatsKVCoord
from engine.node.links import LinkWatch
from engine.node.probes import SERVING, NodeState
from engine.queue.broker import EmbeddedBroker
from engine.queue.dial import Dial
from engine.queue.jetstream import JetStreamQueue
from notify.edge import ensure_work_queue

pytestmark = pytest.mark.timeout(60)


async def test_a_broker_that_stops_answering_turns_ready_503_naming_the_link_and_back(tmp_path):
    broker = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="links")
    await broker.start()
    queue = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-a")
    coord = await NatsKVCoord.connect(broker.client_url, broker.token)
    try:
        await ensure_work_queue(queue)
        state = NodeState(node_id="node-a", roles=("data",), phase=SERVING, configured=True, broker_link="up",
                          presence_held=True)
        watch = LinkWatch(state, queue, coord, timeout=0.5)
        assert await watch.check_once() == (True, True)
        assert state.ready() == (200, {"status": "ready", "node": "node-a"})

        os.kill(broker.pid, signal.SIGSTOP)
        try:
            assert await watch.check_once() == (False, False)
            status, body = state.ready()
            assert (status, body["reason"]) == (503, "broker_link_down")
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        assert await watch.check_once() == (True, True)
        assert state.ready()[0] == 200

        state.coord_link = "down"  # the coordination connection alone: named as such
        assert state.ready()[1]["reason"] == "coordination_link_down"
    finally:
        await coord.close()
        await queue.close()
        await broker.stop()
