"""What only the JetStream backend has: the connection's refusals, the broker-side shape of
streams and consumers, and listing by metadata (seed 002, "An external NATS server", "The
largest message every server must carry", "A connection the client gives up on is a node
restart"; seed 000, "Every durable subscription can be listed", "Broadcast Streams")."""
from __future__ import annotations

import asyncio
import json
import logging

import nats
import nats.errors
import pytest

from engine.queue import topics
from engine.queue.broker import EmbeddedBroker
from engine.queue.contract import Tuning
from engine.queue.jetstream import EXIT_CONNECTION_CLOSED, ConnectError, JetStreamQueue
from engine.queue.jetstream_connection import Dial, redact_url
from engine.queue.jetstream_provision import METADATA_GROUP, METADATA_TOPIC
from tests.queue.recording import GROUP, INBOX, probe
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def queue(broker):
    q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-a")
    try:
        yield q
    finally:
        await q.close()


async def _api(q: JetStreamQueue, subject: str, payload: dict | None = None) -> dict:
    reply = await q.nc.request(subject, json.dumps(payload).encode() if payload is not None else b"", timeout=5)
    return json.loads(reply.data)


async def test_a_server_carrying_less_than_8_mib_is_refused_with_the_setting_to_change(tmp_path):
    small = EmbeddedBroker(store_dir=str(tmp_path / "small"), server_name="small", max_payload=1024 * 1024)
    await small.start()
    try:
        with pytest.raises(ConnectError) as err:
            await JetStreamQueue.connect(Dial(small.client_url, token=small.token), node_id="node-a")
        text = str(err.value)
        assert f"the NATS server at {small.client_url} announces a max_payload of 1048576 bytes" in text
        assert "below the 8388608 bytes this build needs" in text
        assert "Set max_payload: 8MB in the configuration of every server stream.url reaches" in text
    finally:
        await small.stop()


@pytest.mark.parametrize("field", ["ca", "cert", "key"])
async def test_a_missing_tls_file_is_named_by_its_field_before_any_dial(tmp_path, field):
    present = tmp_path / "present.pem"
    present.write_text("")
    tls = {"ca": str(present), "cert": str(present), "key": str(present)}
    missing = tmp_path / f"{field}.pem"
    tls[field] = str(missing)
    with pytest.raises(ConnectError) as err:
        # Port 1 answers nothing: a dial would fail differently, and slower.
        await JetStreamQueue.connect(Dial("nats://127.0.0.1:1", tls=tls), node_id="node-a")
    assert str(err.value) == f"queue: stream.tls.{field} {missing}: no such file or directory"


async def test_a_missing_credentials_file_is_named_by_its_field(tmp_path):
    missing = tmp_path / "engine.creds"
    with pytest.raises(ConnectError) as err:
        await JetStreamQueue.connect(Dial("nats://127.0.0.1:1", user_credentials=str(missing)), node_id="node-a")
    assert str(err.value) == f"queue: stream.credentials {missing}: no such file or directory"


def _garbled(good: str, garble: str) -> str:
    lines = good.split("\n")
    if garble == "seed":  # the seed's line cut short, as a paste that lost its end
        at = lines.index("-----BEGIN USER NKEY SEED-----") + 1
        lines[at] = lines[at][:30]
        return "\n".join(lines)
    if garble == "no seed":
        return good.split("*****")[0]
    return {"text": "not a credentials file\n", "empty": ""}[garble]


