"""A node process serving the webhook routes, and the requests a vendor would make to it."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from tests.node.harness import READER, NodeProcess, eventually


def post(node: NodeProcess, path: str, body: bytes, headers: dict | None = None, timeout: float = 10.0):
    """(status, JSON body, headers) of one POST."""
    request = urllib.request.Request(node.base + path, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, _json(response.read()), response.headers  # case-insensitive, as HTTP names are
    except urllib.error.HTTPError as err:
        return err.code, _json(err.read()), err.headers


def _json(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return None


def rows(node: NodeProcess, **query) -> list[dict]:
    """Every stored row matching the query (GET /events, all pages)."""
    from urllib.parse import urlencode

    out, cursor = [], None
    while True:
        params = {**query, "limit": 500, **({"cursor": cursor} if cursor else {})}
        status, body, _ = node.get("/events?" + urlencode(params, doseq=True), token=READER)
        assert status == 200, body
        out += body["items"]
        cursor = body.get("next_cursor")
        if not cursor:
            return out


def trace_rows(node: NodeProcess, trace_id: str) -> list[dict]:
    status, body, _ = node.get(f"/events/trace/{trace_id}", token=READER)
    assert status == 200, body
    return body["items"]


def wait_rows(node: NodeProcess, what: str, predicate, timeout: float = 30.0, **query) -> list[dict]:
    """Poll GET /events until `predicate(rows)` holds; return the rows."""
    found: list[dict] = []

    def check():
        found[:] = rows(node, **query)
        return predicate(found)

    eventually(check, timeout, what, node)
    return found
