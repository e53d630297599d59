"""The embedded broker: what only a node that owns its nats-server child has (DESIGN.md,
"Deliberate differences" #1; seed 002, "A broker that declares itself dead", "There are
therefore three waits at boot", "A route port something else already holds")."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import nats
import pytest

from engine.queue.broker import (
    EXIT_BROKER_DIED,
    BrokerError,
    ClusterSpec,
    EmbeddedBroker,
    nats_server_binary,
)
from tests.ports import PortHold
from tests.queue.waiting import eventually

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """True once pid is no process (a zombie nobody reaped counts as gone: it runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _listening(port: int) -> list[str]:
    """The local addresses a TCP socket listens on for port (from /proc/net/tcp and tcp6)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            fields = row.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                if len(address) == 8:
                    found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
                else:
                    found.append(address)
    return found


async def test_a_sigkilled_node_leaves_no_nats_server_behind(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(ROOT)!r})
        from engine.queue.broker import EmbeddedBroker

        async def main():
            broker = EmbeddedBroker(store_dir={str(tmp_path / "stream")!r}, server_name="doomed")
            await broker.start()
            print(broker.pid, flush=True)
            await asyncio.Event().wait()

        asyncio.run(main())
    """)
    node = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(node.stdout.readline), 30)
        server_pid = int(line)
        assert not _gone(server_pid)
        node.send_signal(signal.SIGKILL)
        node.wait(10)
        await eventually(lambda: _gone(server_pid), timeout=20, message=f"nats-server {server_pid} outlived its node")
    finally:
        if node.poll() is None:
            node.kill()


