"""A node takes its presence lease again after losing it (seed 002, "Probes": /ready is 503
while the node does not hold its presence lease; "A broker blip is not a node restart"; issue:
"a node that misses or loses its presence lease takes it again when it can").

A real node on a fleet's NATS server, its leases on that server's KV (`coordination.type:
embedded-kv`, the only setting beside an external stream), at the product's lease TTL (45 s,
renewed every 15 s); nothing in the environment shortens a timing. The test forces the loss
the way a peer would cause it: it writes the node's presence entry over with another holder,
unexpired, so the node's next renew finds it taken. While the entry is someone else's the node
stays alive (/health 200) and says it is not ready (/ready 503 presence_lease_not_held); once
the entry is given back, the node's keeper takes it again with a larger fencing epoch and
/ready is 200 again, with no restart.

Under the default `coordination.type: local` the lease lives in the node's own process, where
nothing outside it can take it and a renew after a stall finds it still the node's own.

The second case is the loss the keeper reports by itself: the store silent past the lease's
exclusive window."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest

from engine.coord.leases import LEASES_BUCKET, presence_key
from engine.coord.natskv import NatsKVCoord
from tests.node.external import ExternalNats
from tests.node.harness import NodeProcess, eventually

pytestmark = pytest.mark.timeout(180)

KEEPER_STEP = 15  # the keeper renews (and retakes) every ttl/3 at the default 45 s TTL
SLACK = 15        # a loaded machine's boot and scheduling


def _ready(node: NodeProcess) -> tuple[int, dict]:
    got = node.probe("/ready")
    return (got[0], got[1] or {}) if got is not None else (0, {})


def _lines(node: NodeProcess, msg: str) -> list[dict]:
    return [line for line in node.log_lines() if line.get("msg") == msg]


async def _entry(fleet: ExternalNats, key: str):
    store = await NatsKVCoord.connect(fleet.url, fleet.token, name="test-presence")
    try:
        return await store.get(LEASES_BUCKET, key)
    finally:
        await store.close()


async def _take_over(fleet: ExternalNats, key: str) -> int:
    """Write the presence entry over as another holder's, unexpired for an hour; its revision."""
    store = await NatsKVCoord.connect(fleet.url, fleet.token, name="test-presence")
    try:
        entry = await store.get(LEASES_BUCKET, key)
        held = json.loads(entry.value)
        now = time.time()
        forged = {**held, "holder": "node-9", "acquired_at": now, "renewed_at": now,
                  "expires_at": now + 3600}
        return await store.update(LEASES_BUCKET, key, json.dumps(forged, sort_keys=True).encode(), entry.revision)
    finally:
        await store.close()


async def _give_back(fleet: ExternalNats, key: str, revision: int) -> None:
    store = await NatsKVCoord.connect(fleet.url, fleet.token, name="test-presence")
    try:
        await store.delete(LEASES_BUCKET, key, expected_revision=revision)
    finally:
        await store.close()


def test_a_presence_lease_taken_from_a_node_is_taken_again_and_ready_follows(nodes, tmp_path):
    fleet = ExternalNats(tmp_path / "nats").start()
    node = nodes("node-1")
    key = presence_key("node-1")
    try:
        node.start(stream=fleet.stream_block(), coordination="embedded-kv")
        node.wait_ready()
        before = json.loads(asyncio.run(_entry(fleet, key)).value)
        assert before["holder"] == "node-1"

        forged = asyncio.run(_take_over(fleet, key))
        eventually(lambda: _ready(node)[0] == 503, KEEPER_STEP + SLACK, "/ready to turn 503 once the lease is taken", node)
        assert _ready(node)[1]["reason"] == "presence_lease_not_held"
        health = node.probe("/health")
        assert health is not None and health[0] == 200 and health[1]["status"] == "ok"  # alive: nothing restarts it
        assert len(_lines(node, "presence_lease_lost")) == 1
        assert _lines(node, "presence_lease_retaken") == []  # another holder's unexpired entry is left alone

        asyncio.run(_give_back(fleet, key, forged))
        eventually(lambda: _ready(node)[0] == 200, KEEPER_STEP + SLACK, "/ready to come back once the lease is taken again", node)
        [retaken] = _lines(node, "presence_lease_retaken")
        after = json.loads(asyncio.run(_entry(fleet, key)).value)
        assert after["holder"] == "node-1" and after["epoch"] == retaken["epoch"] > before["epoch"]
        assert after["data"] == before["data"]  # the roster reads the same roles and labels
    finally:
        node.stop()
        fleet.stop()


def test_a_presence_lease_lost_to_a_silent_store_is_taken_again_when_it_answers(nodes, tmp_path):
    """The loss the keeper reports on its own: the fleet's server SIGSTOPped (its sockets left
    open, as a stalled host leaves them) past the lease's exclusive window (ttl - ttl/3, 30 s),
    so the node's renews go unanswered and it stops counting on the lease; once the server
    answers again the node takes the lease back, with no restart."""
    fleet = ExternalNats(tmp_path / "nats").start()
    node = nodes("node-1")
    key = presence_key("node-1")
    try:
        node.start(stream=fleet.stream_block(), coordination="embedded-kv")
        node.wait_ready()
        before = json.loads(asyncio.run(_entry(fleet, key)).value)

        os.kill(fleet.proc.pid, signal.SIGSTOP)
        try:
            eventually(lambda: _lines(node, "presence_lease_lost"), 45 + KEEPER_STEP + SLACK,
                       "the node to give up its presence lease on a silent store", node)
            status, body = _ready(node)
            assert status == 503 and body["reason"] in ("broker_link_down", "coordination_link_down"), body
            assert node.probe("/health")[0] == 200
        finally:
            os.kill(fleet.proc.pid, signal.SIGCONT)
        eventually(lambda: _ready(node)[0] == 200, KEEPER_STEP + SLACK, "/ready to come back once the store answers", node)
        [retaken] = _lines(node, "presence_lease_retaken")
        after = json.loads(asyncio.run(_entry(fleet, key)).value)
        assert after["holder"] == "node-1" and after["epoch"] == retaken["epoch"] > before["epoch"]
    finally:
        node.stop()
        fleet.stop()
