"""`POST /webhooks/{source}` on a real node process (seed 000, "Distributed Tracing"; seed 002,
"Exposing webhooks without the admin API"): each source's signature checked (right, wrong,
missing -- the 401 names the header), Slack's stale timestamp and its challenge, 413 over 8 MiB,
404 for an unknown or unconnected source, 400 plus a skip row for an unreadable body, a
vendor's retry taken once, an inbound traceparent honoured, and api.port answering 404 with a
hint once api.public is set."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest

from tests.node.harness import ADMIN, NodeProcess, eventually, node_config
from tests.notify import deliveries as d
from tests.notify.http import post, rows, trace_rows, wait_rows

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """One node with all five integrations, secrets from the process environment."""
    node = NodeProcess(home=tmp_path_factory.mktemp("edge") / "node-1")
    node.start(company=d.company_yaml(), env=d.ENV)
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


def signed(source: str) -> tuple[bytes, dict]:
    """A delivery each source signs correctly, addressed to alice."""
    if source == "github":
        body = d.dumps(d.github_comment("@octo-alice please look"))
        return body, d.github_headers(body)
    if source == "slack":
        body = d.dumps(d.slack_message("<@U0ALICE> please look"))
        return body, d.slack_headers(body)
    if source == "gitlab":
        return d.dumps(d.gitlab_note("@alice-gl please look")), d.gitlab_headers()
    if source == "jira":
        body = d.dumps(d.jira_event(text="[~accountid:acc-bob] please look"))
        return body, d.jira_headers(body)
    return d.dumps(d.mattermost_post("@alice-mm please look")), d.mattermost_headers()


def forged(source: str) -> tuple[bytes, dict]:
    """The same delivery under a wrong secret."""
    if source == "github":
        body = d.dumps(d.github_comment("x"))
        return body, d.github_headers(body, secret="wrong")
    if source == "slack":
        body = d.dumps(d.slack_message("x"))
        return body, d.slack_headers(body, secret="wrong")
    if source == "gitlab":
        return d.dumps(d.gitlab_note("x")), d.gitlab_headers(token="wrong")
    if source == "jira":
        body = d.dumps(d.jira_event())
        return body, d.jira_headers(body, secret="wrong")
    return d.dumps(d.mattermost_post("x", token="wrong")), d.mattermost_headers()


SIGNATURE_HEADER = {"github": "X-Hub-Signature-256", "slack": "X-Slack-Signature", "gitlab": "X-Gitlab-Token",
                    "jira": "X-Hub-Signature", "mattermost": "token"}
SOURCES = sorted(SIGNATURE_HEADER)


@pytest.mark.parametrize("source", SOURCES)
def test_a_correctly_signed_delivery_is_accepted(hub, source):
    body, headers = signed(source)
    status, answer, _ = post(hub, f"/webhooks/{source}", body, headers)
    assert status == 202, answer
    assert answer["status"] == "accepted" and answer["delivery_id"]


@pytest.mark.parametrize("source", SOURCES)
def test_a_wrong_signature_is_a_401_naming_the_header(hub, source):
    body, headers = forged(source)
    status, answer, _ = post(hub, f"/webhooks/{source}", body, headers)
    assert status == 401, answer
    assert answer["detail"].startswith(f"{SIGNATURE_HEADER[source]}: does not match")
    assert answer["header"] == SIGNATURE_HEADER[source]


@pytest.mark.parametrize("source", SOURCES)
def test_a_missing_signature_is_a_401_naming_the_header(hub, source):
    body, headers = signed(source)
    if source == "mattermost":
        body = d.dumps({k: v for k, v in d.mattermost_post("x").items() if k != "token"})
    headers = {k: v for k, v in headers.items() if k != SIGNATURE_HEADER[source]}
    status, answer, _ = post(hub, f"/webhooks/{source}", body, headers)
    assert status == 401, answer
    assert answer["detail"] == f"{SIGNATURE_HEADER[source]}: " + answer["detail"].split(": ", 1)[1]
    assert "missing" in answer["detail"] and answer["header"] == SIGNATURE_HEADER[source]


@pytest.mark.parametrize("offset", [-301, 301], ids=["stale", "future-dated"])
def test_a_slack_delivery_outside_the_five_minute_window_is_refused_as_stale(hub, offset):
    body = d.dumps(d.slack_message("<@U0ALICE> late"))
    status, answer, _ = post(hub, "/webhooks/slack", body, d.slack_headers(body, stamp=int(time.time()) + offset))
    assert status == 401 and answer["header"] == "X-Slack-Request-Timestamp"
    assert "stale" in answer["detail"]


def test_slacks_url_verification_challenge_is_answered(hub):
    body = d.dumps({"type": "url_verification", "token": "t", "challenge": "c-123"})
    status, answer, _ = post(hub, "/webhooks/slack", body, d.slack_headers(body))
    assert (status, answer) == (200, {"challenge": "c-123"})


def test_a_body_over_8_mib_is_a_413(hub):
    body = b'{"pad": "' + b"x" * (8 * 1024 * 1024) + b'"}'
    status, answer, _ = post(hub, "/webhooks/github", body, d.github_headers(body))
    assert status == 413 and "8 MiB" in answer["detail"]


def test_an_unknown_source_is_a_404_listing_the_sources(hub):
    status, answer, _ = post(hub, "/webhooks/bitbucket", b"{}", {"Content-Type": "application/json"})
    assert status == 404
    assert "bitbucket" in answer["detail"]
    assert "github, gitlab, jira, mattermost, slack" in answer["hint"]


def test_an_unreadable_body_with_a_valid_signature_is_a_400_and_a_skip_row(hub):
    body = b'{"action": "created", '
    status, answer, _ = post(hub, "/webhooks/github", body, d.github_headers(body))
    assert status == 400 and "not JSON" in answer["detail"]
    found = wait_rows(hub, "the payload skip row", lambda r: any("not JSON" in x["detail"] for x in r),
                      type="notification_skipped")
    skip = next(x for x in found if "not JSON" in x["detail"])
    assert skip["reason"] == "its payload cannot be read" and skip["source"] == "github"


def test_a_vendors_retry_of_one_delivery_is_taken_once(hub):
    body = d.dumps(d.github_comment("@octo-alice retried"))
    delivery = str(uuid.uuid4())
    first = post(hub, "/webhooks/github", body, d.github_headers(body, delivery=delivery))
    again = post(hub, "/webhooks/github", body, d.github_headers(body, delivery=delivery))
    assert first[0] == 202 and (again[0], again[1]["status"]) == (200, "duplicate")
    wait_rows(hub, "the wake", lambda r: any(x["delivery_id"] == delivery for x in r), type="external_notification")
    records = [x for x in rows(hub, type="webhook:issue_comment") if x["delivery_id"] == delivery]
    wakes = [x for x in rows(hub, type="external_notification") if x["delivery_id"] == delivery]
    assert len(records) == 1 and len(wakes) == 1


def test_an_inbound_traceparent_is_honoured_and_the_record_keeps_the_exact_bytes(hub):
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    body = d.dumps(d.github_comment("@octo-alice traced"))
    headers = {**d.github_headers(body), "traceparent": f"00-{trace_id}-{parent}-01"}
    status, answer, response_headers = post(hub, "/webhooks/github", body, headers)
    assert status == 202 and answer["trace_id"] == trace_id
    assert {k.lower(): v for k, v in response_headers.items()}["traceparent"].startswith(f"00-{trace_id}-")
    found = wait_rows(hub, "the delivery record", lambda r: any(x["trace_id"] == trace_id for x in r), type="webhook:issue_comment")
    record = next(x for x in found if x["trace_id"] == trace_id)
    assert record["parent_span_id"] == parent  # webhook.receive hangs under the caller's span
    assert record["raw_body"] == body.decode() and record["label"] == "webhook:issue_comment"
    assert "X-Hub-Signature-256" not in record["headers"]
    eventually(lambda: any(x["type"] == "external_notification" for x in trace_rows(hub, trace_id)), 30,
               "the wake under the caller's trace", hub)


def test_a_source_the_company_does_not_connect_is_a_404_not_connected(hub):
    without_mattermost = d.company_yaml(integrations=d.INTEGRATIONS.split("  mattermost:")[0])
    original = d.company_yaml()
    generation = hub.probe("/health")[1]["revision"]
    try:
        status, body, _ = hub.put("/config", without_mattermost.encode(), token=ADMIN)
        assert status == 200, body
        eventually(lambda: hub.probe("/health")[1]["revision"] == body["generation"], 30, "the revision to apply", hub)
        status, answer, _ = post(hub, "/webhooks/mattermost", d.dumps(d.mattermost_post("@alice-mm hi")), d.mattermost_headers())
        assert status == 404 and answer["detail"].startswith("not connected")
        assert "integrations.mattermost" in answer["detail"]
    finally:
        status, body, _ = hub.put("/config", original.encode(), token=ADMIN)
        assert status == 200 and body["generation"] != generation
        eventually(lambda: hub.probe("/health")[1]["revision"] == body["generation"], 30, "the restored revision", hub)


@dataclass
class PublicNode(NodeProcess):
    """A node whose Tier A sets api.public: its own port, for the vendors."""

    public_port: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.public_port = self.public_port or self.hold_port()

    def write(self, **config):
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / "crewlet.yaml"
        public = f'  public: {{port: {self.public_port}, host: 127.0.0.1, external_url: "http://127.0.0.1:{self.public_port}"}}\n'
        path.write_text(node_config(self.home, self.node_id, self.port, **config).replace("  auth:\n", public + "  auth:\n", 1))
        return path


def test_api_public_serves_the_webhooks_and_api_port_answers_them_404_naming_api_public(tmp_path):
    node = PublicNode(home=tmp_path / "node-public")
    node.start(company=d.company_yaml(), env=d.ENV)
    public = NodeProcess(home=node.home, port=node.public_port)  # the same process, its public socket
    try:
        node.wait_ready()
        body, headers = signed("github")
        status, answer, _ = post(node, "/webhooks/github", body, headers)
        assert status == 404 and answer["detail"].startswith("no_route")
        assert "api.public" in answer["hint"]
        status, answer, _ = post(public, "/webhooks/github", body, headers)
        assert status == 202, answer
        # Everything else on the public socket is the 404 of a path nothing serves: no probe,
        # nothing that says an admin port exists behind it, whatever credential is sent.
        for path in ("/health", "/ready", "/config", "/nothing-here"):
            status, answer, _ = public.get(path, token=ADMIN)
            assert (status, answer) == (404, {"detail": f"not found: {path}"})
        assert node.probe("/health")[0] == 200
    finally:
        node.stop()
