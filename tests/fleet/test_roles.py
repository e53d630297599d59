"""Roles as separate processes (seed 002, "Running the Engine + API", "Separate processes"):
`workers` needs `data` beside it and is refused by name without it; `seats` or `ingress`
alone is a stateless node (reads travel to every live node, a data node keeps the events); each node prepares its own store. A split fleet -- an ingress node
and a seats node on one broker -- carries a task taken by one to a turn on the other."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request

import pytest

from engine.node.roles import ROLES, RoleError, check_listener, parse_roles
from tests.node.external import ExternalNats
from tests.node.harness import ADMIN, ROOT, clean_env, eventually

pytestmark = pytest.mark.timeout(180)

COMPANY = """
name: nimbus
providers:
  llm:
    - {name: local, kind: scripted, delay_seconds: 0.05, reply: "done"}
org:
  seats:
    - {handle: maya, kind: human, role: founder}
    - {handle: alice, kind: agent, role: engineer, reports_to: maya}
"""


@pytest.mark.parametrize("roles", ["data", "seats", "ingress", "seats,ingress", "data,seats", "data,ingress", "data,workers", "data,seats,workers",
                                   "seats,data,ingress,workers"])
def test_the_combinations_the_seed_allows_are_taken(roles):
    assert set(parse_roles(roles)) == set(roles.split(","))


def test_no_flag_runs_every_role():
    assert parse_roles(None) == ROLES


@pytest.mark.parametrize("roles, lacking", [("workers", "workers needs data"), ("seats,workers", "workers needs data"),
                                            ("ingress,workers", "workers needs data")])
def test_a_role_without_data_beside_it_is_refused_naming_the_flag_and_the_fix(roles, lacking):
    with pytest.raises(RoleError) as refused:
        parse_roles(roles)
    assert str(refused.value).startswith(f"--roles: {lacking}")
    assert "run --roles data," in str(refused.value)


def test_an_ingress_node_with_a_public_listener_and_no_api_port_is_refused_by_field():
    with pytest.raises(RoleError, match="^api.port: 0 binds nothing"):
        check_listener(("data", "ingress"), 0, 8443)
    check_listener(("data", "seats"), 0, 8443)  # a seats node's public port is its bridge's own


def test_a_node_started_with_workers_alone_exits_2_naming_what_it_lacks(nodes):
    node = nodes("node-i")
    run = subprocess.run([sys.executable, "manage.py", "crewlet_node", "--config", str(node.write()), "--roles", "workers"],
                         cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "--roles: workers needs data" in run.stderr and "Traceback" not in run.stderr
    assert not (node.home / "company.db").exists()  # refused before anything was opened


def test_an_ingress_node_and_a_seats_node_run_apart_on_one_broker(nodes, tmp_path):
    fleet = ExternalNats(tmp_path / "nats").start()
    try:
        config = {"stream": fleet.stream_block(), "coordination": "embedded-kv", "ttl": 5, "sweep": 0.3}
        edge, worker = nodes("edge"), nodes("worker")
        edge.start("--roles", "data,ingress", company=COMPANY, **config)
        worker.start("--roles", "seats", company=None, **config)  # a fresh store it migrates itself
        edge.wait_ready()
        assert worker.wait_ready()["roles"] == ["seats"]
        eventually(lambda: "alice" in (worker.probe("/health")[1] or {}).get("seats", ()), 30, "the seats node to hold alice", worker)
        assert (edge.probe("/health")[1] or {}).get("seats") == []  # the ingress node runs no seat

        request = urllib.request.Request(f"{edge.base}/seats/alice/tasks", data=json.dumps({"text": "ship it"}).encode(),
                                         method="POST", headers={"Authorization": f"Bearer {ADMIN}",
                                                                 "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 202
            trigger = json.loads(response.read())["event_id"]

        def turned() -> bool:
            return any(line.get("msg") == "seat_turn_started" and trigger in line.get("trigger_ids", "")
                       for line in worker.log_lines())

        eventually(turned, 60, "the seats node to run a turn on the task the ingress node took", worker)
        status, _, _ = worker.get("/events")
        assert status == 404  # a node without ingress serves its probes and nothing else
    finally:
        fleet.stop()