async def test_a_store_dir_that_is_a_file_fails_start_naming_the_path(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("")
    b = EmbeddedBroker(store_dir=str(path), server_name="test-node")
    with pytest.raises(BrokerError) as err:
        await b.start()
    assert str(path) in str(err.value)
    assert "not a directory" in str(err.value)
    assert b.pid is None


async def test_a_store_nats_server_refuses_fails_start_with_its_own_reason(tmp_path):
    store = tmp_path / "stream"
    store.mkdir()
    (store / "jetstream").write_text("")  # where JetStream keeps its files: a file, not a directory
    b = EmbeddedBroker(store_dir=str(store), server_name="test-node")
    with pytest.raises(BrokerError) as err:
        await b.start()
    text = str(err.value)
    assert "Can't start JetStream" in text  # nats-server's own [FTL] sentence
    assert str(store) in text
    assert not b.running


async def test_a_taken_route_port_is_refused_before_the_broker_starts(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="member-1",
                           cluster=ClusterSpec(name="crewlet", port=port, host="127.0.0.1"))
        with pytest.raises(BrokerError) as err:
            await b.start()
        text = str(err.value)
        assert f"stream.cluster.port {port} is already in use on 127.0.0.1" in text
        assert b.pid is None  # refused before any child was started
    finally:
        holder.close()


async def test_the_broker_listens_on_loopback_only_behind_its_token(broker):
    assert broker.client_url.startswith("nats://127.0.0.1:")
    port = int(broker.client_url.rsplit(":", 1)[1])
    assert _listening(port) == ["127.0.0.1"]
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(broker.client_url, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0)
    nc = await nats.connect(broker.client_url, token=broker.token, allow_reconnect=False)
    try:
        assert nc.max_payload == 8 * 1024 * 1024
    finally:
        await nc.close()


async def test_the_token_stays_in_a_private_config_file_and_out_of_the_log(tmp_path, caplog):
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node", debug=True)
    with caplog.at_level(logging.DEBUG):
        await b.start()
        await b.stop()
    config = tmp_path / "stream" / "nats-server.conf"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert b.token in config.read_text()
    assert not any(b.token in r.getMessage() or b.token in str(r.__dict__) for r in caplog.records)
    assert b.token not in repr(b)
    server_lines = [r for r in caplog.records if r.name == "queue.nats.server"]
    assert server_lines and all(r.server == "test-node" for r in server_lines)
    assert any("Server is ready" in r.getMessage() for r in server_lines)


async def test_a_broker_that_dies_after_the_boot_reports_it_and_calls_on_death(tmp_path, caplog):
    reasons: list[str] = []
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node", on_death=reasons.append)
    await b.start()
    try:
        os.kill(b.pid, signal.SIGKILL)
        await eventually(lambda: reasons, message="on_death was not called")
        assert "exited" in reasons[0]
        assert any(r.getMessage() == "embedded_broker_died" and r.levelno == logging.ERROR for r in caplog.records)
        assert EXIT_BROKER_DIED == 69
    finally:
        await b.stop()


async def test_a_stopped_broker_is_not_reported_dead(tmp_path):
    reasons: list[str] = []
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node", on_death=reasons.append)
    await b.start()
    pid = b.pid
    await b.stop()
    assert _gone(pid) and not b.running
    assert reasons == []


async def test_a_start_after_a_forced_stop_says_in_one_line_why_the_broker_recovers(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="queue")
    store = str(tmp_path / "stream")
    clean = EmbeddedBroker(store_dir=store, server_name="test-node")
    await clean.start()
    await clean.stop()
    again = EmbeddedBroker(store_dir=store, server_name="test-node")
    await again.start()
    assert not [r for r in caplog.records if r.getMessage() == "embedded_broker_recovering"]  # a clean stop: quiet
    os.killpg(again.pid, signal.SIGKILL)  # as a second Ctrl-C leaves it: killed with its parent
    await eventually(lambda: _gone(again.pid))
    await again.stop()
    after = EmbeddedBroker(store_dir=store, server_name="test-node")
    await after.start()
    try:
        said = [r for r in caplog.records if r.getMessage() == "embedded_broker_recovering"]
        assert len(said) == 1 and "did not stop cleanly" in said[0].detail
    finally:
        await after.stop()


def _wrapper(tmp_path: Path, body: str) -> str:
    """An executable standing in for nats-server: `body`, then (maybe) the real binary."""
    path = tmp_path / "slow-nats-server"
    path.write_text("#!/bin/sh\n" + body.replace("REAL", nats_server_binary()) + "\n")
    path.chmod(0o755)
    return str(path)


async def test_a_slow_store_recovery_is_waited_out_and_reported(tmp_path, caplog):
    # The recovery is stood in for by a pause before the real server; it is reported while
    # it lasts and never fails the boot.
    binary = _wrapper(tmp_path, 'sleep 1; exec REAL "$@"')
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node", binary=binary)
    b.starting_report_seconds = 0.05
    with caplog.at_level(logging.INFO, logger="queue.jetstream"):
        await b.start()
    try:
        starting = [r for r in caplog.records if r.getMessage() == "embedded_broker_starting"]
        assert starting and starting[0].store_dir == b.store_dir and starting[0].server == "test-node"
        assert b.running
    finally:
        await b.stop()


async def test_listeners_that_never_open_fail_the_boot_by_name(tmp_path):
    binary = _wrapper(tmp_path, 'echo "[1] 2026/01/01 00:00:00.000000 [INF] Took 1ms to start JetStream"; exec sleep 60')
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node", binary=binary)
    b.listeners_timeout_seconds = 0.3
    with pytest.raises(BrokerError) as err:
        await b.start()
    assert "opened no listeners" in str(err.value)
    assert not b.running  # the child was stopped, not left behind


async def test_a_sync_interval_is_written_as_the_window(tmp_path):
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node", sync="30s")
    await b.start()
    try:
        assert 'sync_interval: "30s"' in (tmp_path / "stream" / "nats-server.conf").read_text()
    finally:
        await b.stop()


async def test_from_config_reads_tier_a(tmp_path):
    from engine.config import parse_node_config

    raw = f"""
node: {{id: member-7}}
stream:
  type: embedded
  store_dir: "{tmp_path / 'stream'}"
  sync: 30s
  replicas: 3
  debug: true
  cluster: {{name: crewlet, port: 16222, host: 127.0.0.1, peers: ["nats://crewlet-2.internal:6222", "nats://crewlet-3.internal:6222"]}}
store: {{path: "{tmp_path / 'company.db'}"}}
coordination: {{type: embedded-kv}}
secrets: {{active_key_id: k, keys: [{{id: k, material: "dGVzdC1rZXktbWF0ZXJpYWwtMDEyMzQ1Njc4OWFiY2RlZg"}}]}}
api: {{port: 0}}
"""
    cfg = parse_node_config(raw)
    b = EmbeddedBroker.from_config(cfg)
    assert (b.server_name, b.sync, b.debug) == ("member-7", "30s", True)
    assert b.store_dir == str(tmp_path / "stream")
    assert b.cluster == ClusterSpec(name="crewlet", port=16222, host="127.0.0.1", advertise=None,
                                    peers=("nats://crewlet-2.internal:6222", "nats://crewlet-3.internal:6222"))


async def _pending_is(q, expected: int) -> bool:
    from tests.queue.recording import GROUP, INBOX

    return await q.pending(INBOX, GROUP) == expected


async def test_three_members_form_a_cluster_that_serves_a_replicated_mailbox(tmp_path):
    """Each member requires and presents the route credentials one keyring derives."""
    from engine.queue.jetstream import JetStreamQueue, Layout
    from engine.queue.jetstream_connection import Dial
    from tests.cluster import three_members
    from tests.queue.recording import GROUP, INBOX, probe

    holds, members = three_members(tmp_path)
    try:
        await asyncio.gather(*(m.start() for m in members))  # each waits for JetStream to be current
        for hold in holds:
            hold.release()  # the members listen on them now
        q = await JetStreamQueue.connect(Dial(members[1].client_url, token=members[1].token), node_id="node-b",
                                         layout=Layout(replicas=3, clustered=True))
        try:
            await q.ensure_subscription(INBOX, GROUP)
            await q.publish(INBOX, probe("replicated"))
            # Acknowledged by the stream's quorum; the replicated consumer's leader counts it
            # once its own replica has applied the write, a moment later on a busy host.
            await eventually(lambda: _pending_is(q, 1), message="the replicated mailbox to count the message")
        finally:
            await q.close()
    finally:
        await asyncio.gather(*(m.stop() for m in members))


async def test_a_route_port_taken_after_the_probe_is_refused_with_the_systems_reason(tmp_path):
    # The port is free when probed and taken before nats-server binds it: the broker's own
    # fatal bind error is reported as the taken port it is, the OS's words on the end.
    hold, peer = PortHold(), PortHold()  # peer: a route nothing answers on
    port = hold.port
    held = tmp_path / "held"
    # The grabber marks the port held; the stand-in waits for the mark (up to 10 s) before it
    # runs the real server.
    grab = (f"{sys.executable} -c \"import socket,time; s=socket.socket(); "
            f"s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1',{port})); "
            f"s.listen(); open('{held}','w').close(); time.sleep(30)\" & "
            f"i=0; while [ ! -e {held} ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; exec REAL \"$@\"")
    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="member-1", binary=_wrapper(tmp_path, grab),
                       cluster=ClusterSpec(name="crewlet", port=port, host="127.0.0.1",
                                           peers=(f"nats://127.0.0.1:{peer.port}",)))
    try:
        with pytest.raises(BrokerError) as err:
            await b.start()
        text = str(err.value)
        assert f"stream.cluster.port {port} is already in use on 127.0.0.1" in text
        assert "address already in use" in text
    finally:
        if b.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(b.pid, signal.SIGKILL)  # the grabber shares the stand-in's process group