@pytest.mark.parametrize(("garble", "says"), [
    ("text", "not a NATS credentials file (no user JWT block)"),
    ("empty", "not a NATS credentials file (no user JWT block)"),
    ("no seed", "not a NATS credentials file (no user NKey seed block)"),
    ("seed", "its user NKey seed does not parse"),
])
async def test_a_credentials_file_the_client_cannot_sign_in_with_is_named_by_its_field(tmp_path, garble, says):
    # Left to nats-py these surface from inside the library once an operator-mode server sends
    # its nonce: "object of type 'NoneType' has no len()", "nkeys: invalid seed".
    from tests.fleet.servers import Operator

    creds = Operator(tmp_path / "operator").credentials("engine")
    good = creds.read_text()
    creds.write_text(_garbled(good, garble))
    with pytest.raises(ConnectError) as err:
        await JetStreamQueue.connect(Dial("nats://127.0.0.1:1", user_credentials=str(creds), max_reconnect_attempts=1),
                                     node_id="node-a")
    assert str(err.value) == f"queue: stream.credentials {creds}: {says}"
    seed = good.split("SEED-----\n")[1].split("\n")[0]
    assert seed[:20] not in str(err.value)


async def test_a_well_formed_credentials_file_goes_on_to_the_dial(tmp_path):
    from tests.fleet.servers import Operator

    creds = Operator(tmp_path / "operator").credentials("engine")
    with pytest.raises(ConnectError) as err:  # port 1 answers nothing: the dial itself fails
        await JetStreamQueue.connect(Dial("nats://127.0.0.1:1", user_credentials=str(creds), max_reconnect_attempts=1),
                                     node_id="node-a")
    assert "could not connect to nats://127.0.0.1:1" in str(err.value) and "stream.credentials" not in str(err.value)


async def test_a_urls_userinfo_is_never_repeated(caplog):
    assert redact_url("nats://engine:hunter22@nats-1.internal:4222,nats://tok3n@nats-2.internal") == \
        "nats://nats-1.internal:4222,nats://nats-2.internal"
    with caplog.at_level(logging.DEBUG), pytest.raises(ConnectError) as err:
        await JetStreamQueue.connect(Dial("nats://engine:hunter22@127.0.0.1:1", max_reconnect_attempts=1), node_id="node-a")
    assert "hunter22" not in str(err.value) and "engine:" not in str(err.value)
    assert not any("hunter22" in r.getMessage() or "hunter22" in str(r.__dict__) for r in caplog.records)


async def test_a_broker_that_refuses_the_dial_fails_it_at_once_naming_the_refusal_once(broker):
    with pytest.raises(ConnectError) as err:  # a dial that would redial for ever: the refusal ends it
        await asyncio.wait_for(JetStreamQueue.connect(Dial(broker.client_url, token="not-the-token"), node_id="node-a"), 20)
    assert str(err.value) == f"queue: jetstream: {broker.client_url} refused this node: nats: 'Authorization Violation'"


async def test_a_connection_closed_for_good_is_reported_for_a_node_restart(broker, caplog):
    reasons: list[str] = []
    q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token, max_reconnect_attempts=1),
                                     node_id="node-a", on_closed_for_good=reasons.append)
    await broker.stop()  # nothing to reconnect to: the client gives up after its attempts
    await eventually(lambda: reasons, timeout=30, message="on_closed_for_good was not called")
    assert "closed this node's connection" in reasons[0] and "for good" in reasons[0]
    assert any(r.getMessage() == "jetstream_connection_closed_for_good" for r in caplog.records)
    assert EXIT_CONNECTION_CLOSED == 1
    await q.close()  # after the fact: a no-op, not an error


async def test_the_engine_streams_carry_retention_by_purpose(queue):
    def config(name):
        return _api(queue, f"$JS.API.STREAM.INFO.{name}")

    agent = (await config("CREWLET_AGENT"))["config"]
    assert agent["retention"] == "interest" and agent["storage"] == "file"
    assert agent["duplicate_window"] == 120 * 10**9
    assert (await config("CREWLET_NOTIFICATIONS"))["config"]["retention"] == "interest"
    events = (await config("CREWLET_EVENTS"))["config"]
    assert (events["retention"], events["max_age"]) == ("limits", 720 * 3600 * 10**9)
    assert (await config("CREWLET_DLQ"))["config"]["max_age"] == 720 * 3600 * 10**9
    assert (await config("CREWLET_CONFIG"))["config"]["max_age"] == 3600 * 10**9
    assert (await config("CREWLET_MEMORY"))["config"]["max_msgs_per_subject"] == 1


