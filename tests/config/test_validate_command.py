"""`python manage.py crewlet_validate`, run as an operator runs it: a process, its output
and its exit status (seed 002: validate refuses each problem by name, on a laptop)."""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime

import pytest

from tests.config.conftest import EXAMPLE_ENV, EXAMPLES, ROOT, node_text

pytestmark = pytest.mark.timeout(120)


def validate(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in EXAMPLE_ENV and k != "CREWLET_CONFIG"}
    return subprocess.run([sys.executable, "manage.py", "crewlet_validate", *args], cwd=ROOT,
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=90)


def test_the_bundled_examples_validate():
    run = validate("--config", str(EXAMPLES / "crewlet.yaml"), "--company", str(EXAMPLES / "company.yaml"),
                   env=EXAMPLE_ENV)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["ok", "ok", "schedule"]
    assert "node node-1" in lines[0] and "company nimbus" in lines[1]
    # the bundled standup's next three fires, on the company's clock, each a weekday at 09:00
    fires = lines[2].split(" next ")[1].split(", ")
    assert lines[2].startswith("schedule: standup: '0 9 * * 1-5' for carol") and len(fires) == 3
    assert all(datetime.fromisoformat(f).strftime("%H:%M") == "09:00" and datetime.fromisoformat(f).weekday() < 5
               for f in fires)


def test_every_refusal_is_printed_and_the_exit_status_is_2(tmp_path):
    config = tmp_path / "crewlet.yaml"
    config.write_text(node_text(stream={"cluster": {"port": "abc"}}, api={"port": 8000}))
    run = validate("--config", str(config), "--company", str(EXAMPLES / "company.yaml"), env=EXAMPLE_ENV)
    assert run.returncode == 2
    assert "Traceback" not in run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert 'refused: stream.cluster.port: expected an integer from 1 to 65535, got "abc"' in lines
    assert any(line.startswith("refused: api.external_url: ") for line in lines)
    assert any(line.startswith("ok: ") and "company nimbus" in line for line in lines)


def test_a_missing_variable_is_refused_naming_the_field():
    run = validate("--config", str(EXAMPLES / "crewlet.yaml"), env={})
    assert run.returncode == 2
    assert "refused: secrets.keys[0].material: ${CREWLET_SECRET_KEY_DEV} is not set in the environment" in run.stdout


def test_advisories_are_printed_and_do_not_fail(tmp_path):
    config = tmp_path / "crewlet.yaml"
    config.write_text(node_text(logging={"level": "debug"}))
    run = validate("--config", str(config))
    assert run.returncode == 0, run.stdout + run.stderr
    assert any(line.startswith("advisory: logging.level: debug") for line in run.stdout.splitlines())


def test_a_file_that_is_missing_or_not_yaml_is_refused_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("stream: [\n")
    run = validate("--config", str(tmp_path / "absent.yaml"), "--company", str(bad))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stdout.splitlines() == [f"refused: {tmp_path / 'absent.yaml'}: no such file",
                                       f"refused: {bad}:2:1: not valid YAML: expected the node content, but found '<stream end>'"]


def test_a_refused_seat_does_not_hide_the_references_in_one_pass(tmp_path):
    company = tmp_path / "company.yaml"
    company.write_text("""name: nimbus
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agnt, role: engineer, reports_to: maya}
    - {handle: bob, kind: agent, role: engineer, reports_to: nobody}
    - {handle: cyd, kind: agent, reports_to: alice}
schedules:
  - {name: standup, seat: zed, cron: "0 9 * * 1-5", task: post it}
  - {name: broken, seat: alice, cron: 7, task: [not, text]}
  - {name: review, seat: maya, cron: "0 9 * * 1", task: review}
""")
    run = validate("--company", str(company))
    assert run.returncode == 2
    lines = run.stdout.splitlines()
    # The field refusal, and every cross-reference the document earns, at once; indices are
    # the document's own; alice, refused for her kind, is still a seat others report to.
    assert 'refused: org.seats[1].kind: expected one of agent, human, got "agnt"' in lines
    assert 'refused: org.seats[2].reports_to: "nobody" names no seat in org.seats' in lines
    assert 'refused: schedules[0].seat: "zed" names no seat in org.seats' in lines
    assert any(line.startswith("refused: schedules[1].task") for line in lines)
    assert any(line.startswith('refused: schedules[2].seat: "maya" is a human seat') for line in lines)
    assert not any("org.seats[3]" in line for line in lines)
