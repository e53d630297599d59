"""What only the NATS KV backend has: its key encoding, and a bucket laid out the way every
NATS KV client lays one out, with no direct get so no read is answered by a lagging replica."""
from __future__ import annotations

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
