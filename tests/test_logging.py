"""Logging you can leave running (seed 002, "Logging", "The three formats", "The log file"): the
three formats, rotation at every max_backups, private files, and a file that stops taking
writes announced once and its recovery once more. Real files, a real pseudo-terminal."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import stat
from pathlib import Path

import pytest

from engine.node import logconfig
from engine.node.logfile import LogFile

pytestmark = pytest.mark.timeout(60)

DATED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
TIMED = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} ")


def _record(msg: str = "seat_claimed", **fields) -> logging.LogRecord:
    record = logging.LogRecord("seat.host", logging.INFO, __file__, 1, msg, (), None)
    record.__dict__.update(fields)
    return record


@pytest.fixture
def root_logging():
    """configure() installs on the root logger: put back what the suite had."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)


# -- the three formats ----------------------------------------------------------------------
def test_json_is_one_object_per_line_with_the_message_under_msg():
    line = logconfig.formatter_for("json").format(_record(seat="eng.alice", attempt=2))
    out = json.loads(line)
    assert (out["level"], out["msg"], out["component"], out["seat"], out["attempt"]) == ("INFO", "seat_claimed", "seat.host", "eng.alice", 2)
    assert DATED.match(out["time"] + " ") and "\n" not in line


def test_text_is_key_value_for_grepping():
    line = logconfig.formatter_for("text").format(_record(seat="eng.alice", detail="two words"))
    assert line.startswith("time=") and " level=INFO msg=seat_claimed component=seat.host seat=eng.alice" in line
    assert 'detail="two words"' in line


def test_console_on_a_terminal_shows_the_time_and_colour_and_elsewhere_the_date_and_none():
    leader, follower = os.openpty()
    terminal = os.fdopen(follower, "w")
    try:
        on_terminal = logconfig.formatter_for("console", terminal, env={}).format(_record(seat="eng.alice"))
    finally:
        terminal.close()
        os.close(leader)
    assert TIMED.match(on_terminal) and "\x1b[" in on_terminal
    redirected = logconfig.formatter_for("console", io.StringIO(), env={}).format(_record(seat="eng.alice"))
    assert DATED.match(redirected) and "\x1b[" not in redirected
    assert "seat.host" in redirected and "seat_claimed  seat=eng.alice" in redirected
    in_a_file = logconfig.formatter_for("console", None, env={"CREWLET_LOG_COLOR": "always"}).format(_record())
    assert DATED.match(in_a_file) and "\x1b[" not in in_a_file  # a file is never a terminal


def test_colour_can_be_forced_either_way_and_no_color_wins():
    plain = io.StringIO()
    assert "\x1b[" in logconfig.formatter_for("console", plain, env={"CREWLET_LOG_COLOR": "always"}).format(_record())
    assert "\x1b[" not in logconfig.formatter_for("console", plain, env={"CREWLET_LOG_COLOR": "always", "NO_COLOR": "1"}).format(_record())


# -- rotation -------------------------------------------------------------------------------
def _fill(handler: LogFile, lines: int, width: int = 60) -> None:
    handler.setFormatter(logconfig.formatter_for("json"))
    for i in range(lines):
        handler.handle(_record("line", n=i, pad="x" * width))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # a split record would not parse


@pytest.mark.parametrize("backups", [0, 1, 3])
def test_rotation_bounds_the_estate_at_every_max_backups(tmp_path, backups):
    path = tmp_path / "crewlet.log"
    handler = LogFile(path, max_bytes=1000, max_backups=backups)
    _fill(handler, 200)
    handler.close()
    files = sorted(tmp_path.iterdir())
    assert files == [path] + [path.with_name(f"crewlet.log.{n}") for n in range(1, backups + 1)]
    for f in files:
        assert f.stat().st_size <= 1000
        assert _lines(f)
    assert _lines(path)[-1]["n"] == 199  # the live file has the newest
    if backups:
        assert _lines(path.with_name("crewlet.log.1"))[-1]["n"] == _lines(path)[0]["n"] - 1  # .1 the next newest


def test_a_record_larger_than_the_cap_is_written_whole_into_an_empty_file(tmp_path):
    path = tmp_path / "crewlet.log"
    handler = LogFile(path, max_bytes=200, max_backups=2)
    _fill(handler, 1, width=10)
    _fill(handler, 1, width=500)
    _fill(handler, 1, width=10)
    handler.close()
    assert [len(_lines(p)) for p in (path, path.with_name("crewlet.log.1"), path.with_name("crewlet.log.2"))] == [1, 1, 1]
    assert len(_lines(path.with_name("crewlet.log.1"))[0]["pad"]) == 500


