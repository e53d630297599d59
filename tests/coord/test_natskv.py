"""What only the NATS KV backend has: its key encoding, and a bucket laid out the way every
NATS KV client lays one out, with no direct get so no read is answered by a lagging replica."""
from __future__ import annotations

import asyncio
import json
import logging
import re

import nats
import nats.js.errors
import pytest
from nats.js import api

from engine.coord.contract import CoordError, Unavailable
from engine.coord.natskv import CREATE_BUDGET_SECONDS, NatsKVCoord, decode_key, encode_key
from engine.queue.dial import Dial
from tests.coord.conftest import NatsServer, broker
from tests.queue.waiting import eventually, throughout

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
        await store.ensure_bucket("crewlet_ageless")
        await store.ensure_bucket("crewlet_brief", max_age=30)
        js = nc.jetstream()
        info = await js.stream_info("KV_crewlet_layout")
        assert info.config.subjects == ["$KV.crewlet_layout.>"]
        assert info.config.max_msgs_per_subject == 1  # history 1: a key keeps its last write only
        assert not info.config.allow_direct
        assert info.config.allow_msg_ttl
        assert info.config.max_age == 3600
        # The rest of the layout a stock KV client gives a bucket: a full bucket refuses a new
        # write rather than dropping an old value, a rollup header is honoured, no message is
        # deleted by hand, no bound on the count, on disk, on one replica here (stream.replicas).
        assert info.config.discard == api.DiscardPolicy.NEW
        assert info.config.allow_rollup_hdrs and info.config.deny_delete
        assert info.config.max_msgs == -1
        assert info.config.storage == api.StorageType.FILE
        assert info.config.num_replicas == 1
        # The duplicate window is two minutes, or the bucket's age when that is shorter.
        assert info.config.duplicate_window == 120
        ageless = (await js.stream_info("KV_crewlet_ageless")).config
        assert (ageless.max_age, ageless.duplicate_window) in ((None, 120), (0, 120))
        brief = (await js.stream_info("KV_crewlet_brief")).config
        assert (brief.max_age, brief.duplicate_window) == (30, 30)
    finally:
        await nc.close()
        await store.close()


async def test_a_lone_broker_asked_for_three_replicas_makes_no_bucket(server):
    # stream.replicas reaches the create itself: a broker with no peers refuses a bucket on
    # three disks, and no bucket on one disk is made in its place.
    store = await NatsKVCoord.connect(server.client_url, server.token, replicas=3)
    nc = await nats.connect(server.client_url, token=server.token)
    creates: list[str] = []

    async def heard(msg) -> None:
        creates.append(msg.subject)

    try:
        await nc.subscribe("$JS.API.STREAM.CREATE.KV_crewlet_three", cb=heard)
        await nc.flush()
        with pytest.raises(CoordError) as refused:
            await store.ensure_bucket("crewlet_three")
        assert str(refused.value) == "coord: crewlet_three: replicas > 1 not supported in non-clustered mode"
        with pytest.raises(nats.js.errors.NotFoundError):
            await nc.jetstream().stream_info("KV_crewlet_three")
        # the broker's refusal is final: the create is not sent again for the rest of its budget
        await eventually(lambda: creates, message="the create to be heard")
        assert creates == ["$JS.API.STREAM.CREATE.KV_crewlet_three"]
    finally:
        await nc.close()
        await store.close()


async def test_a_listing_reads_no_live_key_by_itself(server):
    # seed 002, "A coordination read costs one ordered pass": a listing is the pass plus the
    # stream's subject index; only a key the pass did not show live (here the deleted one) is
    # read again from the leader. Every leader read is a request on $JS.API.STREAM.MSG.GET,
    # which another connection may listen to.
    store = await NatsKVCoord.connect(server.client_url, server.token)
    nc = await nats.connect(server.client_url, token=server.token)
    try:
        await store.ensure_bucket("crewlet_listed")
        for key in ("seat:alice", "seat:bob", "node:n1", "gone"):
            await store.put("crewlet_listed", key, b"v")
        await store.delete("crewlet_listed", "gone")
        reads: list[str] = []

        async def heard(msg) -> None:
            reads.append(json.loads(msg.data)["last_by_subj"])

        await nc.subscribe("$JS.API.STREAM.MSG.GET.KV_crewlet_listed", cb=heard)
        await nc.flush()
        assert await store.keys("crewlet_listed") == ["node:n1", "seat:alice", "seat:bob"]
        assert await store.keys("crewlet_listed", prefix="seat:") == ["seat:alice", "seat:bob"]
        await store.get("crewlet_listed", "end")  # one read more, after the listings' own

        async def all_heard() -> bool:
            return bool(reads) and reads[-1] == "$KV.crewlet_listed.end"

        await eventually(all_heard, message="the listings' reads to be heard")
        assert reads == ["$KV.crewlet_listed.gone", "$KV.crewlet_listed.end"]
    finally:
        await nc.close()
        await store.close()


