"""open_coordination: the records are on the broker's KV whatever `coordination.type` says;
the type chooses where the leases live; callers get the contract either way."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.coord.contract import CoordError, CoordStore
from engine.coord.factory import lease_ttl_seconds, open_coordination, stream_clustered, stream_replicas
from engine.coord.local import LocalCoord
from engine.coord.natskv import CREATE_BUDGET_CLUSTERED_SECONDS, CREATE_BUDGET_SECONDS, NatsKVCoord
from engine.queue.dial import Dial
from tests.coord.conftest import broker
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(60)


def _config(kind=None, ttl=None, replicas=None):
    coordination = SimpleNamespace(type=kind, lease_ttl_seconds=ttl)
    return SimpleNamespace(node=SimpleNamespace(id="node-1"), coordination=coordination,
                           stream=SimpleNamespace(replicas=replicas))


@pytest.fixture
async def server(tmp_path):
    s = broker(tmp_path, "factory-test")
    await s.start()
    yield s
    await s.stop()


async def test_beside_the_memory_queue_twin_both_are_the_in_process_twin():
    records, leases = await open_coordination(_config("local"))
    assert isinstance(records, LocalCoord) and records is leases and isinstance(records, CoordStore)
    assert isinstance((await open_coordination({"coordination": {"type": "local"}})).records, LocalCoord)
    assert isinstance((await open_coordination(SimpleNamespace())).records, LocalCoord)  # the default


async def test_local_keeps_the_records_on_the_broker_and_only_the_leases_in_process(server):
    coordination = await open_coordination(_config("local"), dial=Dial(server.client_url, token=server.token))
    try:
        assert isinstance(coordination.records, NatsKVCoord)
        assert isinstance(coordination.leases, LocalCoord)
        await coordination.records.ensure_bucket("crewlet_probe")
        await coordination.records.create("crewlet_probe", "k", b"v")
        assert (await coordination.records.get("crewlet_probe", "k")).value == b"v"
    finally:
        await coordination.close()
    assert coordination.records.link == coordination.leases.link == "closed"


async def test_the_default_type_is_local_with_the_records_on_the_broker(server):
    coordination = await open_coordination(SimpleNamespace(), dial=Dial(server.client_url, token=server.token))
    try:
        assert isinstance(coordination.records, NatsKVCoord) and isinstance(coordination.leases, LocalCoord)
    finally:
        await coordination.close()


async def test_embedded_kv_puts_the_leases_on_the_same_kv(server):
    coordination = await open_coordination(_config("embedded-kv", replicas=1), dial=Dial(server.client_url, token=server.token))
    try:
        assert isinstance(coordination.records, NatsKVCoord) and coordination.leases is coordination.records
        assert coordination.records.link == "up"
    finally:
        await coordination.close()


async def test_embedded_kv_without_a_broker_url_is_refused_by_name():
    with pytest.raises(CoordError) as refused:
        await open_coordination(_config("embedded-kv"))
    assert str(refused.value) == ("coord: coordination.type: embedded-kv rides the stream's own broker; "
                                  "open it with the broker's dial (the stream is not up yet?)")


async def test_an_unknown_type_is_refused_by_name():
    with pytest.raises(CoordError) as refused:
        await open_coordination({"coordination": {"type": "redis"}})
    assert str(refused.value) == "coord: coordination.type: 'redis' is not one of local, embedded-kv"


def test_the_lease_ttl_comes_from_the_config():
    assert lease_ttl_seconds(_config("local", ttl=30)) == 30.0
    assert lease_ttl_seconds(_config("local")) == 45.0
    assert lease_ttl_seconds({}) == 45.0


async def test_stream_replicas_reaches_the_coordination_buckets(server):
    """A node whose stream.replicas asks more than a bucket keeps refuses to adopt it (the
    count reaches the KV: the records would otherwise sit on fewer disks than the config says)."""
    dial = Dial(server.client_url, token=server.token)
    one = await open_coordination({"stream": {"replicas": 1}}, dial=dial)
    try:
        await one.records.ensure_bucket("crewlet_probe")
    finally:
        await one.close()
    three = await open_coordination({"node": {"id": "node-1"}, "stream": {"replicas": 3}}, dial=dial)
    try:
        with pytest.raises(CoordError) as refused:
            await three.records.ensure_bucket("crewlet_probe")
        assert str(refused.value) == (
            "coord: bucket crewlet_probe keeps 1 replica, below the 3 stream.replicas asks: the leases, the fencing "
            "epochs and the company's records would be on fewer disks than the config claims. A booting node never "
            "rewrites what the fleet shares: resize it deliberately (nats stream update KV_crewlet_probe --replicas=3), "
            "or set stream.replicas back to 1")
    finally:
        await three.close()


@pytest.mark.parametrize("with_broker", [False, True], ids=["twin", "broker"])
async def test_the_in_process_leases_keep_the_clock_they_are_given(server, with_broker):
    now = [1000.0]
    dial = Dial(server.client_url, token=server.token) if with_broker else None
    coordination = await open_coordination(_config("local"), dial=dial, clock=lambda: now[0])
    try:
        await coordination.leases.ensure_bucket("crewlet_leases_probe")
        await coordination.leases.create("crewlet_leases_probe", "seat", b"node-1", ttl=45)
        now[0] += 44
        assert (await coordination.leases.get("crewlet_leases_probe", "seat")).value == b"node-1"
        now[0] += 2
        assert await coordination.leases.get("crewlet_leases_probe", "seat") is None  # lapsed on the clock given
    finally:
        await coordination.close()


def test_the_stream_config_says_replicas_and_whether_the_broker_has_peers():
    assert stream_replicas({}) == stream_replicas({"stream": {}}) == 1
    assert stream_replicas(SimpleNamespace(stream=SimpleNamespace(replicas=3))) == 3
    assert stream_clustered({}) is False
    assert stream_clustered({"stream": {"type": "embedded"}}) is False
    assert stream_clustered({"stream": {"type": "nats"}}) is True  # an external server
    assert stream_clustered({"stream": {"type": "embedded", "cluster": {"name": "fleet"}}}) is True
    assert stream_clustered(SimpleNamespace(stream=SimpleNamespace(type="embedded", cluster=None))) is False


@pytest.mark.parametrize("stream, budget", [({}, CREATE_BUDGET_SECONDS), ({"type": "nats"}, CREATE_BUDGET_CLUSTERED_SECONDS)],
                         ids=["own broker", "broker with peers"])
async def test_a_broker_with_peers_gives_the_records_a_members_longer_create_budget(server, stream, budget):
    coordination = await open_coordination({"stream": stream}, dial=Dial(server.client_url, token=server.token))
    try:
        assert coordination.records.create_budget_seconds == budget
    finally:
        await coordination.close()


async def test_the_node_hears_when_the_records_connection_is_closed_for_good(tmp_path):
    gone = broker(tmp_path, "factory-gone")
    await gone.start()
    reasons: list[str] = []
    coordination = await open_coordination({}, dial=Dial(gone.client_url, token=gone.token, max_reconnect_attempts=2),
                                           on_closed=reasons.append)
    try:
        await gone.stop()

        async def heard() -> bool:
            return bool(reasons)

        await eventually(heard, timeout=20, message="the records' client to give up and say so")
        assert reasons[0].startswith("coord: the NATS client closed the coordination connection for good")
    finally:
        await coordination.close()
