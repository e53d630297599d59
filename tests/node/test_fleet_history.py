"""The fleet's history on real node processes (issue "The fleet": "A trace started by a webhook on
an ingress-only node and ending in a turn on a seats-only node is read whole from any node, with
coverage.complete: true"; seed 000, "Reading the fleet's history"; seed 002, "Custody", "OTLP
Export").

Three processes on one nats-server, their coordination on its KV: `ingress` alone (takes the
webhook, routes it, serves the API, keeps no rows), `seats` alone (runs the turn, keeps no rows)
and `data,workers` (keeps both nodes' rows in custody, serves no API: a node without ingress
answers its probes only). Every node exports its spans to one OTLP/HTTP receiver the test runs.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import uuid

import pytest

from tests.node.external import ExternalNats
from tests.dashboard.test_browser import PASSWORD, USER, WAIT_MS, browser  # noqa: F401  (a fixture)
from tests.node.harness import READER, ROOT, NodeProcess, clean_env, eventually
from tests.notify import deliveries as d
from tests.notify.http import post
from tests.otlp import OtlpReceiver

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    home = tmp_path_factory.mktemp("fleet")
    broker = ExternalNats(home / "nats").start()
    receiver = OtlpReceiver().start()
    env = {**d.ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    nodes = {
        "data": NodeProcess(home=home / "node-data", node_id="node-data"),
        "ingress": NodeProcess(home=home / "node-edge", node_id="node-edge"),
        "seats": NodeProcess(home=home / "node-seats", node_id="node-seats"),
    }
    # The default lease TTL (45 s): a node stopped for less than that is still live by its lease.
    common = {"stream": broker.stream_block(), "coordination": "embedded-kv", "sweep": 0.3}
    try:
        nodes["data"].start("--roles", "data,workers", company=d.company_yaml(), env=env, **common)
        nodes["data"].wait_ready()
        nodes["ingress"].start("--roles", "ingress", company=None, env=env, **common)
        nodes["seats"].start("--roles", "seats", company=None, env=env, **common)
        for node in nodes.values():
            node.wait_ready()
        eventually(lambda: set((nodes["seats"].probe("/health") or (0, {}))[1].get("seats", ())) == {"alice", "bob", "carol"},
                   60, "the seats node to hold every seat", nodes["seats"])
        yield nodes, receiver
    finally:
        for node in nodes.values():
            node.stop()
        receiver.stop()
        broker.stop()


@pytest.fixture(scope="module")
def delivered(fleet):
    """One GitHub comment on the ingress node, under a caller's trace, and the turn it wakes."""
    nodes, _ = fleet
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    body = d.dumps(d.github_comment("@octo-alice can you take a look?", number=7, author="octo-maya",
                                    pr_author="nobody-external"))
    status, answer, _ = post(nodes["ingress"], "/webhooks/github", body,
                             {**d.github_headers(body), "traceparent": f"00-{trace_id}-{parent}-01"})
    assert status == 202, answer
    assert answer["trace_id"] == trace_id

    def whole():
        status, found, _ = nodes["ingress"].get(f"/events/trace/{trace_id}", token=READER)
        assert status == 200, found
        types = {i["type"] for i in found["items"]}
        return found if {"inbound_delivery", "agent_turn_completed"} <= types else None

    return trace_id, parent, eventually(whole, 90, "the turn's events to reach the fleet's history", nodes["seats"])


def test_a_trace_begun_on_the_ingress_node_and_ended_on_the_seats_node_is_read_whole_from_any_node(fleet, delivered):
    nodes, _ = fleet
    trace_id, parent, first = delivered
    by_type = {}
    for item in first["items"]:
        by_type.setdefault(item["type"], []).append(item)
    assert by_type["inbound_delivery"][0]["node"] == "node-edge"          # the webhook, on the ingress node
    assert {i["node"] for i in by_type["agent_turn_completed"]} == {"node-seats"}  # the turn, on the seats node
    assert {i["agent_handle"] for i in by_type["agent_turn_completed"]} >= {"alice"}
    assert by_type["inbound_delivery"][0]["parent_span_id"] == parent
    expected = {i["id"] for i in first["items"]}
    # Every node that serves the API reads the whole trace, every live node answering; a node
    # without ingress serves its probes alone (seed 002, "Probes"), and answers the fleet's
    # questions all the same (it is in every coverage).
    for name in ("ingress", "data"):
        node = nodes[name]
        if name == "data":
            status, _, _ = node.get(f"/events/trace/{trace_id}", token=READER)
            assert status == 404  # no ingress role: no API on this node
            continue
        status, found, _ = node.get(f"/events/trace/{trace_id}", token=READER)
        assert status == 200, found
        assert {i["id"] for i in found["items"]} == expected
        assert found["coverage"]["complete"] is True
        assert {n["id"]: n["answered"] for n in found["coverage"]["nodes"]} == \
            {"node-edge": True, "node-seats": True, "node-data": True}
        assert found["cut"] == 0
    # One event, and a page, read the same way.
    turn = by_type["agent_turn_completed"][0]
    status, one, _ = nodes["ingress"].get(f"/events/{turn['id']}", token=READER)
    assert status == 200 and one["id"] == turn["id"] and one["coverage"]["complete"]
    status, page, _ = nodes["ingress"].get(f"/events?trace_id={trace_id}&limit=500", token=READER)
    assert status == 200 and {i["id"] for i in page["items"]} == expected and page["coverage"]["complete"]