async def test_a_broker_with_no_jetstream_is_unavailable_once_the_create_budget_is_spent(tmp_path):
    # Asked again and again, never answered: the lookup gives up to the create, and the create
    # to Unavailable naming its budget (shortened here; the defaults are pinned in
    # tests/test_contract_numbers.py and by the fleet's formation tests).
    server = NatsServer(tmp_path / "nojs", "natskv-nojs", jetstream=False)
    await server.start()
    store = await NatsKVCoord.connect(server.client_url, server.token)
    store.lookup_budget_seconds, store.create_budget_seconds = 2.0, 3.0
    try:
        with pytest.raises(Unavailable) as refused:
            await store.ensure_bucket("crewlet_nojs")
        assert str(refused.value) == "coord: crewlet_nojs: the broker did not answer its create within 3s"
    finally:
        await store.close()
        await server.stop()


async def test_a_ping_reads_false_from_a_broker_without_jetstream_and_from_one_that_went_silent(tmp_path):
    # What the node's readiness probe reads (seed 002): connected is not enough. A member with
    # JetStream off answers "no responders"; a member that stopped answering (frozen here,
    # its socket still open) is silence, and the ping's own timeout ends the wait.
    server = NatsServer(tmp_path / "nojs", "natskv-ping", jetstream=False)
    await server.start()
    store = await NatsKVCoord.connect(server.client_url, server.token)
    try:
        assert await store.ping(1.0) is False
    finally:
        await store.close()
        await server.stop()
    server = NatsServer(tmp_path / "js", "natskv-ping")
    await server.start()
    store = await NatsKVCoord.connect(server.client_url, server.token)
    try:
        assert await store.ping(2.0) is True
        server.freeze()
        try:
            assert await asyncio.wait_for(store.ping(0.3), 10) is False
        finally:
            server.thaw()
    finally:
        await store.close()
        await server.stop()


async def test_a_bucket_on_three_disks_waits_for_the_third_member_to_join_then_is_made(tmp_path, caplog):
    # seed 002: placement is retried for as long as the cluster answers "no suitable peers",
    # inside the create's budget -- a fleet's nodes boot in any order, and the first to ask for
    # a three-replica bucket must not fail because the third member is still starting.
    from tests.cluster import three_members

    caplog.set_level(logging.WARNING, logger="coord.natskv")
    holds, members = three_members(tmp_path)
    store = made = None
    try:
        await asyncio.gather(members[0].start(), members[1].start())  # two of three: a quorum, not three disks
        store = await NatsKVCoord.connect(members[0].client_url, members[0].token, replicas=3, clustered=True)
        made = asyncio.create_task(store.ensure_bucket("crewlet_three"))
        await eventually(lambda: any(r.getMessage() == "coord_kv_bucket_placement_waiting" for r in caplog.records),
                         30, "the create to wait for a third member")
        assert not made.done()
        await members[2].start()
        for hold in holds:
            hold.release()
        await asyncio.wait_for(made, 90)
        nc = await nats.connect(members[2].client_url, token=members[2].token)
        try:
            assert (await nc.jetstream().stream_info("KV_crewlet_three")).config.num_replicas == 3
        finally:
            await nc.close()
    finally:
        if made is not None and not made.done():
            made.cancel()
        if store is not None:
            await store.close()
        await asyncio.gather(*(m.stop() for m in members), return_exceptions=True)


