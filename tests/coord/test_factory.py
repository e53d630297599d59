"""open_coord: `coordination.type` picks the store; callers get the contract either way."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.coord.contract import CoordError, CoordStore
from engine.coord.factory import lease_ttl_seconds, open_coord
from engine.coord.local import LocalCoord
from engine.coord.natskv import NatsKVCoord
from tests.coord.conftest import broker

pytestmark = pytest.mark.timeout(60)


def _config(kind=None, ttl=None, replicas=None):
    coordination = SimpleNamespace(type=kind, lease_ttl_seconds=ttl)
    return SimpleNamespace(node=SimpleNamespace(id="node-1"), coordination=coordination,
                           stream=SimpleNamespace(replicas=replicas))


async def test_local_is_the_in_process_twin():
    store = await open_coord(_config("local"))
    assert isinstance(store, LocalCoord) and isinstance(store, CoordStore)
    assert isinstance(await open_coord({"coordination": {"type": "local"}}), LocalCoord)
    assert isinstance(await open_coord(SimpleNamespace()), LocalCoord)  # the default


async def test_embedded_kv_rides_the_stream_s_broker(tmp_path):
    server = broker(tmp_path, "factory-test")
    await server.start()
    store = None
    try:
        store = await open_coord(_config("embedded-kv", replicas=1), url=server.client_url,
                                 token=server.token)
        assert isinstance(store, NatsKVCoord)
        await store.ensure_bucket("crewlet_probe")
        await store.create("crewlet_probe", "k", b"v")
        assert (await store.get("crewlet_probe", "k")).value == b"v"
    finally:
        if store is not None:
            await store.close()
        await server.stop()


async def test_embedded_kv_without_a_broker_url_is_refused_by_name():
    with pytest.raises(CoordError, match="coordination.type: embedded-kv"):
        await open_coord(_config("embedded-kv"))


async def test_an_unknown_type_is_refused_by_name():
    with pytest.raises(CoordError, match="coordination.type: 'redis'"):
        await open_coord({"coordination": {"type": "redis"}})


def test_the_lease_ttl_comes_from_the_config():
    assert lease_ttl_seconds(_config("local", ttl=30)) == 30.0
    assert lease_ttl_seconds(_config("local")) == 45.0
    assert lease_ttl_seconds({}) == 45.0