def test_every_event_of_the_trace_is_kept_once_on_the_data_node(fleet, delivered):
    nodes, _ = fleet
    trace_id, _, found = delivered
    ids = [i["id"] for i in found["items"]]
    assert len(ids) == len(set(ids))
    # Nothing the stateless nodes published is on their own stores: the ingress node's own
    # answer to the question, asked of it alone, would be empty -- its coverage says it
    # answered, and the rows come from node-data.
    log = [line for line in nodes["data"].log_lines() if line.get("msg") == "custody_copy_deleted"]
    assert log == []  # one data node: every batch kept where it was written


def test_one_trace_from_the_webhook_to_the_turn_reaches_the_otlp_receiver(fleet, delivered):
    nodes, receiver = fleet
    trace_id, parent, _ = delivered

    def spans():
        got = {s.name: s for s in receiver.of_trace(trace_id)}
        return got if {"webhook.receive", "notify.route", "agent.turn", "agent.turn.respond", "llm.round"} <= set(got) else None

    got = eventually(spans, 30, "the trace's spans at the receiver")
    assert got["webhook.receive"].parent_span_id == parent
    assert got["notify.route"].parent_span_id == got["webhook.receive"].span_id
    assert got["agent.turn"].parent_span_id == got["notify.route"].span_id
    assert got["agent.turn.respond"].parent_span_id == got["agent.turn"].span_id
    assert got["llm.round"].parent_span_id == got["agent.turn.respond"].span_id
    assert got["webhook.receive"].attributes["crewlet.node"] == "node-edge"
    assert got["agent.turn"].attributes["crewlet.node"] == "node-seats"
    assert got["agent.turn"].resource["service.name"] == "crewlet"
    assert len([s for s in receiver.of_trace(trace_id) if s.name == "llm.round"]) == 1  # one round, one span


def test_django_spans_the_http_surface_it_serves(fleet, delivered):
    nodes, receiver = fleet
    status, _, _ = nodes["ingress"].get("/events?limit=1", token=READER)
    assert status == 200

    def server_span():
        return [s for s in receiver.spans if s.kind == 2 and s.attributes.get("crewlet.node") == "node-edge"
                and "/events" in str(s.attributes.get("http.target") or s.attributes.get("url.path") or s.name)]

    assert eventually(server_span, 30, "Django's span of GET /events")


def test_a_live_node_that_does_not_answer_is_named_in_the_answer_and_on_the_dashboard(fleet, delivered, browser):
    """The seats node stopped (SIGSTOP) inside its lease: still live, silent. Every read names
    it with the reason and says the answer is not complete; the dashboard's trace tree and
    event log say so above what they show. Resumed, the answers are whole again."""
    from playwright.sync_api import expect

    nodes, _ = fleet
    trace_id, _, whole = delivered
    edge = nodes["ingress"]
    made = subprocess.run([sys.executable, "manage.py", "createsuperuser", "--noinput"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60,
                          env={**clean_env(), "CREWLET_CONFIG": str(edge.home / "crewlet.yaml"), "DJANGO_SUPERUSER_USERNAME": USER,
                               "DJANGO_SUPERUSER_PASSWORD": PASSWORD, "DJANGO_SUPERUSER_EMAIL": "operator@example.com"})
    assert made.returncode == 0, made.stderr
    nodes["seats"].signal(signal.SIGSTOP)
    try:
        status, found, _ = edge.get(f"/events/trace/{trace_id}", token=READER, timeout=10)
        assert status == 200, found
        coverage = {n["id"]: n for n in found["coverage"]["nodes"]}
        assert found["coverage"]["complete"] is False
        assert coverage["node-seats"] == {"id": "node-seats", "answered": False,
                                          "error": "timeout: no answer inside the 2 s fleet read budget"}
        assert coverage["node-data"]["answered"] and coverage["node-edge"]["answered"]
        assert {i["id"] for i in found["items"]} == {i["id"] for i in whole["items"]}  # its rows are kept elsewhere

        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(edge.base + "/dashboard/login/")
        page.fill("input[name=username]", USER)
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(edge.base + "/dashboard/")
        page.goto(f"{edge.base}/dashboard/traces/{trace_id}/")
        notice = page.locator("#coverage")
        expect(notice).to_be_visible()
        expect(notice).to_contain_text("2 of 3 nodes answered")
        expect(notice).to_contain_text("node-seats")
        expect(notice).to_contain_text("timeout")
        expect(page.locator('.wf-row[data-kind="turn"]').first).to_be_visible()
        page.goto(f"{edge.base}/dashboard/events/")
        expect(page.locator("#coverage")).to_contain_text("node-seats")
        # The trace box asks the fleet too: the edge keeps no rows, the data node holds the trace.
        page.goto(f"{edge.base}/dashboard/traces/?q={trace_id[:8]}")
        page.wait_for_url(f"{edge.base}/dashboard/traces/{trace_id}/")
        # The seat page lists alice's turn, run on the seats node and kept by the data node.
        page.goto(f"{edge.base}/dashboard/seats/alice/")
        expect(page.locator("#seat-turns tbody tr[data-outcome]").first).to_be_visible()
        expect(page.locator("#seat-events li[data-event-id]").first).to_be_visible()
        expect(page.locator("#seat-coverage")).to_contain_text("node-seats")
        page.goto(f"{edge.base}/dashboard/traces/?q=fedcba98")
        expect(page.locator('[data-outcome="none"]')).to_contain_text("among the nodes that answered")
        expect(page.locator('[data-outcome="partial"]')).to_contain_text("node-seats")
        context.close()
    finally:
        nodes["seats"].signal(signal.SIGCONT)

    def whole_again():
        status, found, _ = edge.get(f"/events/trace/{trace_id}", token=READER, timeout=10)
        return status == 200 and found["coverage"]["complete"]

    eventually(whole_again, 30, "the seats node to answer again once resumed")