async def test_a_second_client_provisions_the_same_streams_idempotently(broker, queue):
    again = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-b")
    try:
        names = await again.provisioner.stream_names("CREWLET_")
        assert sorted(names) == sorted(s.name for s in topics.engine_streams())
    finally:
        await again.close()


async def test_a_mailbox_is_a_durable_pull_consumer_without_backoff_or_inactivity(queue):
    await queue.ensure_subscription(INBOX, GROUP)
    await queue.ensure_subscription(INBOX, GROUP)  # idempotent
    info = await _api(queue, f"$JS.API.CONSUMER.INFO.CREWLET_AGENT.{topics.durable_name(INBOX, GROUP)}")
    config = info["config"]
    assert config["durable_name"] == topics.durable_name(INBOX, GROUP)
    assert (config["deliver_policy"], config["ack_policy"]) == ("all", "explicit")
    assert config["ack_wait"] == 60 * 10**9  # the ack window, kept alive by in-progress acknowledgements
    assert config["max_deliver"] == 25
    assert config["filter_subject"] == INBOX
    assert "backoff" not in config and not config.get("inactive_threshold")
    assert "deliver_subject" not in config  # pull, never push
    assert (config["metadata"][METADATA_TOPIC], config["metadata"][METADATA_GROUP]) == (INBOX, GROUP)


async def test_a_mailbox_made_under_the_old_30_minute_window_is_moved_to_the_new_one_with_its_mail(broker, queue):
    earlier = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-b",
                                           tuning=Tuning(ack_wait_seconds=30 * 60))
    try:
        await earlier.ensure_subscription(INBOX, GROUP)  # as an earlier build made every mailbox
        await earlier.publish(INBOX, probe("waiting"))
    finally:
        await earlier.close()
    name = topics.durable_name(INBOX, GROUP)
    await queue.ensure_subscription(INBOX, GROUP)  # there already: not an error, and not left at 30 minutes
    info = await _api(queue, f"$JS.API.CONSUMER.INFO.CREWLET_AGENT.{name}")
    assert info["config"]["ack_wait"] == 60 * 10**9
    assert info["config"]["max_deliver"] == 25 and info["config"]["filter_subject"] == INBOX

    async def still_pending() -> bool:  # the consumer's count trails the move
        return await queue.pending(INBOX, GROUP) == 1

    await eventually(still_pending, message="the moved mailbox lost its mail")
    assert await queue.list_subscriptions(INBOX) == [(INBOX, GROUP)]


async def test_listing_leaves_out_a_consumer_whose_metadata_does_not_derive_its_name(queue, caplog):
    await queue.ensure_subscription(INBOX, GROUP)
    other = topics.agent_inbox("bob")
    # A consumer claiming the pair of a real mailbox under a name that pair does not derive,
    # and one with no metadata at all: neither may be listed, or a caller would delete the
    # wrong subscription.
    for name, metadata in (("impostor", {METADATA_TOPIC: INBOX, METADATA_GROUP: GROUP}), ("bare", None)):
        config = {"durable_name": name, "name": name, "ack_policy": "explicit", "filter_subject": other}
        if metadata:
            config["metadata"] = metadata
        answer = await _api(queue, f"$JS.API.CONSUMER.CREATE.CREWLET_AGENT.{name}.{other}",
                            {"stream_name": "CREWLET_AGENT", "config": config, "action": "create"})
        assert "error" not in answer, answer
    with caplog.at_level(logging.WARNING, logger="queue.jetstream"):
        listed = await queue.list_subscriptions(topics.agent_pattern())
    assert listed == [(INBOX, GROUP)]
    unnamed = sorted(r.consumer for r in caplog.records if r.getMessage() == "jetstream_subscription_unnamed")
    assert unnamed == ["bare", "impostor"]


