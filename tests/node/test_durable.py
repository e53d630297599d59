"""What an operator decided survives a SIGKILL and a restart, with the configuration a user gets
by default -- no `coordination` block, so `local` (seed 002, "Replica count": "the fleet's
shared records are on the KV regardless, because they have to survive a restart as much as a
peer, and the KV lives on the stream's own broker whichever value the slot holds").

Real node processes on their embedded broker; nothing in the environment shortens a timing."""
from __future__ import annotations

import signal
import stat

import pytest

from tests.node.harness import COMPANY, READER, NodeProcess, eventually

pytestmark = pytest.mark.timeout(180)

BIGGER = COMPANY + "    - {handle: dave, kind: agent, role: engineer, reports_to: maya}\n"


def _kill_and_restart(node: NodeProcess, company: str | None = COMPANY) -> None:
    node.signal(signal.SIGKILL)
    node.wait_exit()
    node.start(company=company)
    node.wait_ready()


def _seat(node: NodeProcess, handle: str) -> dict:
    status, body, _ = node.get(f"/seats/{handle}", READER)
    assert status == 200, body
    return body


def _completed_turns(node: NodeProcess, handle: str) -> list[dict]:
    status, body, _ = node.get("/events?type=agent_turn_completed&limit=500", READER)
    assert status == 200, body
    return [e for e in body["items"] if e.get("agent_handle") == handle and e.get("outcome") == "completed"]


def _assign(node: NodeProcess, handle: str, text: str) -> str:
    status, body, _ = node.post(f"/seats/{handle}/tasks", {"text": text})
    assert status == 202, body
    return body["event_id"]


def _config(node: NodeProcess) -> dict:
    status, body, _ = node.get("/config", READER)
    assert status == 200, body
    return body


def test_a_paused_seat_is_still_paused_after_a_sigkill_and_its_mail_waits(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    eventually(lambda: _seat(node, "bob")["state"] == "idle", 30, "bob to be hosted", node)
    status, body, _ = node.post("/seats/bob/pause", {"reason": "on leave"})
    assert status == 200 and body["changed"], body

    _kill_and_restart(node)

    eventually(lambda: _seat(node, "bob")["state"] == "paused", 30, "bob to be hosted, paused", node)
    assert _seat(node, "bob")["paused"]["reason"] == "on leave"
    held = _assign(node, "bob", "hold this until I am back")
    _assign(node, "alice", "work on while bob is away")
    eventually(lambda: _completed_turns(node, "alice"), 60, "alice's task to complete", node)
    assert _seat(node, "bob")["mailbox_depth"] == 1 and _completed_turns(node, "bob") == []
    status, body, _ = node.post("/seats/bob/resume", {})
    assert status == 200 and body["changed"], body
    done = eventually(lambda: _completed_turns(node, "bob"), 60, "bob's held task to run on resume", node)
    assert held in done[0]["trigger_ids"]


def test_budget_spend_is_kept_across_a_sigkill(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    _assign(node, "alice", "spend a few tokens")
    eventually(lambda: _completed_turns(node, "alice"), 60, "alice's task to complete", node)

    def spend() -> tuple[int, int]:
        status, body, _ = node.get("/budgets", READER)
        assert status == 200, body
        return body["company"]["day"]["spend"], body["seats"]["alice"]["day"]["spend"]

    before = eventually(lambda: spend()[1] > 0 and spend(), 30, "alice's spend to be counted", node)

    _kill_and_restart(node)

    assert spend() == before


def test_a_restart_with_another_company_file_runs_and_shows_it_at_a_higher_generation(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    first = _config(node)

    _kill_and_restart(node, company=BIGGER)

    shown = _config(node)
    assert shown["generation"] > first["generation"]
    assert shown["digest"] != first["digest"] and "dave" in shown["document"]
    assert node.probe("/health")[1]["revision"] == shown["generation"]
    eventually(lambda: "dave" in node.probe("/health")[1]["seats"], 30, "the new seat to be run", node)
    status, body, _ = node.get("/config/revisions", READER)
    assert [r["generation"] for r in body["items"]] == [shown["generation"], first["generation"]]

    _kill_and_restart(node, company=COMPANY)  # back to the first document: news again, and higher
    assert _config(node)["generation"] > shown["generation"]


def test_the_same_company_file_twice_makes_no_new_revision(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    first = _config(node)

    _kill_and_restart(node)
    node.signal(signal.SIGTERM)
    assert node.wait_exit(60) == 0
    node.start()
    node.wait_ready()

    assert _config(node)["generation"] == first["generation"]
    status, body, _ = node.get("/config/revisions", READER)
    assert len(body["items"]) == 1
    status, body, _ = node.get("/events?type=config_revision_activated", READER)
    assert status == 200 and len(body["items"]) == 1, body


def test_the_store_and_its_journal_files_are_private(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    for name in ("company.db", "company.db-wal", "company.db-shm", "company.db.lock"):
        mode = stat.S_IMODE((node.home / name).stat().st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"
    assert stat.S_IMODE((node.home / "stream").stat().st_mode) == 0o700


def test_a_revision_imported_while_the_node_was_stopped_is_run_under_the_number_it_was_given(nodes):
    import subprocess
    import sys

    from tests.node.harness import ROOT, clean_env

    node = nodes("node-1").start()
    node.wait_ready()
    first = _config(node)
    node.signal(signal.SIGTERM)
    assert node.wait_exit(60) == 0
    (node.home / "bigger.yaml").write_text(BIGGER)
    run = subprocess.run([sys.executable, "manage.py", "crewlet_config", "--config", str(node.home / "crewlet.yaml"),
                          "import", str(node.home / "bigger.yaml"), "--by", "maya"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, env=clean_env())
    assert run.returncode == 0, run.stderr
    assert f"as generation {first['generation'] + 1}" in run.stdout

    node.start(company=None)
    node.wait_ready()

    shown = _config(node)
    assert (shown["generation"], "dave" in shown["document"]) == (first["generation"] + 1, True)
    eventually(lambda: "dave" in node.probe("/health")[1]["seats"], 30, "the imported seat to be run", node)
    status, body, _ = node.get("/config/revisions", READER)
    assert [r["generation"] for r in body["items"]] == [first["generation"] + 1, first["generation"]]
