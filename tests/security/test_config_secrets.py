"""Finding 2: GET /config redacted secrets by a line pattern that missed flow-style maps, quoted
keys and block scalars, so a read-only token got the GitHub secret back and a delivery forged
with it was accepted; the admin page and the Company page shared the code. Now every rendering
is one redaction of the parsed document, by the schema (engine.config.secretfields)."""
from __future__ import annotations

import json
import re

import pytest

from tests.node.harness import ADMIN, READER
from tests.notify import deliveries as d
from tests.notify.http import post
from tests.security.conftest import Session, make_user, no_traceback, still_ready

pytestmark = pytest.mark.timeout(120)

LITERALS = {
    "github": "gh-flow-literal-0001",
    "slack": "slack-quoted-key-literal-0002",
    "gitlab": "gitlab-block-scalar-literal-0003",
    "jira": "jira-anchored-literal-0004",
    "mattermost": "mattermost-folded-literal-0005",
    "openai": "sk-provider-literal-0006",
}

DOCUMENT = f"""name: nimbus
providers:
  llm:
    - {{name: local, kind: scripted, reply: ok}}
    - {{name: remote, kind: openai, base_url: "http://127.0.0.1:9", model: m, api_key: {LITERALS["openai"]}}}
{d.SEATS}integrations:
  github: {{webhook_secret: "{LITERALS["github"]}", users: {{octo-alice: alice}}}}
  "slack":
    "signing_secret": '{LITERALS["slack"]}'
  gitlab:
    token: |
      {LITERALS["gitlab"]}
    users: {{alice-gl: alice}}
  jira:
    webhook_secret: &jira {LITERALS["jira"]}
  mattermost:
    token: >-
      {LITERALS["mattermost"]}
"""
USER, PASSWORD = "auditor", "an-auditor-password-0123"


@pytest.fixture(scope="module")
def imported(node):
    status, body, _ = node.put("/config", DOCUMENT.encode(), token=ADMIN)
    assert status == 200, body
    make_user(node, USER, PASSWORD)
    return body


def _no_literal(text: str) -> None:
    for source, literal in LITERALS.items():
        assert literal not in text, f"{source}'s secret was shown"


def test_a_read_token_gets_every_secret_field_redacted_in_every_yaml_style(node, imported):
    status, body, _ = node.get("/config", token=READER)
    assert status == 200, body
    _no_literal(json.dumps(body))
    document = body["document"]
    assert document.count('"[redacted]"') == len(LITERALS)
    assert 'webhook_secret: &jira "[redacted]"' in document  # the anchor kept, its value hidden
    assert "users: {octo-alice: alice}" in document          # what is not secret is shown as written


def test_the_redacted_secret_forges_nothing(node, imported):
    body = d.dumps(d.github_comment("@octo-alice look"))
    status, answer, _ = post(node, "/webhooks/github", body, d.github_headers(body, secret="[redacted]"))
    assert status == 401 and answer["header"] == "X-Hub-Signature-256"
    status, answer, _ = post(node, "/webhooks/github", body, d.github_headers(body, secret=LITERALS["github"]))
    assert status == 202, answer  # the secret itself still works: only its showing was removed


def test_the_admin_page_and_the_company_page_show_the_same_redaction(node, imported):
    session = Session(node.base)
    status, headers, _ = session.sign_in(USER, PASSWORD)
    assert status == 302 and headers["Location"] == "/dashboard/"
    status, _, page = session.request("GET", "/dashboard/company/")
    assert status == 200
    _no_literal(page)
    assert "[redacted]" in page
    status, _, listing = session.request("GET", "/admin/engine/companyrevision/")
    assert status == 200
    ids = sorted({int(i) for i in re.findall(r"/admin/engine/companyrevision/(\d+)/change/", listing)})
    assert ids
    for ident in ids:
        status, _, change = session.request("GET", f"/admin/engine/companyrevision/{ident}/change/")
        assert status == 200
        _no_literal(change)
    still_ready(node)


def test_no_secret_reaches_the_log_or_the_event_store(node, imported):
    _no_literal(node.log_text())
    status, body, _ = node.get("/events?limit=500", token=READER)
    assert status == 200
    _no_literal(json.dumps(body))
    no_traceback(node)
