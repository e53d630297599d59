"""Raising stream.replicas on a fleet that already ran (seed 002, "Raising it on a fleet that
already ran needs the existing objects resized"): a booting node never rewrites what the fleet
shares, so a stream or a coordination bucket kept at fewer copies than stream.replicas asks is
refused by name, naming both counts and the command that resizes it."""
from __future__ import annotations

import pytest

from engine.coord.contract import CoordError
from engine.coord.natskv import NatsKVCoord
from tests.node.external import ExternalNats

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path):
    s = ExternalNats(tmp_path / "nats").start()
    yield s
    s.stop()


async def test_a_bucket_kept_at_fewer_replicas_than_asked_is_refused_naming_both_counts(server):
    first = await NatsKVCoord.connect(server.url, server.token)
    await first.ensure_bucket("crewlet_probe")
    await first.close()
    raised = await NatsKVCoord.connect(server.url, server.token, replicas=3)
    try:
        with pytest.raises(CoordError) as refused:
            await raised.ensure_bucket("crewlet_probe")
        said = str(refused.value)
        assert "bucket crewlet_probe keeps 1 replica, below the 3 stream.replicas asks" in said
        assert "nats stream update KV_crewlet_probe --replicas=3" in said
    finally:
        await raised.close()


def test_a_node_restarted_with_more_replicas_than_its_streams_keep_refuses_to_start(nodes, server):
    node = nodes("node-1")
    node.start(stream=server.stream_block(), coordination="embedded-kv")
    node.wait_ready()
    node.stop()
    raised = server.stream_block().replace("type: nats,", "type: nats, replicas: 3,")
    node.start(company=None, stream=raised, coordination="embedded-kv")
    assert node.wait_exit(60) == 1
    said = node.log_text()
    assert "stream CREWLET_AGENT keeps 1 replica, below the 3 stream.replicas asks" in said
    assert "nats stream update CREWLET_AGENT --replicas=3" in said
