"""Finding 7: PUT /config expanded any environment variable into any field, so
`${CREWLET_SECRET_KEY_DEV}` in a seat title handed the key to every read-only token through
GET /seats/alice. Now a document sent over the API may reference a variable only in a secret
field, and never one of the node's own credentials; the file given at boot keeps expanding."""
from __future__ import annotations

import os

import pytest

from tests.node.harness import ADMIN, KEY, READER, eventually
from tests.notify import deliveries as d
from tests.security.conftest import no_traceback, start_node, still_ready

pytestmark = pytest.mark.timeout(120)


def _company(title: str, github_secret: str = "${GITHUB_WEBHOOK_SECRET}") -> str:
    seats = d.SEATS.replace("{handle: alice, kind: agent, role: engineer,", f"{{handle: alice, kind: agent, title: \"{title}\", role: engineer,")
    integrations = d.INTEGRATIONS.replace('webhook_secret: "${GITHUB_WEBHOOK_SECRET}"', f'webhook_secret: "{github_secret}"')
    return f"name: nimbus\nproviders:\n  llm:\n    - {{name: local, kind: scripted, reply: ok}}\n{seats}{integrations}"


def test_the_keyring_variable_in_a_seat_title_is_refused_by_name(node):
    status, body, _ = node.put("/config", _company("${CREWLET_SECRET_KEY_DEV}").encode(), token=ADMIN)
    assert status == 422, body
    assert "org.seats[1].title: ${CREWLET_SECRET_KEY_DEV} is one of this node's own credentials" in body["detail"]
    status, seat, _ = node.get("/seats/alice", token=READER)
    assert status == 200 and os.environ["CREWLET_SECRET_KEY_DEV"] not in str(seat)


def test_any_variable_outside_a_secret_field_is_refused_naming_the_field(node):
    status, body, _ = node.put("/config", _company("${HOME}").encode(), token=ADMIN)
    assert status == 422, body
    assert "org.seats[1].title: ${HOME} is not expanded in a document sent over the API outside a secret field" in body["detail"]


def test_a_node_credential_is_refused_even_in_a_secret_field_whatever_its_name(node):
    # SNEAKY holds the node's key material under an innocent name (start_node passes it).
    status, body, _ = node.put("/config", _company("Engineer", github_secret="${SNEAKY}").encode(), token=ADMIN)
    assert status == 422, body
    assert "integrations.github.webhook_secret: ${SNEAKY} is one of this node's own credentials" in body["detail"]


def test_a_reference_in_a_secret_field_is_taken(node):
    status, body, _ = node.put("/config", _company("Engineer").encode(), token=ADMIN)
    assert status == 200, body
    eventually(lambda: node.get("/seats/alice", token=READER)[1]["title"] == "Engineer", 30, "the revision to apply", node)
    still_ready(node)
    no_traceback(node)


def test_the_file_given_at_boot_expands_anywhere_as_before(tmp_path):
    booted = start_node(tmp_path, company=_company("${TEAM_TITLE}"), env={"TEAM_TITLE": "Platform"})
    try:
        status, seat, _ = booted.get("/seats/alice", token=READER)
        assert status == 200 and seat["title"] == "Platform"
    finally:
        booted.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    made = start_node(tmp_path_factory.mktemp("expansion"), env={"SNEAKY": KEY})
    try:
        yield made
    finally:
        made.stop()