async def test_a_broker_holding_many_mailboxes_is_stopped_in_order_never_killed(tmp_path, caplog):
    # nats-server takes ~10 ms a consumer to stop; 400 of them outlast a 1 s base bound, which
    # the per-consumer allowance (the product's own) stretches rather than killing the member.
    from engine.queue import topics
    from engine.queue.jetstream import JetStreamQueue
    from engine.queue.jetstream_connection import Dial

    b = EmbeddedBroker(store_dir=str(tmp_path / "stream"), server_name="test-node")
    b.stop_timeout_seconds = 1.0
    await b.start()
    proc = b._proc
    queue = await JetStreamQueue.connect(Dial(b.client_url, token=b.token), node_id="test-node")
    try:
        gate = asyncio.Semaphore(8)

        async def mailbox(i: int) -> None:
            async with gate:
                await queue.ensure_subscription(topics.agent_inbox(f"a{i:03d}"), topics.inbox_group(f"a{i:03d}"))

        await asyncio.gather(*(mailbox(i) for i in range(400)))
    finally:
        await queue.close()
    assert await b.consumer_count() == 400
    with caplog.at_level(logging.INFO, logger="queue.jetstream"):
        await b.stop()
    said = [r.getMessage() for r in caplog.records]
    assert "embedded_broker_killed" not in said
    stopping = next(r for r in caplog.records if r.getMessage() == "embedded_broker_stopping")
    assert stopping.consumers == 400 and stopping.bound_seconds >= 10
    assert proc.returncode == 0  # nats-server's own orderly exit, not a SIGKILL
