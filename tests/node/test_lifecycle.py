"""A real node process through its life: probes while it starts, serves and drains; a
revision applied without a restart (seed 002, "Probes", "While a node is starting",
"Running the Engine + API")."""
from __future__ import annotations

import signal

import pytest

from tests.node.harness import ADMIN, COMPANY, READER, eventually, pid_alive

pytestmark = pytest.mark.timeout(120)

ORDER = {"recovering": 0, "preparing": 1, "serving": 2}


def _phase(answer) -> str | None:
    if answer is None:
        return None
    status, body = answer
    if body and body.get("status") == "starting":
        return body["phase"]
    if status == 200 and body and body.get("status") == "ok":
        return "serving"
    return "unexpected"


def test_probes_answer_through_the_boot_serving_and_a_drain(nodes):
    node = nodes("node-1").start()
    seen, gated = [], []
    while True:
        health = node.probe("/health")
        phase = _phase(health)
        if phase is not None:
            seen.append((phase, health[0]))
            if phase in ("recovering", "preparing"):
                status, body, headers = node.get("/events", token=READER)
                ready = node.probe("/ready")
                gated.append((status, headers.get("Retry-After"), ready))
            if phase == "serving":
                break
        assert node.proc.poll() is None, node.log_text()[-3000:]
    # The phases only move forward, and each answers its own status.
    phases = [p for p, _ in seen]
    assert "unexpected" not in phases, seen
    assert [ORDER[p] for p in phases] == sorted(ORDER[p] for p in phases)
    assert all(code == (503 if p == "recovering" else 200) for p, code in seen)
    assert "recovering" in phases  # the listener answers before the store and broker are up
    # Every route the node will serve is 503 with a Retry-After while it starts; /ready too.
    for status, retry_after, ready in gated:
        if ready is not None and ready[1] and ready[1].get("reason") == "starting":
            assert ready[0] == 503
        assert (status, retry_after) in ((503, "5"), (200, None))  # 200 only once it turned serving
    assert any(status == 503 for status, _, _ in gated)

    health = node.wait_ready()
    assert health["node"] == "node-1" and health["broker"] == "up"
    assert set(health["roles"]) == {"data", "seats", "ingress", "workers"}
    eventually(lambda: set(node.probe("/health")[1]["seats"]) == {"alice", "bob", "carol"}, 30, "the seats to be claimed", node)
    status, body, _ = node.get("/events?type=org_started", token=READER)
    assert status == 200 and body["items"][0]["company"] == "nimbus"

    brokers = node.broker_pids()
    assert brokers, "an embedded node runs its nats-server as its own child"
    node.signal(signal.SIGTERM)
    assert node.wait_exit() == 0
    messages = [line["msg"] for line in node.log_lines()]
    assert messages.index("node_draining") < messages.index("node_stopped")
    assert "seat_released" in messages
    eventually(lambda: not any(pid_alive(p) for p in brokers), 10, "the embedded broker to stop")


def test_a_restarted_node_serves_the_revision_its_store_holds(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    node.signal(signal.SIGTERM)
    assert node.wait_exit() == 0
    node.start(company=None)  # no --company: the store's active revision
    health = node.wait_ready()
    assert health["revision"] is not None
    status, body, _ = node.get("/config", token=READER)
    assert status == 200 and body["company"] == "nimbus"


def test_a_revision_is_applied_without_a_restart_and_a_bad_one_is_refused_by_field(nodes):
    node = nodes("node-1").start()
    first = node.wait_ready()["revision"]
    grown = COMPANY + "    - {handle: dave, kind: agent, role: engineer, reports_to: maya}\n"
    status, body, _ = node.put("/config", grown.encode())
    assert status == 200, body
    assert body["generation"] == first + 1
    eventually(lambda: node.probe("/health")[1]["revision"] == first + 1, 30, "the new revision to apply", node)
    eventually(lambda: "dave" in node.probe("/health")[1]["seats"], 30, "the new seat to be claimed", node)
    status, body, _ = node.get("/events?type=config_revision_applied", token=READER)
    assert any(item["applied"] and item["revision"] == str(first + 1) for item in body["items"])

    status, body, _ = node.put("/config", (COMPANY + "    - {handle: Bad.Handle, kind: agent, role: x}\n").encode())
    assert status == 422 and "org.seats" in body["detail"] and "Bad.Handle" in body["detail"]
    status, body, _ = node.put("/config", grown.encode(), token=READER)
    assert status == 403 and "admin" in body["detail"]
    assert node.probe("/health")[1]["revision"] == first + 1  # the active revision keeps serving
    status, body, _ = node.get("/config", token=READER)
    assert status == 200 and "dave" in body["document"]
    assert node.proc.poll() is None
    node.stop()
    assert node.proc.returncode == 0


def test_the_admin_token_is_never_written_to_the_log(nodes):
    node = nodes("node-1").start()
    node.wait_ready()
    node.get("/events", token="wrong-token-but-long-enough")
    node.put("/config", b"name: [", token=ADMIN)
    node.stop()
    text = node.log_text()
    assert ADMIN not in text and READER not in text


def test_ctrl_c_says_which_turns_the_drain_waits_for_and_how_to_cut_it(nodes):
    import json
    import urllib.request

    slow = COMPANY.replace("delay_seconds: 0.1", "delay_seconds: 3")
    node = nodes("node-1").start(company=slow)
    node.wait_ready()
    eventually(lambda: "alice" in node.probe("/health")[1]["seats"], 30, "alice to be claimed", node)
    request = urllib.request.Request(f"{node.base}/seats/alice/tasks", data=json.dumps({"text": "take your time"}).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
    eventually(lambda: node.get("/seats/alice", token=READER)[1]["state"] == "working", 30, "alice's turn to start", node)
    node.signal(signal.SIGINT)
    eventually(lambda: "crewlet: stopping" in node.log_text(), 10, "the note on the terminal", node)
    assert "waiting for 1 running turn (alice) to finish; press Ctrl-C again to stop at once" in node.log_text()
    assert node.wait_exit() == 0  # the turn finished, then the node drained
    messages = [line["msg"] for line in node.log_lines()]
    assert messages.index("node_draining") < messages.index("node_stopped")
