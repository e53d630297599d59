"""One owner per store, and every role prepares its own (seed 002, "The store": one process owns
the file; "Each node also auto-migrates its own store file on boot")."""
from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from tests.node.harness import ROOT, NodeProcess, clean_env
from tests.ports import PortHold

pytestmark = pytest.mark.timeout(120)


def _second(config_path, *args: str) -> subprocess.CompletedProcess:
    """A second node process on `config_path`, on a port of its own; waited for."""
    with PortHold() as port:
        return subprocess.run([sys.executable, "manage.py", "crewlet_node", "--config", str(config_path),
                               "--api-port", str(port.port), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=60, env=clean_env())


def test_a_second_node_on_the_same_directory_exits_2_naming_the_lock_and_its_holder(nodes):
    first = nodes("node-1").start()
    first.wait_ready()
    config = first.home / "crewlet.yaml"

    run = _second(config)

    assert run.returncode == 2, run.stderr
    assert f"store.path: {first.home / 'company.db'} is in use by another process (pid {first.proc.pid}, node node-1" in run.stderr
    assert "Traceback" not in run.stderr
    # Another store file, the same broker store directory: refused on that one.
    other = first.home / "other.yaml"
    other.write_text(config.read_text().replace(str(first.home / "company.db"), str(first.home / "other.db")))
    run = _second(other)
    assert run.returncode == 2, run.stderr
    assert f"stream.store_dir: {first.home / 'stream'} is in use by another process (pid {first.proc.pid}" in run.stderr
    # The first node never noticed.
    assert first.probe("/ready")[0] == 200 and first.proc.poll() is None


def test_the_lock_goes_with_the_process_however_it_ends(nodes):
    import signal

    node = nodes("node-1").start()
    node.wait_ready()
    node.signal(signal.SIGKILL)
    node.wait_exit()
    node.start()
    node.wait_ready()  # no stale lock to clear by hand
    assert (node.home / "company.db.lock").read_text().split()[0] == str(node.proc.pid)


def test_a_seats_only_node_migrates_a_store_that_never_was(tmp_path):
    node = NodeProcess(home=tmp_path / "seats-only", node_id="node-s")
    try:
        node.start("--roles", "seats")
        health = node.wait_ready()
        assert health["roles"] == ["seats"]
        assert "no such table" not in node.log_text()
        with sqlite3.connect(node.home / "company.db") as db:
            rows = db.execute("SELECT generation FROM company_config").fetchall()
        assert rows == [(health["revision"],)]
    finally:
        node.stop()