def test_a_restart_appends_and_does_not_rotate(tmp_path):
    path = tmp_path / "crewlet.log"
    first = LogFile(path, max_bytes=10_000, max_backups=5)
    _fill(first, 3)
    first.close()
    again = LogFile(path, max_bytes=10_000, max_backups=5)
    _fill(again, 2)
    again.close()
    assert [line["n"] for line in _lines(path)] == [0, 1, 2, 0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crewlet.log"]


def test_the_file_is_0600_its_new_directories_0700_and_a_loose_old_file_is_tightened(tmp_path):
    path = tmp_path / "var" / "log" / "crewlet.log"
    LogFile(path, max_bytes=1000, max_backups=1).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "var").stat().st_mode) == stat.S_IMODE((tmp_path / "var" / "log").stat().st_mode) == 0o700
    old = tmp_path / "old.log"
    old.write_text("from an older build\n")
    old.chmod(0o644)
    LogFile(old, max_bytes=1000, max_backups=1).close()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600 and old.read_text() == "from an older build\n"


def test_configure_rotates_at_the_configured_size_with_no_backups(tmp_path, root_logging):
    path = tmp_path / "crewlet.log"
    settings = logconfig.LogSettings(level="info", format="json", stderr=False, file_path=str(path), max_size_mb=1, max_backups=0)
    logconfig.configure(settings, stream=io.StringIO())
    log = logging.getLogger("seat.host")
    for i in range(12_000):  # about 2.4 MB of lines against a 1 MB cap
        log.info("line", extra={"n": i, "pad": "y" * 150})
    assert path.stat().st_size <= 1024 * 1024
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crewlet.log"]
    assert _lines(path)[-1]["n"] == 11_999


# -- a file that stops taking writes ----------------------------------------------------------
def test_a_full_disk_is_announced_once_and_its_end_once_more(tmp_path, root_logging):
    path = tmp_path / "crewlet.log"
    path.symlink_to("/dev/full")  # every write: ENOSPC
    console = io.StringIO()
    settings = logconfig.LogSettings(level="info", format="json", stderr=True, file_path=str(path), max_backups=1)
    logconfig.configure(settings, stream=console)
    log = logging.getLogger("seat.host")
    for i in range(5):
        log.info("during", extra={"n": i})
    path.unlink()  # the disk has room again: the next line reopens the path
    for i in range(3):
        log.info("after", extra={"n": i})
    lines = [json.loads(line) for line in console.getvalue().splitlines()]
    said = [line["msg"] for line in lines if line["component"] == "engine.node.logfile"]
    assert said == ["log_file_unwritable", "log_file_writable_again"]
    unwritable = next(line for line in lines if line["msg"] == "log_file_unwritable")
    assert unwritable["path"] == str(path) and unwritable["error"] == "No space left on device"
    assert [line["n"] for line in lines if line["msg"] == "during"] == list(range(5))  # the console kept every line
    assert "Traceback" not in console.getvalue()
    assert [line["msg"] for line in _lines(path)] == ["after", "after", "after"]


def test_a_volume_pulled_away_is_announced_once_on_stderr_when_the_console_is_off(tmp_path, root_logging):
    logs = tmp_path / "logs"
    path = logs / "crewlet.log"
    stderr = io.StringIO()
    settings = logconfig.LogSettings(level="info", format="json", stderr=False, file_path=str(path), max_backups=2)
    logconfig.configure(settings, stream=stderr)
    handler = next(h for h in logging.getLogger().handlers if isinstance(h, LogFile))
    handler.max_bytes = 400  # a small cap, so the next lines rotate (and meet the missing directory)
    log = logging.getLogger("seat.host")
    for i in range(3):
        log.info("before", extra={"n": i})
    for f in logs.iterdir():
        f.unlink()
    logs.rmdir()
    logs.write_text("the volume is gone; a file sits where its directory was")
    for i in range(20):
        log.info("while", extra={"n": i, "pad": "z" * 40})
    logs.unlink()
    log.info("back", extra={"n": 0})
    said = stderr.getvalue().splitlines()
    assert len(said) == 2 and "Traceback" not in stderr.getvalue()
    assert said[0].startswith("crewlet: log_file_unwritable") and str(path) in said[0]
    assert said[1].startswith("crewlet: log_file_writable_again")
    assert [line["msg"] for line in _lines(path)] == ["back"]
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
