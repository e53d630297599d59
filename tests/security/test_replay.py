"""Finding 12: a captured signed GitHub or Jira body was accepted again when only the delivery id
header changed (no extra turn ran, but no notification_skipped was recorded either). Now the
fleet's dedupe slot is keyed on the body's digest: the vendor's retry is a plain duplicate, a
replay under a new id is answered duplicate and recorded as skipped (notify.edge)."""
from __future__ import annotations

import uuid

import pytest

from notify.skips import GATE_REFUSED
from tests.notify import deliveries as d
from tests.notify.http import post, wait_rows
from tests.security.conftest import no_traceback, still_ready

pytestmark = pytest.mark.timeout(120)


def _replayed(node, source: str, body: bytes, headers_for) -> None:
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    status, answer, _ = post(node, f"/webhooks/{source}", body, headers_for(body, first))
    assert status == 202, answer
    status, answer, _ = post(node, f"/webhooks/{source}", body, headers_for(body, first))
    assert status == 200 and answer == {"status": "duplicate", "delivery_id": first}  # the vendor's retry
    status, answer, _ = post(node, f"/webhooks/{source}", body, headers_for(body, second))
    assert status == 200, answer
    assert answer == {"status": "duplicate", "delivery_id": second, "replay_of": first}
    skipped = wait_rows(node, f"the {source} replay recorded as skipped",
                        lambda found: any(r["type"] == "notification_skipped" and r.get("delivery_id") == second
                                          for r in found))
    row = next(r for r in skipped if r["type"] == "notification_skipped" and r.get("delivery_id") == second)
    assert row["reason"] == GATE_REFUSED
    assert row["detail"].startswith(f"replayed: this body was accepted under delivery id {first}")
    assert not any(r["type"] == "notification_skipped" and r.get("delivery_id") == first for r in skipped)


def test_a_github_body_replayed_under_a_new_delivery_id_is_recorded_as_skipped(node):
    body = d.dumps(d.github_comment("@octo-alice replay me"))
    _replayed(node, "github", body, lambda b, ident: d.github_headers(b, delivery=ident))
    still_ready(node)


def test_a_jira_body_replayed_under_a_new_identifier_is_recorded_as_skipped(node):
    body = d.dumps(d.jira_event(text="[~accountid:acc-bob] replay me"))
    _replayed(node, "jira", body, lambda b, ident: d.jira_headers(b, delivery=ident))
    still_ready(node)
    no_traceback(node)
