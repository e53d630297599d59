"""Files only this node's user may read (seed 002, "The log file": "Missing directories are
created, 0700, and the file is 0600. A log line is redacted but it is not a public document";
the same holds of the store, which carries the company's revisions and its event history).

`private_dirs` creates what is missing of a directory path at 0700 and leaves what exists as
it is (an operator's /var/log is not ours to tighten); `private_file` creates a file at 0600,
or tightens one that exists looser than that; `tighten` does the latter for a file something
else creates (SQLite's -wal and -shm). A file that is not a regular file this process owns
(a symlink to /dev/stderr, a device) is never chmod-ed.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dirs(directory: Path) -> None:
    """Create `directory` and any missing parents at 0700 (existing ones are left alone).
    Raises OSError as mkdir does."""
    directory = Path(directory)
    missing = []
    probe = directory
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue
        os.chmod(path, DIR_MODE)  # mkdir's mode passes through the umask; 0700 is meant


def tighten(path: Path) -> None:
    """Take group and other bits off a regular file this process owns; anything else, or a
    file that is not there, is left as it is."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)


def private_file(path: Path) -> None:
    """Create `path` at 0600 if it is missing (its directory at 0700), or tighten it."""
    path = Path(path)
    private_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    os.close(fd)
    tighten(path)
