"""What only the NATS KV backend has: its key encoding, and a bucket laid out the way every
NATS KV client lays one out, with no direct get so no read is answered by a lagging replica."""
from __future__ import annotations

import asyncio

import nats
import pytest

from engine.coord.natskv import NatsKVCoord, decode_key, encode_key
from tests.coord.conftest import broker

pytestmark = pytest.mark.timeout(60)


def test_any_key_becomes_one_subject_token_and_back():
    for key in ["seat:alice", "node:n-1.zone", "a b", "=3A", "ünï", "*", ">", "worker:learning/pass"]:
        token = encode_key(key)
        assert all(ch.isalnum() and ch.isascii() or ch in "-_/=" for ch in token)
        assert decode_key(token) == key
    assert encode_key("seat:alice") == "seat=3Aalice"
    assert encode_key("seat:").startswith(encode_key("seat"))  # a prefix stays a prefix


@pytest.fixture
async def server(tmp_path):
    s = broker(tmp_path, "natskv-test")
    await s.start()
    yield s
    await s.stop()


async def test_a_bucket_is_a_kv_stream_with_no_direct_get(server):
    store = await NatsKVCoord.connect(server.client_url, server.token)
    nc = await nats.connect(server.client_url, token=server.token)
    try:
        await store.ensure_bucket("crewlet_layout", max_age=3600)
        info = await nc.jetstream().stream_info("KV_crewlet_layout")
        assert info.config.subjects == ["$KV.crewlet_layout.>"]
        assert info.config.max_msgs_per_subject == 1
        assert not info.config.allow_direct
        assert info.config.allow_msg_ttl
        assert info.config.max_age == 3600
    finally:
        await nc.close()
        await store.close()


async def test_a_stock_kv_client_reads_what_the_store_wrote_and_back(server):
    store = await NatsKVCoord.connect(server.client_url, server.token)
    nc = await nats.connect(server.client_url, token=server.token)
    try:
        await store.ensure_bucket("crewlet_shared")
        rev = await store.create("crewlet_shared", "seat:alice", b"from-store")
        kv = await nc.jetstream().key_value("crewlet_shared")
        entry = await kv.get("seat=3Aalice")
        assert (entry.value, entry.revision) == (b"from-store", rev)
        await kv.put("node=3An1", b"from-client")
        assert (await store.get("crewlet_shared", "node:n1")).value == b"from-client"
        assert await store.keys("crewlet_shared") == ["node:n1", "seat:alice"]
    finally:
        await nc.close()
        await store.close()


async def test_the_link_reads_down_while_the_broker_is_away_and_up_when_it_returns(tmp_path):
    from engine.coord.contract import Unavailable
    from tests.coord.conftest import NatsServer
    from tests.ports import PortHold
    from tests.queue.waiting import eventually

    hold = PortHold()  # a fixed port, so the client redials the same address once it is back
    server = NatsServer(tmp_path / "fixed", "natskv-link", port=hold.port)
    await server.start()
    store = await NatsKVCoord.connect(server.client_url, server.token, timeout=1.0)
    try:
        await store.ensure_bucket("crewlet_link")
        await store.put("crewlet_link", "k", b"v")
        assert store.link == "up"
        await server.stop()

        async def down() -> bool:
            return store.link == "down"

        await eventually(down, message="the link to read down")
        with pytest.raises(Unavailable):
            await store.get("crewlet_link", "k")
        await server.start()  # the same address and store directory

        async def up() -> bool:
            return store.link == "up"

        await eventually(up, timeout=20, message="the link to come back up")
        assert (await store.get("crewlet_link", "k")).value == b"v"
    finally:
        await store.close()
        await server.stop()
    assert store.link == "closed"


async def test_a_connection_closed_for_good_is_reported_once_with_its_reason(tmp_path):
    from tests.coord.conftest import NatsServer
    from tests.queue.waiting import eventually

    server = NatsServer(tmp_path / "gone", "natskv-gone")
    await server.start()
    reasons: list[str] = []
    store = await NatsKVCoord.connect(server.client_url, server.token, reconnect_attempts=2,
                                      on_closed=reasons.append)
    try:
        await server.stop()

        async def closed() -> bool:
            return store.link == "closed" and bool(reasons)

        await eventually(closed, timeout=20, message="the client to give up and say so")
        assert len(reasons) == 1 and reasons[0].startswith("coord: the NATS client closed")
    finally:
        await store.close()
    assert len(reasons) == 1  # our own close is not news


async def test_closing_the_store_is_not_reported_as_a_loss(server):
    reasons: list[str] = []
    store = await NatsKVCoord.connect(server.client_url, server.token, on_closed=reasons.append)
    await store.close()
    assert store.link == "closed" and reasons == []


async def test_a_listings_temporary_consumer_is_reaped_soon_after_its_pass(server):
    # Every listing is a pass over a temporary consumer; the client's own default keeps one for
    # five minutes, and a bucket holds a bounded number: a fleet listing leases several times a
    # second filled crewlet_leases until every listing failed ("maximum consumers limit reached").
    store = await NatsKVCoord.connect(server.client_url, server.token)
    nc = await nats.connect(server.client_url, token=server.token)
    try:
        await store.ensure_bucket("crewlet_passes")
        await store.create("crewlet_passes", "seat:alice", b"v")
        for _ in range(20):
            assert await store.keys("crewlet_passes") == ["seat:alice"]
        js = nc.jetstream()
        assert (await js.stream_info("KV_crewlet_passes")).config.max_consumers >= 100_000
        deadline = asyncio.get_running_loop().time() + 30
        while (await js.stream_info("KV_crewlet_passes")).state.consumer_count:
            assert asyncio.get_running_loop().time() < deadline, "the passes' consumers outlived them"
            await asyncio.sleep(0.5)
    finally:
        await nc.close()
        await store.close()
