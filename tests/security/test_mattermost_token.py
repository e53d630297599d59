"""Finding 3: Mattermost's token travels in the body and was stored in clear in every delivery
record (SQLite and JetStream), served by GET /events and the dashboard to read-only tokens.
Now the token is removed before anything is recorded or queued (Mattermost.scrubbed)."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

import pytest

from tests.notify import deliveries as d
from tests.notify.http import post, rows, wait_rows
from tests.security.conftest import no_traceback, still_ready

pytestmark = pytest.mark.timeout(120)
TOKEN = d.SECRETS["mattermost"]


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_neither_a_json_nor_a_form_delivery_leaves_its_token_anywhere(node):
    as_json = d.mattermost_post("@alice-mm json delivery", post_id="pjson0000000000000000000001")
    status, body, _ = post(node, "/webhooks/mattermost", d.dumps(as_json), d.mattermost_headers())
    assert status == 202, body
    form = {k: str(v) for k, v in d.mattermost_post("@alice-mm form delivery", post_id="pform0000000000000000000001").items()}
    status, body, _ = post(node, "/webhooks/mattermost", urlencode(form).encode(),
                           {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 202, body

    records = wait_rows(node, "both deliveries recorded and routed",
                        lambda found: {r.get("delivery_id") for r in found if r["type"] == "inbound_delivery"}
                        >= {"pjson0000000000000000000001", "pform0000000000000000000001"})
    for record in [r for r in records if r["type"] == "inbound_delivery"]:
        assert TOKEN not in json.dumps(record)
        raw = record["raw_body"]
        assert ("token" not in json.loads(raw)) if raw.startswith("{") else ("token=" not in raw)
        assert "text" in raw  # the rest of the delivery is kept
    wait_rows(node, "both wakes", lambda found: sum(r["type"] == "external_notification" for r in found) >= 2)
    assert TOKEN not in json.dumps(rows(node))  # nothing a read token can list carries it
    # Nor the store's own files: the node's SQLite file and the broker's JetStream store.
    assert _files_holding(node.home, TOKEN.encode()) == []
    still_ready(node)
    no_traceback(node)