async def test_a_lookup_and_a_create_nobody_answers_are_each_asked_again_then_unavailable(tmp_path, caplog):
    # seed 002, "A dropped stream or consumer lookup is asked again": a member that is not the
    # metadata leader may drop a request without a word. Here something takes every JetStream
    # request and answers none: the lookup is asked again a second after each silence, then
    # falls through to the create, which is sent again too, until the create's budget is spent
    # (budgets shortened; the one-second lookup wait and retry are the defaults).
    server = NatsServer(tmp_path / "silent", "natskv-silent", jetstream=False)
    await server.start()
    silent = await nats.connect(server.client_url, token=server.token)
    asked: list[str] = []

    async def drop(msg) -> None:
        asked.append(msg.subject)

    await silent.subscribe("$JS.API.>", cb=drop)
    await silent.flush()
    store = await NatsKVCoord.connect(server.client_url, server.token)
    store.lookup_budget_seconds, store.create_budget_seconds, store.create_timeout_seconds = 3.0, 4.0, 1.0
    store.slow_after_seconds = 2.0  # 10 s by default (SLOW_AFTER_SECONDS)
    caplog.set_level(logging.WARNING, logger="coord.natskv")
    try:
        with pytest.raises(Unavailable) as refused:
            await asyncio.wait_for(store.ensure_bucket("crewlet_silent"), 30)
        assert str(refused.value) == "coord: crewlet_silent: the broker did not answer its create within 4s"
        # the operator hears of a bucket still not made, once, naming it
        [slow] = [r for r in caplog.records if r.getMessage() == "coord_kv_bucket_slow"]
        assert (slow.bucket, slow.elapsed_seconds) == ("crewlet_silent", 2.0)
        lookups = asked.count("$JS.API.STREAM.INFO.KV_crewlet_silent")
        creates = asked.count("$JS.API.STREAM.CREATE.KV_crewlet_silent")
        assert lookups >= 2 and creates >= 2, asked
        assert asked.index("$JS.API.STREAM.CREATE.KV_crewlet_silent") == lookups  # every lookup before the first create
    finally:
        await store.close()
        await silent.close()
        await server.stop()


@pytest.mark.parametrize("ended_by", ["the node", "the client"])
@pytest.mark.parametrize("phase", ["lookup", "create"])
async def test_a_connection_ended_while_a_bucket_is_being_provisioned_ends_the_ask(tmp_path, phase, ended_by):
    # The node stopping, or the client giving up on the broker for good, while a bucket is
    # still being asked for: the ask ends with Unavailable at once, not after the rest of the
    # provisioning budgets (a minute by default).
    server = NatsServer(tmp_path / "nojs", "natskv-nojs", jetstream=False)
    await server.start()
    store = await NatsKVCoord.connect(server.client_url, server.token, reconnect_attempts=1)
    if phase == "create":
        # straight to the create's retries; an unanswered create waits a second, not fifteen,
        # so that a create in flight when the client gives up times out inside the window below
        store.lookup_budget_seconds, store.create_timeout_seconds = 0.0, 1.0
    try:
        asking = asyncio.create_task(store.ensure_bucket("crewlet_nojs"))
        await throughout(lambda: not asking.done(), window=1.5, message="the bucket to be asked for again and again")
        if ended_by == "the node":
            await store.close()
        else:
            await server.stop()
            await eventually(lambda: store.link == "closed", timeout=20, message="the client to give up")
        with pytest.raises(Unavailable):
            await asyncio.wait_for(asking, 5.0)
    finally:
        await store.close()
        await server.stop()


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


async def test_the_brokers_own_marker_for_an_aged_out_value_reads_as_no_value(server):
    # A bucket a stock client made with limit markers (`nats kv add --marker-ttl`) is adopted as
    # found; when a value ages out there the broker leaves a marker of its own
    # (Nats-Marker-Reason, no KV-Operation), which reads as no value and leaves the key free.
    nc = await nats.connect(server.client_url, token=server.token)
    store = await NatsKVCoord.connect(server.client_url, server.token)
    try:
        await nc.jetstream().create_key_value(api.KeyValueConfig(bucket="crewlet_marked", ttl=1.0, limit_marker_ttl=30.0))
        assert (await store.ensure_bucket("crewlet_marked")).max_age == 1.0
        first = await store.put("crewlet_marked", "seat:alice", b"v")

        async def gone() -> bool:
            return await store.get("crewlet_marked", "seat:alice") is None

        await eventually(gone, message="the bucket's age to take the value")
        marker = await nc.jetstream().get_msg("KV_crewlet_marked", subject="$KV.crewlet_marked.seat=3Aalice", direct=False)
        assert marker.headers.get("Nats-Marker-Reason") == "MaxAge" and "KV-Operation" not in marker.headers
        assert await store.keys("crewlet_marked") == []
        again = await store.create("crewlet_marked", "seat:alice", b"again")
        assert again > marker.seq > first
        assert (await store.get("crewlet_marked", "seat:alice")).value == b"again"
    finally:
        await nc.close()
        await store.close()


def _said(caplog, event: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "coord.natskv" and r.getMessage() == event and r.levelno == level]


