"""One owner per store (seed 002, "The store": no migration lock "because one process owns the
file"; DESIGN.md, "The store": "owned by that node alone (a second process on the same files
is refused)").

A node holds an exclusive lock on its `store.path` and on its `stream.store_dir` for its whole
life: `flock(LOCK_EX | LOCK_NB)` on a lock file beside each (`company.db.lock`, `stream.lock`)
that records the holder's pid and node id. The kernel lets go of a flock when the process ends,
however it ends (a SIGKILL included), so a lock is never stale and nothing has to clean one
up. Two nodes started on one `var/` would otherwise share one broker store and both claim
every seat; the second now refuses at once, before it binds a port or opens anything, naming
the path and the holder's pid.

The refusal exits 2, the code of a configuration refusal: the two processes were given the
same paths, restarting either changes nothing while the other runs, and the fix is in the
config (each node its own `store.path` and `stream.store_dir`) -- so a supervisor that treats
2 as "do not restart" is right to. A path that cannot be used at all (its directory cannot be
created) is a boot that failed, 1, as before.

The store file is created here too, 0600 in a directory created 0700 (`privatefiles`), so
SQLite, which gives its -wal and -shm the database file's mode, never makes a readable one.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path


from engine.config import NodeConfig
from engine.node.errors import EXIT_CONFIG, EXIT_FATAL, EngineError
from engine.node.privatefiles import FILE_MODE, private_dirs, private_file, tighten

LOCK_SUFFIX = ".lock"


class StoreLockError(EngineError):
    """A store this node must own cannot be locked; `exit_code` is what the node exits with."""

    def __init__(self, message: str, exit_code: int = EXIT_FATAL) -> None:
        self.exit_code = exit_code
        super().__init__(message)


class StoreLocked(StoreLockError):
    """Another process holds the store; `holder_pid` is its pid when it recorded one."""

    def __init__(self, message: str, holder_pid: int | None) -> None:
        self.holder_pid = holder_pid
        super().__init__(message, EXIT_CONFIG)


@dataclass
class StoreLock:
    """A held lock: the store it guards, the lock file, and the open descriptor holding it."""

    field: str
    store: Path
    lock_path: Path
    fd: int

    def release(self) -> None:
        """Let go (the process ending does the same)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def lock_path_for(store: Path) -> Path:
    """The lock file beside a store file or directory: `<name>.lock`."""
    store = Path(store)
    return store.with_name(store.name + LOCK_SUFFIX)


def lock_store(store: Path, field: str, node_id: str) -> StoreLock:
    """Lock `store` (named by its config `field`) for this process, recording our pid.
    StoreLocked when another process holds it; StoreLockError when it cannot be used."""
    store = Path(store).expanduser().absolute()
    lock_path = lock_path_for(store)
    try:
        private_dirs(lock_path.parent)
    except OSError as exc:
        raise StoreLockError(f"{field}: {store}: cannot create its directory ({exc.strerror})") from None
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        raise StoreLockError(f"{field}: {store}: cannot open its lock file {lock_path} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        pid, node = holder
        who = f"pid {pid}" if pid else "a process that has not recorded its pid yet"
        if node:
            who += f", node {node}"
        raise StoreLocked(f"{field}: {store} is in use by another process ({who}; lock {lock_path}): "
                          f"a store has one owner -- stop that process, or give this node its own {field}",
                          pid) from None
    except OSError as exc:
        os.close(fd)
        raise StoreLockError(f"{field}: {store}: cannot lock {lock_path} ({exc.strerror})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {node_id}\n".encode(), 0)
    return StoreLock(field=field, store=store, lock_path=lock_path, fd=fd)


def claim_node_stores(cfg: NodeConfig, store_path: str | os.PathLike) -> list[StoreLock]:
    """Lock what this node owns -- `store.path`, and `stream.store_dir` when it runs an embedded
    broker -- and make the store file private. Called by the boot before anything opens them."""
    node_id = cfg.node.id or ""
    locks = [lock_store(Path(store_path), "store.path", node_id)]
    try:
        _prepare_store_file(Path(store_path))
        store_dir = cfg.stream.store_dir
        if cfg.stream.type == "embedded" and store_dir:
            locks.append(lock_store(Path(store_dir), "stream.store_dir", node_id))
    except BaseException:
        release_all(locks)
        raise
    return locks


def release_all(locks: list[StoreLock]) -> None:
    """Let go of every lock, last taken first."""
    for lock in reversed(locks):
        lock.release()


def _prepare_store_file(path: Path) -> None:
    path = path.expanduser().absolute()
    try:
        private_file(path)
    except OSError as exc:
        raise StoreLockError(f"store.path: {path}: cannot be created ({exc.strerror})") from None
    for suffix in ("-wal", "-shm", "-journal"):
        tighten(path.with_name(path.name + suffix))


def _holder(fd: int) -> tuple[int | None, str]:
    """The pid and node id a held lock file records (None, "" when it has none yet)."""
    with contextlib.suppress(OSError, ValueError):
        words = os.pread(fd, 256, 0).decode(errors="replace").split()
        if words:
            return int(words[0]), (words[1] if len(words) > 1 else "")
    return None, ""
