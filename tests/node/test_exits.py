"""Exit codes and what a node leaves behind (seed 002: "A broker that declares itself dead",
"An external NATS server", "The largest message every server must carry"; issue: SIGKILL
leaves no nats-server behind)."""
from __future__ import annotations

import asyncio
import signal
import socket
import time

import pytest

from engine.node.watchdog import EXIT_WATCHDOG, Watchdog
from tests.node.external import ExternalNats
from tests.node.harness import eventually, pid_alive

pytestmark = pytest.mark.timeout(120)


def test_a_sigkilled_node_leaves_no_nats_server_behind(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    brokers = node.broker_pids()
    assert brokers
    node.signal(signal.SIGKILL)
    node.wait_exit()
    eventually(lambda: not any(pid_alive(p) for p in brokers), 15, "the orphaned nats-server to die")


def test_a_broker_that_dies_after_the_boot_ends_the_node_with_69(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    for pid in node.broker_pids():
        import os

        os.kill(pid, signal.SIGKILL)
    assert node.wait_exit(30) == 69
    assert "embedded_broker_died" in node.log_text()


def test_a_port_already_taken_fails_the_boot_at_once_naming_the_address(nodes):
    node = nodes("node-1")
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # beside the harness's own hold on it
        holder.bind(("127.0.0.1", node.port))
        holder.listen(1)
        node.start()
        assert node.wait_exit(60) == 1
    assert f"api.port: 127.0.0.1:{node.port} is already in use" in node.log_text()
    assert "pick another with --api-port 8123" in node.log_text() and "make run PORT=8123" in node.log_text()
    assert not (node.home / "stream").exists()  # it failed before recovering anything


def test_a_config_refusal_exits_2_naming_the_field(nodes, tmp_path):
    node = nodes("node-1")
    path = node.write()
    path.write_text(path.read_text().replace("secrets: {active_key_id: k1, keys: [{id: k1, material:", "x_secrets: {a: [{b:"))
    import subprocess
    import sys

    from tests.node.harness import ROOT, clean_env

    run = subprocess.run([sys.executable, "manage.py", "crewlet_node", "--config", str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=clean_env())
    assert run.returncode == 2
    assert "secrets.keys" in run.stderr and "Traceback" not in run.stderr
    run = subprocess.run([sys.executable, "manage.py", "crewlet_node", "--config", str(node.write()), "--roles", "data,chef"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=clean_env())
    assert run.returncode == 2 and "--roles: chef is not a role" in run.stderr


def test_a_server_announcing_a_small_max_payload_fails_the_boot_with_1(nodes, tmp_path):
    fleet = ExternalNats(tmp_path / "nats", max_payload=1024 * 1024).start()
    try:
        node = nodes("node-1").start(stream=fleet.stream_block(), coordination="embedded-kv")
        assert node.wait_exit(60) == 1
        assert "announces a max_payload of 1048576 bytes" in node.log_text()
    finally:
        fleet.stop()


def test_the_watchdog_fires_when_the_loop_stalls_for_its_limit():
    """The rule behind exit 75: a loop silent for the limit is reported (the node's handler
    exits with EXIT_WATCHDOG); a loop that keeps turning is not."""
    fired: list[float] = []

    async def scenario() -> None:
        dog = Watchdog(stall_after=0.4, on_stall=fired.append, beat=0.05)
        dog.start()
        await asyncio.sleep(0.6)  # a turning loop: heartbeats keep the watchdog quiet
        assert fired == []
        time.sleep(1.0)  # the loop stalls: nothing runs on it
        await asyncio.sleep(0.1)
        dog.stop()

    asyncio.run(scenario())
    assert len(fired) == 1 and fired[0] >= 0.4
    assert EXIT_WATCHDOG == 75


def test_a_store_path_that_cannot_be_used_fails_the_boot_naming_it(nodes, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store's directory should be")
    node = nodes("node-1")
    path = node.write()
    path.write_text(path.read_text().replace(f'store: {{path: "{node.home / "company.db"}"}}', f'store: {{path: "{blocker / "company.db"}"}}'))
    import subprocess
    import sys

    from tests.node.harness import ROOT, clean_env

    run = subprocess.run([sys.executable, "manage.py", "crewlet_node", "--config", str(path), "--api-port", "0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=clean_env())
    assert run.returncode == 1
    assert f"store.path: {blocker / 'company.db'}" in run.stderr
    assert "Traceback" not in run.stderr
