"""The log file (seed 002, "The log file"): a durable copy of the node's lines, rotated by size,
private, and never the reason a node stops or floods its console.

- Rotation is built in and cannot be turned off. The live file rotates before the record that
  would take it past `max_bytes` (so no record is split across two files); one record larger
  than the whole cap is written whole into an empty file rather than rotating for ever. The
  rotated files are `<path>.1` (newest) to `<path>.N`, `max_backups` of them; `max_backups: 0`
  keeps no history -- the live file is emptied instead -- so it still bounds the file.
- The size is the file's own (fstat before each write), so a logrotate `copytruncate` that
  empties the file under this process is seen at once.
- Restarting appends; it does not rotate.
- Missing directories are created 0700 and the file 0600 (a looser existing file is tightened).
- A file that stops taking writes (a full disk, a volume pulled away) is announced once through
  `announce` -- the console sink, which keeps every line -- and announced again when it takes
  writes once more, so the gap has two ends. Nothing raises and no traceback is printed per
  line; every record is retried against the file (reopening it) until one lands.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

from engine.node.privatefiles import FILE_MODE, private_dirs, tighten

Announce = Callable[[str, dict], None]


class LogFile(logging.Handler):
    """A size-rotated, private log file. Opening it at construction raises OSError (the boot
    refuses a file it cannot open, naming it); after that, failures are announced, not raised."""

    def __init__(self, path: str | os.PathLike, *, max_bytes: int, max_backups: int,
                 announce: Announce | None = None) -> None:
        super().__init__()
        if max_bytes < 1:
            raise ValueError(f"max_bytes {max_bytes!r}: a log file needs a positive cap")
        if max_backups < 0:
            raise ValueError(f"max_backups {max_backups!r}: zero or more")
        self.path = Path(path).expanduser().absolute()
        self.max_bytes = int(max_bytes)
        self.max_backups = int(max_backups)
        self.announce = announce or (lambda name, fields: None)
        self.failing: str | None = None  # the error while the file takes no writes
        self._fd: int | None = None
        self._open()

    # -- logging.Handler -------------------------------------------------------------------
    def emit(self, record: logging.LogRecord) -> None:
        try:
            data = (self.format(record) + "\n").encode("utf-8", "replace")
        except Exception:
            self.handleError(record)
            return
        try:
            if self._fd is None:
                self._open()
            size = self._size()
            if size > 0 and size + len(data) > self.max_bytes:
                self._rotate()
            self._write(data)
        except OSError as exc:
            self._close()
            self._failed(exc)
            return
        if self.failing is not None:
            self._recovered()

    def close(self) -> None:
        self.acquire()
        try:
            self._close()
        finally:
            self.release()
        super().close()

    # -- inside ----------------------------------------------------------------------------
    def _open(self) -> None:
        private_dirs(self.path.parent)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        tighten(self.path)

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def _size(self) -> int:
        return os.fstat(self._fd).st_size

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def _rotate(self) -> None:
        """Make room: shift the backups up one (the oldest falls off), or with no backups
        empty the live file."""
        if self.max_backups == 0:
            os.ftruncate(self._fd, 0)
            return
        self._close()
        for n in range(self.max_backups - 1, 0, -1):
            older = self._backup(n)
            if older.exists():
                os.replace(older, self._backup(n + 1))
        os.replace(self.path, self._backup(1))
        self._open()

    def _backup(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def _failed(self, exc: OSError) -> None:
        if self.failing is None:
            self.failing = exc.strerror or str(exc)
            self.announce("log_file_unwritable", {"path": str(self.path), "error": self.failing,
                                                  "detail": "the console keeps every line; the file is "
                                                            "retried on every line until it takes one"})

    def _recovered(self) -> None:
        was, self.failing = self.failing, None
        self.announce("log_file_writable_again", {"path": str(self.path), "after_error": was})