async def test_the_link_reads_down_while_the_broker_is_away_and_up_when_it_returns(tmp_path, caplog):
    from tests.ports import PortHold

    caplog.set_level(logging.INFO, logger="coord.natskv")
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
        # the operator's log says so, naming the server (never its token), once per outage
        await eventually(lambda: _said(caplog, "coord_disconnected", logging.WARNING), message="the outage logged")
        with pytest.raises(Unavailable):
            await store.get("crewlet_link", "k")
        await server.start()  # the same address and store directory

        async def up() -> bool:
            return store.link == "up"

        await eventually(up, timeout=20, message="the link to come back up")
        assert (await store.get("crewlet_link", "k")).value == b"v"
        await eventually(lambda: _said(caplog, "coord_reconnected", logging.INFO), message="the return logged")
        outage = _said(caplog, "coord_disconnected", logging.WARNING)
        assert len(outage) == 1 and outage[0].server == server.client_url
        assert server.token not in caplog.text
    finally:
        await store.close()
        await server.stop()
    assert store.link == "closed"
    assert len(_said(caplog, "coord_disconnected", logging.WARNING)) == 1  # our own close is not an outage


async def test_a_connection_closed_for_good_is_reported_once_with_its_reason(tmp_path):
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


async def test_a_coroutine_hearing_the_loss_is_awaited_and_the_reason_names_the_last_error(tmp_path):
    server = NatsServer(tmp_path / "gone", "natskv-gone")
    await server.start()
    reasons: list[str] = []

    async def heard(reason: str) -> None:  # a coroutine only called, never awaited, appends nothing
        reasons.append(reason)

    store = await NatsKVCoord.connect(server.client_url, server.token, reconnect_attempts=1, on_closed=heard)
    try:
        await server.stop()
        await eventually(lambda: reasons, timeout=20, message="the coroutine to hear the loss")
        # the client's last error by type and text, its token scrubbed: what the node reports
        assert re.fullmatch(r"coord: the NATS client closed the coordination connection for good \((\w+): (.+)\)",
                            reasons[0]), reasons[0]
        assert "no error" not in reasons[0] and server.token not in reasons[0]
    finally:
        await store.close()


async def test_a_broker_that_is_not_there_once_the_dial_gives_up_is_unavailable_naming_it(tmp_path):
    from tests.ports import PortHold

    with PortHold() as hold:  # bound, never listening: a dial to it is refused at once
        with pytest.raises(Unavailable) as refused:
            await NatsKVCoord.connect(f"nats://127.0.0.1:{hold.port}", "a-token", reconnect_attempts=1)
    assert str(refused.value) == (f"coord: the broker at nats://127.0.0.1:{hold.port} did not answer the dial: "
                                  "NoServersError")


async def test_a_broker_that_refuses_the_dial_fails_it_at_once_naming_the_refusal(server, caplog):
    # The node's dial redials for ever (an external server's default); a refusal is an answer
    # that a redial would hear again, so it ends the dial rather than hanging the boot.
    dial = Dial(server.client_url, token="not-the-token", max_reconnect_attempts=-1)
    with caplog.at_level(logging.WARNING), pytest.raises(CoordError) as refused:
        await asyncio.wait_for(NatsKVCoord.connect(dial), timeout=20)
    assert not isinstance(refused.value, Unavailable)  # not "did not answer": nothing to wait for
    assert str(refused.value) == f"coord: the broker at {server.client_url} refused this node: nats: 'Authorization Violation'"
    errors = [r for r in caplog.records if r.getMessage() == "coord_connection_error"]
    assert errors and errors[0].levelname == "WARNING" and "Authorization Violation" in errors[0].error
    assert not any("not-the-token" in r.getMessage() or "not-the-token" in str(r.__dict__) for r in caplog.records)


async def test_a_plain_dial_is_a_lone_broker_s_one_replica_and_short_create_budget(server):
    store = await NatsKVCoord.connect(server.client_url, server.token)
    try:
        assert store.create_budget_seconds == CREATE_BUDGET_SECONDS
        await store.ensure_bucket("crewlet_plain")  # one replica: a lone broker would refuse more
    finally:
        await store.close()


async def test_closing_the_store_is_not_reported_as_a_loss(server, caplog):
    reasons: list[str] = []
    store = await NatsKVCoord.connect(server.client_url, server.token, on_closed=reasons.append)
    with caplog.at_level(logging.INFO, logger="coord.natskv"):
        await store.close()
    assert store.link == "closed" and reasons == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []  # neither an outage nor an error
    assert store._nc.is_closed  # the connection it dialled let go, not left open on the broker


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