async def test_only_the_engines_own_streams_are_searched(queue):
    nc = queue.nc
    js = nc.jetstream()
    await js.add_stream(name="OTHER_APP", subjects=["otherapp.>"])
    await js.add_consumer("OTHER_APP", durable_name="theirs", filter_subject="otherapp.x")
    assert await queue.list_subscriptions("otherapp.>") == []


async def test_a_namespace_the_engine_does_not_define_gets_a_mailbox_stream_on_demand(queue):
    subject = "acme.orders.created"
    await queue.ensure_subscription(subject, "fulfilment")
    await queue.publish(subject, probe("order"))
    spec = topics.stream_for(subject)
    info = await _api(queue, f"$JS.API.STREAM.INFO.{spec.name}")
    assert info["config"]["retention"] == "interest"

    async def one_pending() -> bool:  # the consumer's count trails the publish's ack
        return await queue.pending(subject, "fulfilment") == 1

    await eventually(one_pending, message="the published order was not pending")
    assert await queue.list_subscriptions("acme.>") == [(subject, "fulfilment")]


async def test_a_broadcast_tap_is_an_ephemeral_consumer_from_now_acking_nothing(queue):
    async def ignore(event):
        return None

    tap = await queue.subscribe_stream(topics.EVENTS_ALL, ignore)
    try:
        consumers = (await _api(queue, "$JS.API.CONSUMER.LIST.CREWLET_EVENTS", {"offset": 0}))["consumers"]
        assert len(consumers) == 1
        config = consumers[0]["config"]
        assert (config["deliver_policy"], config["ack_policy"]) == ("new", "none")
        assert config["inactive_threshold"] == 60 * 10**9
        assert not config.get("durable_name")
    finally:
        await tap.close()
    consumers = (await _api(queue, "$JS.API.CONSUMER.LIST.CREWLET_EVENTS", {"offset": 0}))["consumers"]
    assert consumers == []


async def test_a_message_that_exhausts_its_budget_is_terminated_after_its_dead_letter(broker):
    fast = Tuning(max_deliveries=2, nak_base_seconds=0.05, nak_cap_seconds=0.05)
    q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-a", tuning=fast)
    try:
        from engine.queue.contract import Outcome

        await q.ensure_subscription(INBOX, GROUP)
        await q.publish(INBOX, probe("poison"))
        seen = []

        async def fail(delivery):
            seen.append(delivery.deliveries)
            return Outcome.NAK

        await q.subscribe(INBOX, GROUP, fail)
        await eventually(lambda: len(seen) == 2)

        async def settled():
            return await q.pending(INBOX, GROUP) == 0

        await eventually(settled, message="the poison message was not terminated")
        dlq = await _api(q, "$JS.API.STREAM.INFO.CREWLET_DLQ", {"subjects_filter": topics.dlq_subject(INBOX, GROUP)})
        assert dlq["state"]["messages"] == 1
        assert seen == [1, 2]
    finally:
        await q.close()


async def test_a_token_less_client_cannot_use_the_broker(broker):
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):  # refused at its first CONNECT
        await nats.connect(broker.client_url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0)


@pytest.mark.timeout(120)  # the broker's shutdown flushes each consumer's state: ~10 ms apiece
async def test_a_stream_takes_more_mailboxes_than_the_servers_default_cap(queue):
    # nats-server 2.15 caps a stream that names no limit at 1,000 consumers: ~333 seats.
    info = await _api(queue, "$JS.API.STREAM.INFO.CREWLET_AGENT")
    assert info["config"]["max_consumers"] >= 100_000
    handles = [f"seat{i}" for i in range(1001)]

    async def ensure(mine):
        for handle in mine:
            await queue.ensure_subscription(topics.agent_inbox(handle), topics.inbox_group(handle))

    await asyncio.gather(*(ensure(handles[k::16]) for k in range(16)))
    assert len(await queue.list_subscriptions(topics.agent_pattern())) == 1001


