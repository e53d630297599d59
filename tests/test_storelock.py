"""One owner per store (engine/node/storelock.py): a lock file beside each store, held by a process
for its life, naming its holder; a second process is refused at once. Real processes and files."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.node.errors import EXIT_CONFIG, EXIT_FATAL
from engine.node.storelock import StoreLocked, StoreLockError, claim_node_stores, lock_store, release_all

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[1]
HOLD = """
import sys
from pathlib import Path
from engine.node.storelock import lock_store
lock = lock_store(Path(sys.argv[1]), "store.path", "node-9")
print("held", flush=True)
sys.stdin.read()
"""


def _config(store_dir: Path | None, kind: str = "embedded") -> SimpleNamespace:
    return SimpleNamespace(node=SimpleNamespace(id="node-1"), stream=SimpleNamespace(type=kind, store_dir=str(store_dir) if store_dir else None))


def test_a_store_another_process_holds_is_refused_naming_it_and_its_pid(tmp_path):
    store = tmp_path / "company.db"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(store)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreLocked) as refused:
            lock_store(store, "store.path", "node-1")
        assert refused.value.exit_code == EXIT_CONFIG and refused.value.holder_pid == holder.pid
        assert str(refused.value).startswith(f"store.path: {store} is in use by another process (pid {holder.pid}, node node-9;")
        assert "give this node its own store.path" in str(refused.value)
    finally:
        holder.stdin.close()  # the holder exits, and the kernel lets go of its lock
        holder.wait(10)
    lock = lock_store(store, "store.path", "node-1")
    assert (tmp_path / "company.db.lock").read_text() == f"{os.getpid()} node-1\n"
    lock.release()


def test_a_second_lock_in_one_process_is_refused_too_and_release_lets_the_next_in(tmp_path):
    first = lock_store(tmp_path / "stream", "stream.store_dir", "node-1")
    with pytest.raises(StoreLocked, match=r"stream.store_dir: .*stream is in use by another process"):
        lock_store(tmp_path / "stream", "stream.store_dir", "node-2")
    first.release()
    lock_store(tmp_path / "stream", "stream.store_dir", "node-2").release()


def test_the_node_locks_its_store_and_its_broker_store_and_makes_the_store_private(tmp_path):
    store, stream = tmp_path / "var" / "company.db", tmp_path / "var" / "stream"
    locks = claim_node_stores(_config(stream), store)
    try:
        assert sorted(lock.field for lock in locks) == ["store.path", "stream.store_dir"]
        assert {lock.lock_path for lock in locks} == {tmp_path / "var" / "company.db.lock", tmp_path / "var" / "stream.lock"}
        assert stat.S_IMODE(store.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "var").stat().st_mode) == 0o700
        assert all(stat.S_IMODE(lock.lock_path.stat().st_mode) == 0o600 for lock in locks)
        with pytest.raises(StoreLocked):
            claim_node_stores(_config(tmp_path / "other-stream"), store)
        with pytest.raises(StoreLocked, match="stream.store_dir"):
            claim_node_stores(_config(stream), tmp_path / "other.db")
    finally:
        release_all(locks)
    locks = claim_node_stores(_config(None, kind="nats"), store)
    assert [lock.field for lock in locks] == ["store.path"]  # against an external server: no broker store to own
    release_all(locks)


def test_a_loose_store_from_an_older_build_is_tightened_with_its_journal_files(tmp_path):
    store = tmp_path / "company.db"
    for path in (store, tmp_path / "company.db-wal", tmp_path / "company.db-shm"):
        path.write_bytes(b"")
        path.chmod(0o644)
    release_all(claim_node_stores(_config(None, kind="nats"), store))
    for path in (store, tmp_path / "company.db-wal", tmp_path / "company.db-shm"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_store_path_that_cannot_be_used_is_a_boot_failure_naming_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("where a directory should be")
    with pytest.raises(StoreLockError) as refused:
        claim_node_stores(_config(None, kind="nats"), blocker / "company.db")
    assert refused.value.exit_code == EXIT_FATAL
    assert str(refused.value).startswith(f"store.path: {blocker / 'company.db'}: ")
