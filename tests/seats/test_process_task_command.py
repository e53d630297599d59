"""`manage.py crewlet_task` against a running node: the task goes through POST /seats/{handle}/tasks
and becomes one completed turn; a human seat is refused by name."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.node.harness import ADMIN, READER, ROOT, NodeProcess, clean_env, eventually

pytestmark = pytest.mark.timeout(120)


def _task(config, seat: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "crewlet_task", "--config", str(config), "--seat", seat, text],
                          cwd=ROOT, env={**clean_env(), "CREWLET_API_TOKEN": ADMIN}, capture_output=True, text=True,
                          timeout=60)


def test_a_task_from_the_command_line_runs_as_one_turn_and_a_human_seat_is_refused(tmp_path):
    node = NodeProcess(home=tmp_path / "node-1")
    try:
        node.start()
        node.wait_ready()
        config = node.home / "crewlet.yaml"
        # Only api.port names where this node listens; external_url still names another port
        # (a proxy, or a port changed in one place only): the command posts to the node itself.
        config.write_text(config.read_text().replace(f'external_url: "http://127.0.0.1:{node.port}"',
                                                     'external_url: "http://127.0.0.1:9"'))
        done = _task(config, "alice", "Write the release notes")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        event_id = answer["event_id"]
        assert answer["trace_url"] == f"{node.base}/dashboard/traces/{answer['trace_id']}/" and answer["task_id"]

        def completed():
            status, body, _ = node.get("/events?type=agent_turn_completed", READER)
            return status == 200 and [e for e in body["items"] if event_id in (e.get("trigger_ids") or [])]

        turns = eventually(completed, 30, "the task's turn", node)
        assert len(turns) == 1 and turns[0]["outcome"] == "completed"
        refused = _task(config, "maya", "hello")
        assert refused.returncode != 0 and "'maya'" in refused.stderr and "human" in refused.stderr
    finally:
        node.stop()