def _node_config(tmp_path, stream: str, coordination: str = "local"):
    from engine.config import parse_node_config

    return parse_node_config(f"""
node: {{id: test-node}}
stream: {stream}
store: {{path: "{tmp_path / 'company.db'}"}}
coordination: {{type: {coordination}}}
secrets: {{active_key_id: k, keys: [{{id: k, material: "dGVzdC1rZXktbWF0ZXJpYWwtMDEyMzQ1Njc4OWFiY2RlZg"}}]}}
api: {{port: 0}}
""")


async def test_the_factory_starts_the_embedded_broker_and_reports_its_death_as_exit_69(tmp_path):
    import os
    import signal

    from engine.queue.factory import EXIT_BROKER_DIED, open_queue

    cfg = _node_config(tmp_path, f'{{type: embedded, store_dir: "{tmp_path / "stream"}"}}')
    fatal: list[tuple[int, str]] = []
    q, broker = await open_queue(cfg, node_id="test-node", on_fatal=lambda code, reason: fatal.append((code, reason)))
    try:
        assert broker is not None and broker.server_name == "test-node"
        await q.ensure_subscription(INBOX, GROUP)
        await q.publish(INBOX, probe("m1"))

        async def one_pending() -> bool:  # the consumer's count trails the publish's ack
            return await q.pending(INBOX, GROUP) == 1

        await eventually(one_pending, message="the published message was not pending on the embedded broker")
        os.kill(broker.pid, signal.SIGKILL)
        await eventually(lambda: fatal, message="on_fatal was not called")
        assert fatal[0][0] == EXIT_BROKER_DIED
    finally:
        await q.close()
        await broker.stop()


async def test_the_factory_dials_an_external_server_with_its_token(broker, tmp_path):
    from engine.queue.factory import open_queue

    cfg = _node_config(tmp_path, f'{{type: nats, url: "{broker.client_url}", token: "{broker.token}"}}', "embedded-kv")
    q, none = await open_queue(cfg, node_id="node-x")
    try:
        assert none is None
        stamped = await q.publish(topics.event_subject("probe"), probe("m1"))
        assert stamped.node == "node-x"
    finally:
        await q.close()


async def test_a_broker_that_stops_answering_fails_the_ping_and_passes_it_again_once_it_resumes(broker):
    """A SIGSTOPped server keeps the socket open: only a round trip tells it from a live one."""
    import os
    import signal

    q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-a")
    try:
        assert await q.ping(2.0) is True
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            # A signal lands when the kernel delivers it: wait until the server is stopped.
            await eventually(lambda: open(f"/proc/{broker.pid}/stat").read().split()[2] == "T")
            assert await q.ping(0.5) is False
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        assert await q.ping(5.0) is True
    finally:
        await q.close()


async def test_a_publish_the_broker_leaves_unacknowledged_raises_unreachable(broker):
    """A server that stopped answering (a member gone under the connection, a stream between
    leaders): the publish ends after its own time with `Unreachable`, so the turn that made it
    hands its mail back rather than abandoning it (seats.host)."""
    import os
    import signal

    from engine.queue.contract import Unreachable

    q = await JetStreamQueue.connect(Dial(broker.client_url, token=broker.token), node_id="node-a")
    try:
        await q.publish(topics.event_subject("probe"), probe("m0"))  # the stream is provisioned
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            await eventually(lambda: open(f"/proc/{broker.pid}/stat").read().split()[2] == "T")
            with pytest.raises(Unreachable, match="not acknowledged within 10s"):
                await q.publish(topics.event_subject("probe"), probe("m1"))
        finally:
            os.kill(broker.pid, signal.SIGCONT)
    finally:
        await q.close()
